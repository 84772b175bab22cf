"""How a benchmark's history reaches the agent: as conversation turns, or as tool results.

The four benchmarks are chat transcripts. Seeded as turns (what the tasks do today), they hold no
tool result, so tRPC-Agent-Go's compaction passes and every peer's tool-result clearing have nothing to
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
turn) the events that hold it and its exact text there, so :mod:`agentlab.bench.retention.questions` can
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

from agentlab.core.tools import FunctionTool, Tool
from agentlab.events import OBJ_TOOL_RESPONSE, OBJ_USER, Event, Message, ToolCall
from agentlab.model import tokens
from agentlab.policy_json import PolicyJSON

#: The delivery modes: the tasks' seeded turns, or the scripted tool-reading trajectory.
DELIVERIES: tuple[str, ...] = ("turns", "tool_results")
#: One of :data:`DELIVERIES`, as a type.
DeliveryMode = Literal["turns", "tool_results"]
#: QMSum turns per ``read_transcript`` call by default: 1,122 tokens per result on average over the
#: 35 test meetings, so some results pass compaction's 1,024-token pass-1 limit and some do not,
#: and a meeting (about 1,000 turns) takes some 25 reads.
DEFAULT_CHUNK_TURNS = 40
SESSION_TOOL = "open_session"
#: Author of the scripted assistant tool calls.
READER = "reader"
#: Scripted events get fixed times: this epoch + 1 ms per event (as the QMSum task seeds turns).
DELIVERY_EPOCH = 1_700_000_000.0
DELIVERY_SPACING_SECONDS = 0.001

SESSIONS_OPENING = ("Open every session of this conversation history with open_session, from session 1 to "
                    "session {total}. A question about it follows.")


@dataclass(frozen=True)
class DeliverySetting(PolicyJSON):
    """``[dataset] delivery``: how the history reaches the agent (a base of the tasks' ``[dataset]``)."""

    #: ``turns``: the seeded conversation turns (the published setup); ``tool_results``: the scripted
    #: reading trajectory of :mod:`agentlab.bench.retention.delivery` (generic arms and the baseline only).
    delivery: DeliveryMode = "turns"

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


def reading_trajectory(session_id: str, opening: str, tool_name: str,
                reads: Sequence[tuple[dict[str, int], str, Mapping[str, Any]]]) -> list[Event]:
    """The opening user event, then an assistant call and its result per read (deterministic ids).

    ``reads``: per read, the call's arguments, the result text and the result event's metadata (what a
    benchmark's evidence map reads back, e.g. the turns a chunk holds).
    """
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


def session_reader_tool(render: Callable[[int], str | None], total: int, what: str) -> FunctionTool:
    """``open_session(n)`` over ``total`` sessions, ``render(n)`` its text (``None``: no such session; ``what`` names the history)."""

    def open_session(n: int) -> str:
        """Open session ``n`` of the conversation history (1-based) and read all of its turns.

        :param n: the session number, 1-based
        """
        text = render(n)
        return text if text is not None else f"No session {n}: the {what} has sessions 1-{total}."

    return FunctionTool(open_session, name=SESSION_TOOL)


__all__ = [
    "DEFAULT_CHUNK_TURNS",
    "DELIVERIES",
    "SESSION_TOOL",
    "Delivery",
    "DeliveryMode",
    "DeliverySetting",
    "EvidenceMap",
    "EvidencePiece",
    "EvidenceUnit",
    "ToolDelivery",
    "question_event",
    "reading_trajectory",
    "session_reader_tool",
]
