"""LoCoMo's tool delivery and evidence maps: every session opened with ``open_session(n)``, and where
each evidence ``dia_id`` sits in either delivery.

The generic parts are :mod:`agentlab.bench.retention.delivery`'s; the LoCoMo task's ``tool_delivery`` and
``retention_groups`` call these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentlab.bench.datasets.locomo import QA, Conversation
from agentlab.bench.datasets.locomo import Session as LoCoMoSession
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


def session_tool(conversation: Conversation, include_captions: bool = False) -> FunctionTool:
    """``open_session(n)`` over a LoCoMo conversation (``n`` counts its sessions from 1, in order)."""
    sessions = conversation.sessions
    return session_reader_tool(lambda n: render_locomo_session(sessions[n - 1], include_captions)
                         if 1 <= n <= len(sessions) else None, len(sessions), "conversation")


def locomo_tool_delivery(conversation: Conversation, session_id: str, include_captions: bool = False) -> ToolDelivery:
    """Every session of the conversation opened in order with ``open_session(n)``, and the tool."""
    reads = []
    for n, session in enumerate(conversation.sessions, start=1):
        dia_ids = [t.dia_id for t in session.turns
                   if _locomo_turn_text(t.text, t.blip_caption, include_captions)]
        reads.append(({"n": n}, render_locomo_session(session, include_captions), {"dia_ids": dia_ids}))
    opening = SESSIONS_OPENING.format(total=len(conversation.sessions))
    return ToolDelivery(tuple(reading_trajectory(session_id, opening, SESSION_TOOL, reads)),
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


def locomo_groups(conversations: Sequence[Conversation], delivery: Delivery = Delivery("tool_results"), *,
                  categories: Sequence[int] = (1, 2, 3, 4, 5), include_captions: bool = False,
                  seed: Callable[[Conversation], Sequence[Event]] | None = None) -> list[HistoryGroup]:
    """Every LoCoMo question of ``categories``, grouped by conversation, in ``delivery``.

    Turn delivery needs ``seed``: the conversation's seeded events in order (the LoCoMo task's
    ``seed_plan`` sessions concatenated), since its turns sit in one session per LoCoMo session there.
    """
    wanted = set(categories)
    groups = []
    for conversation in conversations:
        qas = [q for q in conversation.qa if q.category in wanted]
        session_id = f"retention-{conversation.sample_id}"
        if delivery.delivery == "tool_results":
            td = locomo_tool_delivery(conversation, session_id, include_captions)
            events, tools = td.events, td.tools
            questions = [Question(q.qa_id, q.question, locomo_tool_evidence(q, conversation, events,
                                                                              include_captions)) for q in qas]
        else:
            if seed is None:
                raise ValueError("turn delivery needs the task's seeded events (seed=...)")
            events, tools = tuple(seed(conversation)), ()
            questions = [Question(q.qa_id, q.question, locomo_turn_evidence(q, events)) for q in qas]
        groups.append(HistoryGroup(session_id, delivery.delivery, tuple(events), tuple(tools), tuple(questions)))
    return groups


__all__ = ["locomo_groups", "locomo_tool_delivery", "locomo_tool_events", "locomo_tool_evidence", "locomo_turn_evidence",
           "render_locomo_session", "session_tool"]
