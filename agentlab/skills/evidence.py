"""The evidence gate of skill evolution: whether a session delta is worth a reviewer's model call.

Three signals, each read from the events alone (no model), as tRPC-Agent-Go's evolution service lists them
(docs/sources.md#skills-and-evolution):

* **repeated tool coordination** — the same ordered pair of different tools called one after the
  other at least ``coordination_repeats`` times in the delta (a procedure the agent keeps
  re-assembling);
* **user correction** — a user message that follows an assistant reply (in the delta or before
  it) and says the approach was wrong: it contains one of ``correction_cues``;
* **recovery after a failed call** — a tool call that failed (the runtime's ``tool_error``, or a
  result starting ``error:``), then a successful tool call, then a final answer, with no failure
  after that success.

A delta with none of them is weak: the evolution service skips it without calling the model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentlab.events import Event

#: Phrases that mark a user message as a correction (matched case-insensitively, anywhere).
DEFAULT_CORRECTION_CUES: tuple[str, ...] = (
    "that's wrong", "that is wrong", "that's not", "that is not", "not what i", "you should have",
    "should have checked", "should check", "next time", "instead", "wrong", "no, ", "actually,",
    "always check", "first check", "start with",
)


@dataclass(frozen=True)
class Signal:
    """One piece of evidence: its kind and what in the delta shows it."""

    kind: str
    detail: str
    event_ids: tuple[str, ...] = ()


@dataclass
class Evidence:
    """The signals found in one delta (empty: weak evidence)."""

    signals: list[Signal] = field(default_factory=list)

    @property
    def strong(self) -> bool:
        """Whether any signal was found."""
        return bool(self.signals)

    def kinds(self) -> list[str]:
        """The signal kinds found, in order, without repeats."""
        return list(dict.fromkeys(s.kind for s in self.signals))

    def describe(self) -> str:
        """One line per signal, for the reviewer's prompt and the output."""
        return "\n".join(f"- {s.kind}: {s.detail}" for s in self.signals) or "- none"


def tool_failed(event: Event) -> bool:
    """Whether ``event`` is a tool result reporting a failure."""
    if not event.is_tool_result():
        return False
    return bool(event.metadata.get("tool_error")) or event.text.lstrip().lower().startswith("error:")


def _calls(delta: Sequence[Event]) -> list[tuple[str, str]]:
    """``(tool name, event id)`` of every tool call in the delta, in order."""
    return [(c.name, e.id) for e in delta if e.is_tool_call() and e.message is not None
            for c in e.message.tool_calls]


def repeated_coordination(delta: Sequence[Event], repeats: int) -> Signal | None:
    """The most repeated ordered pair of different tools called back to back, if it occurs ``repeats`` times."""
    calls = _calls(delta)
    pairs = Counter((a[0], b[0]) for a, b in zip(calls, calls[1:], strict=False) if a[0] != b[0])
    if not pairs:
        return None
    (first, second), count = pairs.most_common(1)[0]
    if count < repeats:
        return None
    ids = tuple(dict.fromkeys(i for (n, i) in calls if n in (first, second)))
    return Signal("repeated_tool_coordination", f"{first} then {second}, {count} times", ids)


def user_correction(delta: Sequence[Event], before: Sequence[Event], cues: Sequence[str]) -> Signal | None:
    """The first user message in the delta that follows an assistant reply and contains a correction cue."""
    replied = any(e.role == "assistant" and e.text.strip() for e in before)
    for event in delta:
        if event.role == "assistant" and event.text.strip():
            replied = True
        elif event.role == "user" and replied:
            text = event.text.lower()
            cue = next((c for c in cues if c in text), None)
            if cue is not None:
                return Signal("user_correction", f"the user said {cue!r} after a reply", (event.id,))
    return None


def recovery_after_failure(delta: Sequence[Event]) -> Signal | None:
    """A failed tool call followed by a successful one and then a final answer (no failure in between)."""
    failed: Event | None = None
    recovered: Event | None = None
    for event in delta:
        if tool_failed(event):  # a failure after a recovery starts over: the run must end recovered
            failed, recovered = event, None
        elif event.is_tool_result() and failed is not None and recovered is None:
            recovered = event
        elif recovered is not None and event.is_final_response():
            assert failed is not None and failed.message is not None and recovered.message is not None
            return Signal("recovery_after_failure",
                          f"{failed.message.name} failed, then {recovered.message.name} succeeded and the run answered",
                          (failed.id, recovered.id, event.id))
    return None


def find_evidence(delta: Sequence[Event], before: Sequence[Event] = (), *, coordination_repeats: int = 2,
                  correction_cues: Sequence[str] = DEFAULT_CORRECTION_CUES) -> Evidence:
    """Every signal in ``delta`` (``before``: the session's earlier events, for what a correction follows)."""
    found = [repeated_coordination(delta, coordination_repeats), user_correction(delta, before, correction_cues),
             recovery_after_failure(delta)]
    return Evidence([s for s in found if s is not None])


__all__ = ["DEFAULT_CORRECTION_CUES", "Evidence", "Signal", "find_evidence", "recovery_after_failure",
           "repeated_coordination", "tool_failed", "user_correction"]
