"""How a benchmark's history reaches the agent: as conversation turns, or as tool results.

The four benchmarks are chat transcripts. Seeded as turns (what the tasks do today), they hold no
tool result, so the seed's compaction passes and every peer's tool-result clearing have nothing to
act on. *Tool-heavy delivery* gives the agent the same cases and gold answers, but the history
arrives through tools, the way a coding or research agent reads files:

* QMSum: the transcript is read with ``read_transcript(start, count)``, ``chunk_turns`` turns per
  call (:func:`qmsum_tool_events`);
* LoCoMo and LongMemEval: each session is opened with ``open_session(n)`` (1-based), one call per
  session (:func:`locomo_tool_events`, :func:`longmemeval_tool_events`).

The reading is a **deterministic scripted trajectory**: no model decides it. The ledger is a user
message that opens the reading unit, then per read an assistant tool-call event and its tool
result, with ids and timestamps that depend only on the session id and the read's position (so
recall results and cached calls are the same on every run); the question follows as a new user
turn (:func:`question_event`). The tools themselves are returned too (:func:`transcript_tool`,
:func:`session_tool`), returning exactly the text of the scripted results, so a later model call
sees them declared and can call them again.

Each delivery has an **evidence map** (:class:`EvidenceMap`): for every gold evidence unit of a
case (a QMSum ``relevant_text_span``, a LoCoMo evidence ``dia_id``, a LongMemEval ``has_answer``
turn) the events that hold it and its exact text there, so :mod:`agentlab.bench.retention` can
tell whether it is still in a request. The same maps exist for turn delivery over the events the
tasks seed (:func:`qmsum_turn_evidence`, :func:`locomo_turn_evidence`,
:func:`longmemeval_turn_evidence`).

:class:`DeliverySetting` is ``[dataset] delivery = "turns" | "tool_results"`` of LoCoMo and LongMemEval,
:class:`Delivery` adds QMSum's ``chunk_turns``; the tasks' ``[dataset]`` sections extend them, and
a generic arm's run (:meth:`agentlab.bench.tasks.Task.run_generic`) seeds the delivery they name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentlab.bench.datasets.locomo import QA, Conversation
from agentlab.bench.datasets.locomo import Session as LoCoMoSession
from agentlab.bench.datasets.longmemeval import HaystackSession, LongMemEvalQuestion
from agentlab.bench.datasets.qmsum import Meeting, QMSumCase
from agentlab.core.tools import FunctionTool, Tool
from agentlab.events import OBJ_TOOL_RESPONSE, OBJ_USER, Event, Message, ToolCall
from agentlab.model import tokens
from agentlab.policy import PolicyJSON

#: The delivery modes: the tasks' seeded turns, or the scripted tool-reading trajectory.
DELIVERIES: tuple[str, ...] = ("turns", "tool_results")
#: QMSum turns per ``read_transcript`` call by default: 1,122 tokens per result on average over the
#: 35 test meetings, so some results pass compaction's 1,024-token pass-1 limit and some do not,
#: and a meeting (about 1,000 turns) takes some 25 reads.
DEFAULT_CHUNK_TURNS = 40
TRANSCRIPT_TOOL = "read_transcript"
SESSION_TOOL = "open_session"
#: Author of the scripted assistant tool calls.
READER = "reader"
#: Scripted events get fixed times: this epoch + 1 ms per event (as the QMSum task seeds turns).
DELIVERY_EPOCH = 1_700_000_000.0
DELIVERY_SPACING_SECONDS = 0.001

QMSUM_OPENING = ("Read the meeting transcript with read_transcript, {chunk} turns per call, from the first "
                 "turn to the last ({total} turns). A question about the meeting follows.")
SESSIONS_OPENING = ("Open every session of this conversation history with open_session, from session 1 to "
                    "session {total}. A question about it follows.")


@dataclass(frozen=True)
class DeliverySetting(PolicyJSON):
    """``[dataset] delivery``: how the history reaches the agent (a base of the tasks' ``[dataset]``)."""

    #: ``turns``: the seeded conversation turns (the published setup); ``tool_results``: the scripted
    #: reading trajectory of :mod:`agentlab.bench.delivery` (generic arms and the baseline only).
    delivery: Literal["turns", "tool_results"] = "turns"

    def __post_init__(self) -> None:
        if self.delivery not in DELIVERIES:
            raise ValueError(f"delivery must be one of {', '.join(DELIVERIES)}; got {self.delivery!r}")


@dataclass(frozen=True)
class Delivery(DeliverySetting):
    """``[dataset]`` delivery settings with QMSum's read size (``chunk_turns``)."""

    #: QMSum turns per ``read_transcript`` call in tool delivery (ours: 40).
    chunk_turns: int = DEFAULT_CHUNK_TURNS

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.chunk_turns < 1:
            raise ValueError(f"chunk_turns must be >= 1; got {self.chunk_turns}")


# ------------------------------------------------------------------------------- evidence map


@dataclass(frozen=True)
class EvidencePiece:
    """One stretch of gold evidence text and the event that holds it verbatim."""

    event_id: str
    text: str


@dataclass(frozen=True)
class EvidenceUnit:
    """One gold evidence unit (a span, a ``dia_id``, a ``has_answer`` turn) as it lies in the ledger.

    A unit is in a request when every one of its pieces is (a QMSum span of several turns may be
    split over two tool results, so it has one piece per turn).
    """

    #: ``span<j>:<start>-<end>`` (QMSum), the ``dia_id`` (LoCoMo), ``s<i>/t<j>`` (LongMemEval).
    unit_id: str
    pieces: tuple[EvidencePiece, ...]

    @property
    def text(self) -> str:
        """The unit's whole text (its pieces joined by newlines)."""
        return "\n".join(p.text for p in self.pieces)

    @property
    def event_ids(self) -> tuple[str, ...]:
        """The events holding the unit, in ledger order, without repeats."""
        return tuple(dict.fromkeys(p.event_id for p in self.pieces))


@dataclass(frozen=True)
class EvidenceMap:
    """Every gold evidence unit of one case, where it lies, and the gold ids found nowhere."""

    units: tuple[EvidenceUnit, ...]
    #: Gold ids the history does not hold (LoCoMo has a few malformed or dangling ``dia_id``s, and an
    #: empty turn is never seeded): left out of every fraction, counted in ``n_missing``.
    missing: tuple[str, ...] = ()


# ------------------------------------------------------------------------------- shared pieces


@dataclass(frozen=True)
class ToolDelivery:
    """A scripted reading trajectory: its ledger events and the tools it calls."""

    events: tuple[Event, ...]
    tools: tuple[Tool, ...]

    @property
    def reading_unit(self) -> str:
        """The request unit of the reading (the opening user message and every read)."""
        return self.events[0].request_id


def _event_at(session_id: str, position: int) -> float:
    return DELIVERY_EPOCH + position * DELIVERY_SPACING_SECONDS


def _counted(event: Event) -> Event:
    event.token_count = tokens.count_event(event)
    return event


def _trajectory(session_id: str, opening: str, tool_name: str,
                reads: Sequence[tuple[dict[str, int], str, Mapping[str, Any]]]) -> list[Event]:
    """The opening user event, then an assistant call and its result per read (deterministic ids)."""
    unit = f"{session_id}-reading"
    events = [_counted(Event(author="user", choices=[Message.user(opening)], object=OBJ_USER,
                             id=f"{session_id}-open", invocation_id=unit, request_id=unit,
                             timestamp=_event_at(session_id, 0)))]
    for k, (arguments, content, meta) in enumerate(reads):
        call_id = f"call-{tool_name}-{k:04d}"
        call = ToolCall(call_id, tool_name, json.dumps(arguments, sort_keys=True))
        events.append(_counted(Event(author=READER, choices=[Message.assistant("", (call,))],
                                     id=f"{session_id}-read-{k:04d}-call", invocation_id=unit, request_id=unit,
                                     timestamp=_event_at(session_id, len(events)))))
        events.append(_counted(Event(author=READER, choices=[Message.tool(call_id, tool_name, content)],
                                     object=OBJ_TOOL_RESPONSE, id=f"{session_id}-read-{k:04d}-result",
                                     invocation_id=unit, request_id=unit,
                                     timestamp=_event_at(session_id, len(events)), metadata=dict(meta))))
    return events


def question_event(session_id: str, question: str, history: Sequence[Event]) -> Event:
    """The question as a new user turn after ``history`` (its own request unit, a fixed id and time)."""
    unit = f"{session_id}-question"
    last = max((e.timestamp for e in history), default=DELIVERY_EPOCH)
    return _counted(Event(author="user", choices=[Message.user(question)], object=OBJ_USER,
                          id=f"{session_id}-question", invocation_id=unit, request_id=unit,
                          timestamp=last + DELIVERY_SPACING_SECONDS))


def _normalised(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------------------------------ QMSum


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
    return ToolDelivery(tuple(_trajectory(session_id, opening, TRANSCRIPT_TOOL, reads)), (transcript_tool(meeting),))


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


# ------------------------------------------------------------------------------------ LoCoMo


def _locomo_line(dia_id: str, speaker: str, text: str) -> str:
    return f"[{dia_id}] {speaker}: {text}"


def _locomo_turn_text(text: str, caption: str | None, include_captions: bool) -> str:
    text = text.strip()
    if include_captions and caption and text:
        return f"{text} [shares {caption}]"
    return text


def render_locomo_session(session: LoCoMoSession, include_captions: bool = False) -> str:
    """What ``open_session(n)`` returns for a LoCoMo session: its date, then ``[dia_id] Speaker: text`` lines."""
    date = session.date_time.strip() or "unknown date"
    lines = [f"Session {session.number} ({date}):"]
    for turn in session.turns:
        text = _locomo_turn_text(turn.text, turn.blip_caption, include_captions)
        if text:
            lines.append(_locomo_line(turn.dia_id, turn.speaker, text))
    return "\n".join(lines)


def _session_tool(render: Callable[[int], str | None], total: int, what: str) -> FunctionTool:
    def open_session(n: int) -> str:
        """Open session ``n`` of the conversation history (1-based) and read all of its turns.

        :param n: the session number, 1-based
        """
        text = render(n)
        return text if text is not None else f"No session {n}: the {what} has sessions 1-{total}."

    return FunctionTool(open_session, name=SESSION_TOOL)


def session_tool(conversation: Conversation, include_captions: bool = False) -> FunctionTool:
    """``open_session(n)`` over a LoCoMo conversation (``n`` counts its sessions from 1, in order)."""
    sessions = conversation.sessions
    return _session_tool(lambda n: render_locomo_session(sessions[n - 1], include_captions)
                         if 1 <= n <= len(sessions) else None, len(sessions), "conversation")


def locomo_tool_delivery(conversation: Conversation, session_id: str, include_captions: bool = False) -> ToolDelivery:
    """Every session of the conversation opened in order with ``open_session(n)``, and the tool."""
    reads = []
    for n, session in enumerate(conversation.sessions, start=1):
        dia_ids = [t.dia_id for t in session.turns
                   if _locomo_turn_text(t.text, t.blip_caption, include_captions)]
        reads.append(({"n": n}, render_locomo_session(session, include_captions), {"dia_ids": dia_ids}))
    opening = SESSIONS_OPENING.format(total=len(conversation.sessions))
    return ToolDelivery(tuple(_trajectory(session_id, opening, SESSION_TOOL, reads)),
                        (session_tool(conversation, include_captions),))


def locomo_tool_events(conversation: Conversation, session_id: str, include_captions: bool = False) -> list[Event]:
    """The ledger of :func:`locomo_tool_delivery`."""
    return list(locomo_tool_delivery(conversation, session_id, include_captions).events)


def _locomo_units(qa: QA, found: dict[str, tuple[str, str]]) -> EvidenceMap:
    units: list[EvidenceUnit] = []
    missing: list[str] = []
    for dia_id in dict.fromkeys(qa.evidence):
        if dia_id in found:
            event_id, text = found[dia_id]
            units.append(EvidenceUnit(dia_id, (EvidencePiece(event_id, text),)))
        else:
            missing.append(dia_id)
    return EvidenceMap(tuple(units), tuple(missing))


def locomo_tool_evidence(qa: QA, conversation: Conversation, events: Sequence[Event],
                         include_captions: bool = False) -> EvidenceMap:
    """The question's evidence ``dia_id``s in a :func:`locomo_tool_events` ledger (one line each)."""
    turns = conversation.turn_by_dia_id()
    found: dict[str, tuple[str, str]] = {}
    for e in events:
        if not e.is_tool_result():
            continue
        for dia_id in e.metadata.get("dia_ids", ()):
            turn = turns[dia_id]
            text = _locomo_turn_text(turn.text, turn.blip_caption, include_captions)
            found.setdefault(dia_id, (e.id, _locomo_line(dia_id, turn.speaker, text)))
    return _locomo_units(qa, found)


def locomo_turn_evidence(qa: QA, events: Sequence[Event]) -> EvidenceMap:
    """The question's evidence in the task's seeded turns (events carry ``metadata["dia_id"]``)."""
    found: dict[str, tuple[str, str]] = {}
    for e in events:
        dia_id = e.metadata.get("dia_id")
        if isinstance(dia_id, str) and e.text:
            found.setdefault(dia_id, (e.id, e.text))
    return _locomo_units(qa, found)


# ------------------------------------------------------------------------------- LongMemEval


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
    return _session_tool(lambda n: render_haystack_session(sessions[n - 1], n) if 1 <= n <= len(sessions) else None,
                         len(sessions), "haystack")


def longmemeval_tool_delivery(item: LongMemEvalQuestion, session_id: str) -> ToolDelivery:
    """Every haystack session opened in order with ``open_session(n)``, and the tool."""
    reads = []
    for si, session in enumerate(item.sessions):
        turns = [[si, ti] for ti, t in enumerate(session.turns) if t.content.strip()]
        reads.append(({"n": si + 1}, render_haystack_session(session, si + 1), {"haystack_turns": turns}))
    opening = SESSIONS_OPENING.format(total=len(item.sessions))
    return ToolDelivery(tuple(_trajectory(session_id, opening, SESSION_TOOL, reads)), (haystack_tool(item),))


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


__all__ = [
    "DEFAULT_CHUNK_TURNS",
    "DELIVERIES",
    "SESSION_TOOL",
    "TRANSCRIPT_TOOL",
    "Delivery",
    "DeliverySetting",
    "EvidenceMap",
    "EvidencePiece",
    "EvidenceUnit",
    "ToolDelivery",
    "haystack_tool",
    "locomo_tool_delivery",
    "locomo_tool_events",
    "locomo_tool_evidence",
    "locomo_turn_evidence",
    "longmemeval_tool_delivery",
    "longmemeval_tool_events",
    "longmemeval_tool_evidence",
    "longmemeval_turn_evidence",
    "qmsum_tool_delivery",
    "qmsum_tool_events",
    "qmsum_tool_evidence",
    "qmsum_turn_evidence",
    "question_event",
    "render_haystack_session",
    "render_locomo_session",
    "render_transcript_chunk",
    "session_tool",
    "transcript_tool",
]
