"""What recall can find: the searchable text of an event, and the hit that points back at it.

Shared by the index and search (:mod:`agentlab.recall.search`), query broadening
(:mod:`agentlab.recall.query`) and result rendering (:mod:`agentlab.recall.render`), so that each of
them agrees on which events are searchable and how a hit names its event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from agentlab.events import Event

__all__ = [
    "MESSAGE_ROLES",
    "EventHit",
    "EventRef",
    "compact_text",
    "doc_id_for",
    "iso_time",
    "message_text",
]

#: Roles whose messages are searchable and loadable.
MESSAGE_ROLES: tuple[str, ...] = ("user", "assistant", "tool")


def message_text(event: Event) -> tuple[str, str] | None:
    """``(text, role)`` of a searchable message event, or ``None``.

    Tool results read ``toolname: content``; assistant messages that carry tool calls, partial
    or failed events, and empty messages are not searchable.
    """
    m = event.message
    if m is None or event.partial or event.error is not None or m.tool_calls:
        return None
    role = "tool" if (m.role == "tool" or m.tool_call_id) else m.role
    if role not in MESSAGE_ROLES:
        return None
    text = m.content.strip()
    if not text:
        return None
    if role == "tool" and m.name:
        text = f"{m.name}: {text}"
    return text, role


def iso_time(timestamp: float) -> str:
    """An event time as the model sees it in results: UTC ISO 8601, to the second."""
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat(timespec="seconds")


def compact_text(text: str, limit: int) -> str:
    """Whitespace collapsed to single spaces, cut to ``limit`` characters with ``...``."""
    flat = " ".join(text.split())
    if limit <= 0 or not flat:
        return ""
    if len(flat) <= limit:
        return flat
    return flat[:limit] if limit <= 3 else flat[: limit - 3] + "..."


@dataclass(frozen=True)
class EventRef:
    """Where an indexed event lives, and what a hit needs to describe it."""

    session_id: str
    event_id: str
    position: int
    timestamp: float
    role: str
    filter_key: str
    invocation_id: str
    tool_call_id: str | None
    tool_name: str | None

    @property
    def doc_id(self) -> str:
        """The event's key in the search index (unique across the user's sessions)."""
        return doc_id_for(self.session_id, self.event_id)


def doc_id_for(session_id: str, event_id: str) -> str:
    """The index key of an event: session and event id, joined so that neither can forge the other."""
    # \x1f cannot appear in ids a model or a backend would produce, unlike ':'.
    return f"{session_id}\x1f{event_id}"


@dataclass
class EventHit:
    """One search result: the event, its score under the query that found it, and its text."""

    ref: EventRef
    score: float
    text: str
