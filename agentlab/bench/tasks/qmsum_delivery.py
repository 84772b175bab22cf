"""QMSum's tool delivery and evidence maps: the meeting read with ``read_transcript(start, count)``,
``chunk_turns`` turns per call, and where each relevant span sits in either delivery.

The generic parts (the trajectory, the evidence map types) are :mod:`agentlab.bench.retention.delivery`'s;
:meth:`agentlab.bench.tasks.qmsum.QMSumTask.tool_delivery` and its ``retention_groups`` call these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentlab.bench.datasets.qmsum import Meeting, QMSumCase
from agentlab.bench.retention.delivery import (
    DEFAULT_CHUNK_TURNS,
    Delivery,
    EvidenceMap,
    EvidencePiece,
    EvidenceUnit,
    ToolDelivery,
    reading_trajectory,
)
from agentlab.bench.retention.rows import HistoryGroup, Question
from agentlab.core.tools import FunctionTool
from agentlab.events import OBJ_USER, Event, Message

#: Seeded turns get fixed times (this epoch + 1 ms per turn): search results show each hit's time, so the
#: recall-mode tool results, and the answer calls that read them, stay byte-identical (the call cache replays them).
SEED_EPOCH = 1_700_000_000.0
SEED_SPACING_SECONDS = 0.001
TRANSCRIPT_TOOL = "read_transcript"
QMSUM_OPENING = ("Read the meeting transcript with read_transcript, {chunk} turns per call, from the first "
                 "turn to the last ({total} turns). A question about the meeting follows.")


def _normalised(text: str) -> str:
    return " ".join(text.split())


def seed_events(meeting: Meeting, session_id: str) -> list[Event]:
    """The task's turn seeding: one user-role event per transcript turn, 1 ms apart, with ids ``<session>-0000`` (what recall returns is stable)."""
    return [
        Event(author="user", choices=[Message.user(text)], object=OBJ_USER,
              id=f"{session_id}-{i:04d}", timestamp=SEED_EPOCH + i * SEED_SPACING_SECONDS)
        for i, text in enumerate(meeting.turn_texts())
    ]


def render_transcript_chunk(meeting: Meeting, start: int, count: int) -> str:
    """What ``read_transcript(start, count)`` returns: a header line, then the seeded turn texts."""
    total = len(meeting.turns)
    start = max(0, start)
    end = min(total, start + max(0, count))
    header = f"Transcript of meeting {meeting.meeting_id}, turns {start}-{end - 1} (0-based) of {total}:"
    if start >= end:
        return f"Transcript of meeting {meeting.meeting_id}: no turns at start={start} ({total} turns)."
    return "\n".join([header, *(meeting.turn_text(i) for i in range(start, end))])


def transcript_tool(meeting: Meeting) -> FunctionTool:
    """``read_transcript(start, count)`` over ``meeting``: the tool the scripted reads call."""
    def read_transcript(start: int, count: int) -> str:
        """Read ``count`` turns of the meeting transcript from turn ``start`` (0-based).

        :param start: the first turn to read, 0-based
        :param count: how many turns to read
        """
        return render_transcript_chunk(meeting, start, count)

    return FunctionTool(read_transcript, name=TRANSCRIPT_TOOL)


def qmsum_tool_delivery(meeting: Meeting, session_id: str, chunk_turns: int = DEFAULT_CHUNK_TURNS) -> ToolDelivery:
    """The meeting read with ``read_transcript``, ``chunk_turns`` turns per call, and the tool."""
    if chunk_turns < 1:
        raise ValueError(f"chunk_turns must be >= 1; got {chunk_turns}")
    total = len(meeting.turns)
    reads = [({"start": s, "count": chunk_turns}, render_transcript_chunk(meeting, s, chunk_turns),
              {"turns": list(range(s, min(total, s + chunk_turns)))}) for s in range(0, total, chunk_turns)]
    opening = QMSUM_OPENING.format(chunk=chunk_turns, total=total)
    return ToolDelivery(tuple(reading_trajectory(session_id, opening, TRANSCRIPT_TOOL, reads)), (transcript_tool(meeting),))


