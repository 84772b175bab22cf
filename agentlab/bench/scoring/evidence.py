"""Evidence recall@k and hit@k: how much of a question's gold evidence a retriever's ranking holds.

The one loop every model-free retrieval measure runs: for each depth ``k``, the per-k metrics of
:mod:`agentlab.bench.scoring.metrics` (:func:`~agentlab.bench.scoring.metrics.evidence_recall_at_k`,
:func:`~agentlab.bench.scoring.metrics.evidence_hit_at_k`) of one question, then their mean over
questions. A question without gold evidence has no score (``None``) and is left out of the mean,
which the caller counts as ``with_evidence``.

* :func:`at_k` grades one ranking cut at each ``k`` (LoCoMo's preload window ranks once).
* :func:`evidence_at_k` asks ``session_search`` once per ``k`` — its ``top_k`` changes what the
  fallback search returns, so the top 5 need not be the first 5 of the top 10 — and grades each
  answer with a benchmark's ``grade``: :func:`id_grade` for gold event ids (LongMemEval's
  ``has_answer`` turns); a benchmark with other gold (QMSum's relevant spans) passes its own.
* :func:`mean_at_k` averages per-question results over a selection (``--retrieval-only``), over the
  questions that have evidence; :func:`mean_rows` divides by every question asked (QMSum's rule).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agentlab.bench.scoring.metrics import evidence_hit_at_k, evidence_recall_at_k, mean

__all__ = ["Grade", "at_k", "evidence_at_k", "id_grade", "mean_at_k", "mean_rows", "metric_names"]

#: ``grade(ranked_event_ids, k)`` → (evidence recall, evidence hit) of one search of depth ``k``.
Grade = Callable[[list[str], int], tuple[float, float]]


def metric_names(ks: Sequence[int], *, by_metric: bool = False, prefix: str = "") -> list[str]:
    """``recall@k`` and ``hit@k`` names for ``ks`` (after ``prefix``): per ``k``, or every recall then every hit."""
    if by_metric:
        return [f"{prefix}recall@{k}" for k in ks] + [f"{prefix}hit@{k}" for k in ks]
    return [f"{prefix}{name}@{k}" for k in ks for name in ("recall", "hit")]


def id_grade(evidence: Iterable[str]) -> Grade:
    """The :data:`Grade` of gold evidence ids: share of them among the top ``k``, and whether any is there."""
    gold = list(evidence)
    if not gold:
        raise ValueError("no gold evidence ids to grade against (leave such a question out)")

    def grade(ranked: list[str], k: int) -> tuple[float, float]:
        recall, hit = evidence_recall_at_k(ranked, gold, k), evidence_hit_at_k(ranked, gold, k)
        assert recall is not None and hit is not None  # gold is not empty
        return recall, hit

    return grade


def at_k(ranked: Sequence[str], evidence: Iterable[str], ks: Sequence[int]) -> dict[str, float] | None:
    """``{"recall@k": …, "hit@k": …}`` of one question's ranking (ids best first) cut at each ``k``.

    ``None`` when the question has no gold evidence.
    """
    gold = list(evidence)
    if not gold:
        return None
    grade = id_grade(gold)
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall@{k}"], out[f"hit@{k}"] = grade(list(ranked), k)
    return out


async def evidence_at_k(service: Any, session: Any, policy: Any, query: str, ks: Sequence[int], grade: Grade,
                        scope: str = "current_session") -> dict[str, float]:
    """``evidence_recall@k`` and ``evidence_hit@k`` of ``session_search`` for ``query``, one search per ``k``.

    The search tool's own function (:func:`agentlab.recall.search.search_session`, no model, no
    run); ``scope="current_session"`` by default: measured before the run, nothing is hidden yet,
    and once a summary covers everything ``current_hidden`` searches the same events.
    """
    from agentlab.recall.search import search_session

    out: dict[str, float] = {}
    for k in ks:
        result = await search_session(service, session, policy, query, scope=scope, top_k=k)
        recall, hit = grade([str(r.get("event_id")) for r in result["results"]], k)
        out[f"evidence_recall@{k}"] = recall
        out[f"evidence_hit@{k}"] = hit
    return out


def mean_at_k(rows: Iterable[Mapping[str, float] | None], ks: Sequence[int], *, by_metric: bool = False,
              prefix: str = "") -> dict[str, float | None]:
    """The mean of each metric over the questions that have evidence (``None`` rows left out; ``None``: none has).

    Rows hold :func:`metric_names` with ``prefix``; the result's names are without it.
    """
    scored = [r for r in rows if r is not None]
    names = metric_names(ks, by_metric=by_metric)
    return {name: mean(r[prefix + name] for r in scored) for name in names}


def mean_rows(rows: Iterable[Mapping[str, float]], n: int) -> dict[str, float]:
    """Per key, the sum over ``rows`` divided by ``n`` (the questions asked; 0 when there were none), keys sorted.

    A question without gold evidence contributes no row but stays in ``n`` only if the caller counts it.
    """
    totals: dict[str, float] = {}
    for row in rows:
        for key, value in row.items():
            totals[key] = totals.get(key, 0.0) + value
    return {key: (value / n if n else 0.0) for key, value in sorted(totals.items())}
