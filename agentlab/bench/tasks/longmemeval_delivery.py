"""LongMemEval's tool delivery and evidence maps: every haystack session opened with ``open_session(n)``,
and where each ``has_answer`` turn sits in either delivery.

The generic parts are :mod:`agentlab.bench.retention.delivery`'s; the LongMemEval task's ``tool_delivery`` and
``retention_groups`` call these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentlab.bench.datasets.longmemeval import HaystackSession, LongMemEvalQuestion
from agentlab.bench.retention.delivery import (
    SESSION_TOOL,
    SESSIONS_OPENING,
    Delivery,
    EvidenceMap,
    EvidencePiece,
    EvidenceUnit,
    ToolDelivery,
    reading_trajectory,
    session_reader_tool,
)
from agentlab.bench.retention.rows import HistoryGroup, Question
from agentlab.core.tools import FunctionTool
from agentlab.events import Event


def _haystack_line(role: str, content: str) -> str:
    return f"{role}: {content.strip()}"


def render_haystack_session(session: HaystackSession, number: int) -> str:
    """What ``open_session(n)`` returns for a LongMemEval session: its id and date, then ``role: content`` turns."""
    lines = [f"Session {number} (id {session.session_id}, {session.date}):"]
    lines += [_haystack_line(t.role, t.content) for t in session.turns if t.content.strip()]
    return "\n\n".join(lines)


def haystack_tool(item: LongMemEvalQuestion) -> FunctionTool:
    """``open_session(n)`` over a LongMemEval question's haystack (``n`` from 1, in haystack order)."""
    sessions = item.sessions
    return session_reader_tool(lambda n: render_haystack_session(sessions[n - 1], n) if 1 <= n <= len(sessions) else None,
                         len(sessions), "haystack")


def longmemeval_tool_delivery(item: LongMemEvalQuestion, session_id: str) -> ToolDelivery:
    """Every haystack session opened in order with ``open_session(n)``, and the tool."""
    reads = []
    for si, session in enumerate(item.sessions):
        turns = [[si, ti] for ti, t in enumerate(session.turns) if t.content.strip()]
        reads.append(({"n": si + 1}, render_haystack_session(session, si + 1), {"haystack_turns": turns}))
    opening = SESSIONS_OPENING.format(total=len(item.sessions))
    return ToolDelivery(tuple(reading_trajectory(session_id, opening, SESSION_TOOL, reads)), (haystack_tool(item),))


def longmemeval_tool_events(item: LongMemEvalQuestion, session_id: str) -> list[Event]:
    """The ledger of :func:`longmemeval_tool_delivery`."""
    return list(longmemeval_tool_delivery(item, session_id).events)


def _has_answer_units(item: LongMemEvalQuestion, found: dict[tuple[int, int], tuple[str, str]]) -> EvidenceMap:
    units: list[EvidenceUnit] = []
    missing: list[str] = []
    for si, ti in item.evidence_turns():
        unit_id = f"s{si}/t{ti}"
        if (si, ti) in found:
            event_id, text = found[(si, ti)]
            units.append(EvidenceUnit(unit_id, (EvidencePiece(event_id, text),)))
        else:
            missing.append(unit_id)
    return EvidenceMap(tuple(units), tuple(missing))


def longmemeval_tool_evidence(item: LongMemEvalQuestion, events: Sequence[Event]) -> EvidenceMap:
    """The question's ``has_answer`` turns in a :func:`longmemeval_tool_events` ledger."""
    found: dict[tuple[int, int], tuple[str, str]] = {}
    for e in events:
        if not e.is_tool_result():
            continue
        for si, ti in e.metadata.get("haystack_turns", ()):
            turn = item.sessions[si].turns[ti]
            found.setdefault((si, ti), (e.id, _haystack_line(turn.role, turn.content)))
    return _has_answer_units(item, found)


def longmemeval_turn_evidence(item: LongMemEvalQuestion, events: Sequence[Event]) -> EvidenceMap:
    """The question's ``has_answer`` turns in the task's seeded haystack (ids end ``/s<i>/t<j>``)."""
    found: dict[tuple[int, int], tuple[str, str]] = {}
    for e in events:
        head, _, tail = e.id.rpartition("/s")
        si_text, _, ti_text = tail.partition("/t")
        if head and si_text.isdigit() and ti_text.isdigit() and e.text:
            found.setdefault((int(si_text), int(ti_text)), (e.id, e.text))
    return _has_answer_units(item, found)


def longmemeval_groups(items: Sequence[LongMemEvalQuestion], delivery: Delivery = Delivery("tool_results"), *,
                       seed: Callable[[LongMemEvalQuestion], Sequence[Event]] | None = None) -> list[HistoryGroup]:
    """One group per LongMemEval question (each brings its own haystack), in ``delivery``.

    Turn delivery needs ``seed``: the task's ``haystack_events``.
    """
    groups = []
    for item in items:
        session_id = f"retention-{item.question_id}"
        if delivery.delivery == "tool_results":
            td = longmemeval_tool_delivery(item, session_id)
            events, tools = td.events, td.tools
            evidence = longmemeval_tool_evidence(item, events)
        else:
            if seed is None:
                raise ValueError("turn delivery needs the task's haystack events (seed=...)")
            events, tools = tuple(seed(item)), ()
            evidence = longmemeval_turn_evidence(item, events)
        groups.append(HistoryGroup(session_id, delivery.delivery, tuple(events), tuple(tools),
                                   (Question(item.question_id, item.question, evidence),)))
    return groups


__all__ = ["haystack_tool", "longmemeval_groups", "longmemeval_tool_delivery", "longmemeval_tool_events",
           "longmemeval_tool_evidence", "longmemeval_turn_evidence", "render_haystack_session"]
