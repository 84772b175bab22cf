"""A LoCoMo conversation as the history a mode answers from: its transcript text, and its sessions as events.

``long_context`` reads :func:`render_transcript`; ``session_recall`` and ``memory`` seed
:func:`seed_plan` (one session per LoCoMo session) with :func:`seed_sessions`; the generic arms
and the retention measure replay the same events as one history. Event ids embed the turn's
``dia_id``, which evidence recall reads back (:func:`hit_dia_ids`) and compares with the
cleaned gold (:func:`evidence_dia_ids`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from agentlab.bench.datasets.locomo import QA, Conversation
from agentlab.events import Event, Message, user_event

APP_NAME = "locomo"
AGENT_NAME = "locomo-agent"


@dataclass(frozen=True)
class LoCoMoItem:
    """What a LoCoMo case carries: its conversation and its question."""

    conversation: Conversation
    qa: QA


_DIA_ID = re.compile(r"D\d+:\d+")


def evidence_dia_ids(evidence: Sequence[str]) -> list[str]:
    """Clean ``dia_id``s of an evidence list.

    A few entries in the file are malformed ("D8:6; D9:17", "D9:1 D4:4 D4:6", "D", "D:11:26"):
    well-formed ids inside them are kept, the rest dropped.
    """
    found: list[str] = []
    for entry in evidence:
        for dia_id in _DIA_ID.findall(str(entry)):
            if dia_id not in found:
                found.append(dia_id)
    return found


def parse_session_date(text: str) -> float | None:
    """Epoch seconds of a LoCoMo session date such as ``1:56 pm on 8 May, 2023`` (UTC), else None."""
    raw = " ".join(text.split())
    for layout in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %B %Y", "%d %B, %Y", "%d %B %Y", "%Y-%m-%d"):
        try:
            return datetime.strptime(raw, layout).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    return None


def turn_text(text: str, caption: str | None, include_captions: bool) -> str:
    """A message's text, with the shared image's caption when asked (the paper's prompt style)."""
    if include_captions and caption:
        return f"{text} [shares {caption}]"
    return text


def render_transcript(conversation: Conversation, include_captions: bool = False) -> str:
    """Sessions in order: a ``SessionDate:`` line, then ``Speaker: text`` lines; blank line between sessions."""
    blocks = []
    for session in conversation.sessions:
        lines = []
        if session.date_time.strip():
            lines.append(f"SessionDate: {session.date_time.strip()}")
        for turn in session.turns:
            text = turn_text(turn.text.strip(), turn.blip_caption, include_captions)
            if text:
                lines.append(f"{turn.speaker.strip() or 'Unknown'}: {text}")
        blocks.append("\n".join(lines))
    return "\n\n".join(b for b in blocks if b)


def session_id_for(conversation: Conversation, number: int) -> str:
    """The id of a conversation's session ``number``, so a recall hit names the LoCoMo session it came from."""
    return f"{conversation.sample_id}-session_{number}"


def seed_plan(conversation: Conversation, include_captions: bool = False) -> list[tuple[str, list[Event]]]:
    """Each LoCoMo session as (session id, events): speaker A as user, speaker B as assistant.

    Messages are prefixed ``[SessionDate: …] Speaker: `` and timestamped with their session's date
    (one second apart), so recalled events carry their date both in the text and in ``created=``.
    Event ids embed the ``dia_id`` (``metadata["dia_id"]`` too), which evidence recall reads back.
    """
    plan: list[tuple[str, list[Event]]] = []
    clock = datetime(2000, 1, 1, tzinfo=timezone.utc).timestamp()
    for session in conversation.sessions:
        start = parse_session_date(session.date_time)
        clock = start if start is not None and start > clock else clock + 86_400
        events: list[Event] = []
        prefix = f"[SessionDate: {session.date_time.strip()}] " if session.date_time.strip() else ""
        for position, turn in enumerate(session.turns):
            text = turn_text(turn.text.strip(), turn.blip_caption, include_captions)
            if not text:
                continue
            content = f"{prefix}{turn.speaker}: {text}"
            timestamp = clock + position
            meta = {"dia_id": turn.dia_id, "speaker": turn.speaker}
            event_id = f"{conversation.sample_id}:{turn.dia_id}"
            if turn.speaker == conversation.speaker_b:
                events.append(Event(author=AGENT_NAME, choices=[Message.assistant(content)], id=event_id,
                                    timestamp=timestamp, metadata=meta))
            else:
                event = user_event(content, timestamp=timestamp)
                event.id, event.metadata = event_id, meta
                events.append(event)
        clock += max(1, len(session.turns))
        plan.append((session_id_for(conversation, session.number), events))
    return plan


async def seed_sessions(service: Any, conversation: Conversation, include_captions: bool = False) -> list[Any]:
    """Create and fill one session per LoCoMo session for user ``sample_id``; returns the sessions."""
    sessions = []
    for session_id, events in seed_plan(conversation, include_captions):
        session = await service.create_session(APP_NAME, conversation.sample_id, session_id)
        for event in events:
            await service.append_event(session, event)
        sessions.append(session)
    return sessions



def hit_dia_ids(hits: Sequence[Any]) -> list[str]:
    """The ``dia_id``s of recalled events, best first (seeded event ids are ``<sample_id>:<dia_id>``)."""
    return [str(h.ref.event_id).split(":", 1)[1] for h in hits if ":" in str(h.ref.event_id)]
