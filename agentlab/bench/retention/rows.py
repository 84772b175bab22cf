"""Retention's rows and its presence test: one case under one arm (:class:`RetentionRow`), their means
(:func:`aggregate`), and whether a gold evidence unit is in a projected request.

The definitions of every column are in :mod:`agentlab.bench.retention.questions`'s docstring, which
re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentlab.bench.retention.delivery import EvidenceMap
from agentlab.core.project import ProjectionResult
from agentlab.core.tools import Tool
from agentlab.events import Event
from agentlab.model.prompt_caching import CacheTotals

# ------------------------------------------------------------------------------------ rows


@dataclass(frozen=True)
class Question:
    """One case over a shared history: its id, the question text and its evidence map."""

    case_id: str
    text: str
    evidence: EvidenceMap


@dataclass(frozen=True)
class RetentionRow:
    """Retention of one case under one arm (definitions in the module docstring)."""

    case_id: str
    arm: str
    #: ``turns`` or ``tool_results``.
    delivery: str
    #: Gold evidence units found in the history (the denominator of every fraction).
    n_units: int
    #: Gold ids the history does not hold (not in any fraction).
    n_missing: int
    #: Share of the units present in the final request; ``None`` when the case has no unit.
    retained: float | None
    #: k -> share of the units present or found by the search within k hits; ``None`` without a
    #: recall tool (or without units).
    recoverable: dict[int, float | None]
    peak_prompt_tokens: int
    total_prompt_tokens: int
    final_prompt_tokens: int
    #: Requests the case sends (reads + the answer request).
    n_requests: int
    #: ROUGE-L recall of the evidence text against the summary texts; ``None`` without a summary.
    evidence_rouge_recall: float | None
    #: Ids of the units not present in the final request.
    lost_units: tuple[str, ...] = ()
    #: Events of the history the final request left out or replaced.
    n_hidden_events: int = 0
    #: The case's requests through a prompt cache (``None`` without a cache profile).
    cache: CacheTotals | None = None

    def as_dict(self) -> dict[str, Any]:
        """Flat, JSON-ready: ``recoverable`` becomes ``recoverable_at_<k>`` columns."""
        out = asdict(self)
        for k, value in out.pop("recoverable").items():
            out[f"recoverable_at_{k}"] = value
        out["lost_units"] = list(self.lost_units)
        out["cache"] = None if self.cache is None else self.cache.as_dict()
        return out


@dataclass(frozen=True)
class RetentionSummary:
    """The mean of a set of rows (one arm, one delivery): macro averages over cases."""

    arm: str
    delivery: str
    n_cases: int
    #: Cases with at least one unit (the fractions are averaged over these).
    n_scored: int
    retained: float | None
    recoverable: dict[int, float | None]
    mean_peak_prompt_tokens: float
    max_peak_prompt_tokens: int
    mean_total_prompt_tokens: float
    mean_final_prompt_tokens: float
    evidence_rouge_recall: float | None
    #: Cases whose peak prompt is over ``context_window`` (``None`` when no window was given).
    n_over_window: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def aggregate(rows: Sequence[RetentionRow], context_window: int | None = None) -> list[RetentionSummary]:
    """One :class:`RetentionSummary` per (arm, delivery), in first-seen order.

    Fractions are macro means over the cases with at least one unit; ``recoverable@k`` over the
    cases where it is defined (``None`` when it never is); token columns over every case.
    """
    groups: dict[tuple[str, str], list[RetentionRow]] = {}
    for row in rows:
        groups.setdefault((row.arm, row.delivery), []).append(row)
    out: list[RetentionSummary] = []
    for (arm, delivery), group in groups.items():
        ks = sorted({k for r in group for k in r.recoverable})
        out.append(RetentionSummary(
            arm=arm, delivery=delivery, n_cases=len(group), n_scored=sum(1 for r in group if r.n_units),
            retained=_mean([r.retained for r in group]),
            recoverable={k: _mean([r.recoverable.get(k) for r in group]) for k in ks},
            mean_peak_prompt_tokens=sum(r.peak_prompt_tokens for r in group) / len(group),
            max_peak_prompt_tokens=max(r.peak_prompt_tokens for r in group),
            mean_total_prompt_tokens=sum(r.total_prompt_tokens for r in group) / len(group),
            mean_final_prompt_tokens=sum(r.final_prompt_tokens for r in group) / len(group),
            evidence_rouge_recall=_mean([r.evidence_rouge_recall for r in group]),
            n_over_window=None if context_window is None else sum(1 for r in group
                                                                  if r.peak_prompt_tokens > context_window)))
    return out


# --------------------------------------------------------------------------- presence


def normalise(text: str) -> str:
    """The form the presence test compares: whitespace runs collapsed to one space, ends stripped."""
    return " ".join(text.split())


def request_texts(result: ProjectionResult) -> list[str]:
    """The normalised content of every message of the projected request."""
    return [normalise(m.content) for m in result.request.messages if m.content]


def units_present(evidence: EvidenceMap, texts: Sequence[str]) -> list[bool]:
    """Per unit of ``evidence``: whether every piece's text is a substring of one of ``texts``."""
    return [all(piece_in(p.text, texts) for p in unit.pieces) for unit in evidence.units]


def piece_in(text: str, texts: Sequence[str]) -> bool:
    """Whether the evidence piece ``text`` appears, normalised, in one of ``texts``."""
    needle = normalise(text)
    return any(needle in t for t in texts)


@dataclass(frozen=True)
class HistoryGroup:
    """One history and the questions asked over it (a QMSum meeting, a LoCoMo conversation, a LongMemEval item)."""

    session_id: str
    delivery: str
    events: tuple[Event, ...]
    tools: tuple[Tool, ...]
    questions: tuple[Question, ...]


__all__ = [
    "HistoryGroup",
    "Question",
    "RetentionRow",
    "RetentionSummary",
    "aggregate",
    "normalise",
    "request_texts",
    "units_present",
]