def qmsum_tool_events(meeting: Meeting, session_id: str, chunk_turns: int = DEFAULT_CHUNK_TURNS) -> list[Event]:
    """The ledger of :func:`qmsum_tool_delivery` (opening message, then one call + result per chunk)."""
    return list(qmsum_tool_delivery(meeting, session_id, chunk_turns).events)


def _span_units(case: QMSumCase, event_of_turn: Callable[[int], str | None]) -> EvidenceMap:
    last = len(case.meeting.turns) - 1
    units: list[EvidenceUnit] = []
    missing: list[str] = []
    for j, span in enumerate(case.spans):
        start, end = max(0, span.start), min(span.end, last)
        unit_id = f"span{j}:{span.start}-{span.end}"
        pieces = []
        for t in range(start, end + 1):
            event_id = event_of_turn(t)
            if event_id is not None:
                pieces.append(EvidencePiece(event_id, case.meeting.turn_text(t)))
        if pieces:
            units.append(EvidenceUnit(unit_id, tuple(pieces)))
        else:
            missing.append(unit_id)
    return EvidenceMap(tuple(units), tuple(missing))


def qmsum_tool_evidence(case: QMSumCase, events: Sequence[Event]) -> EvidenceMap:
    """The case's relevant spans in a :func:`qmsum_tool_events` ledger: one piece per turn, in its result."""
    where = {t: e.id for e in events if e.is_tool_result() for t in e.metadata.get("turns", ())}
    return _span_units(case, where.get)


def qmsum_turn_evidence(case: QMSumCase, events: Sequence[Event]) -> EvidenceMap:
    """The case's relevant spans in the task's seeded turns (``seed_events``: event ``i`` is turn ``i``)."""
    def event_of_turn(t: int) -> str | None:
        if t < len(events) and _normalised(events[t].text) == _normalised(case.meeting.turn_text(t)):
            return events[t].id
        return None
    return _span_units(case, event_of_turn)


def qmsum_groups(cases: Sequence[QMSumCase], delivery: Delivery = Delivery("tool_results"), *,
                 seed: Callable[[Meeting, str], Sequence[Event]] | None = None) -> list[HistoryGroup]:
    """QMSum cases grouped by meeting, in first-seen order, in ``delivery``.

    Turn delivery seeds with ``seed`` (default :func:`seed_events`, the task's own seeding), so
    that the turns measured are the ones the task sends.
    """
    seed = seed or seed_events
    by_meeting: dict[str, list[QMSumCase]] = {}
    for case in cases:
        by_meeting.setdefault(case.meeting_id, []).append(case)
    groups = []
    for meeting_id, items in by_meeting.items():
        session_id = f"retention-{meeting_id}"
        if delivery.delivery == "tool_results":
            td = qmsum_tool_delivery(items[0].meeting, session_id, delivery.chunk_turns)
            events, tools = td.events, td.tools
            questions = [Question(c.case_id, c.query, qmsum_tool_evidence(c, events)) for c in items]
        else:
            if seed is None:
                raise ValueError("turn delivery needs the task's seed function (seed=...)")
            events, tools = tuple(seed(items[0].meeting, session_id)), ()
            questions = [Question(c.case_id, c.query, qmsum_turn_evidence(c, events)) for c in items]
        groups.append(HistoryGroup(session_id, delivery.delivery, tuple(events), tuple(tools), tuple(questions)))
    return groups


__all__ = ["SEED_EPOCH", "SEED_SPACING_SECONDS", "TRANSCRIPT_TOOL", "seed_events", "qmsum_groups", "qmsum_tool_delivery", "qmsum_tool_events", "qmsum_tool_evidence",
           "qmsum_turn_evidence", "render_transcript_chunk", "transcript_tool"]
