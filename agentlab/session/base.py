"""Session, Summary, SummaryBoundary and the SessionService protocol.

History is the ledger of events and is never rewritten. A Summary is durable rolling state per
filter key, anchored to the last event it covers by a SummaryBoundary. Both backends
(``inmemory`` and ``duckdb``) pass the same contract tests in ``tests/session``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentlab.events import Event

#: The full-session summary key.
FULL_SESSION_KEY = ""


@dataclass(frozen=True)
class SessionKey:
    """Identifies one session: sessions are stored and looked up per (app, user, session id)."""

    app_name: str
    user_id: str
    session_id: str


@dataclass(frozen=True)
class SummaryBoundary:
    """Where a summary's coverage ends: the last covered event (and its time, for legacy/ties)."""

    filter_key: str = FULL_SESSION_KEY
    cutoff_at: float = 0.0
    last_event_id: str = ""
    version: int = 1

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` reads it back."""
        return {
            "filter_key": self.filter_key,
            "cutoff_at": self.cutoff_at,
            "last_event_id": self.last_event_id,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SummaryBoundary | None:
        """Read a dict written by :meth:`to_dict`; ``None`` for an absent boundary (a summary that covers
        nothing yet).
        """
        if not data:
            return None
        return cls(
            filter_key=data.get("filter_key", ""),
            cutoff_at=float(data.get("cutoff_at") or 0.0),
            last_event_id=data.get("last_event_id") or "",
            version=int(data.get("version") or 1),
        )


@dataclass(frozen=True)
class Summary:
    """The rolling summary of one filter key of a session: its text, when it was written, the boundary of what
    it covers, and the topics it names.
    """

    text: str
    updated_at: float = 0.0
    boundary: SummaryBoundary | None = None
    topics: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` reads it back."""
        return {
            "text": self.text,
            "updated_at": self.updated_at,
            "boundary": self.boundary.to_dict() if self.boundary else None,
            "topics": list(self.topics),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        """Read a dict written by :meth:`to_dict`; missing fields take their defaults."""
        return cls(
            text=data.get("text") or "",
            updated_at=float(data.get("updated_at") or 0.0),
            boundary=SummaryBoundary.from_dict(data.get("boundary")),
            topics=tuple(data.get("topics") or ()),
        )


@dataclass
class Session:
    """One conversation: its event ledger (append-only), its state dict and its summaries by filter key. A
    copy the service handed out; the service's own methods keep it current.
    """

    app_name: str
    user_id: str
    id: str
    events: list[Event] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    summaries: dict[str, Summary] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    @property
    def key(self) -> SessionKey:
        """The (app, user, session id) triple the service stores this session under."""
        return SessionKey(self.app_name, self.user_id, self.id)

    def event_index(self, event_id: str) -> int:
        """Position of an event in the ledger, or -1."""
        for i in range(len(self.events) - 1, -1, -1):
            if self.events[i].id == event_id:
                return i
        return -1

    def events_after_boundary(self, boundary: SummaryBoundary | None) -> list[Event]:
        """The events a summary with this boundary does not cover (all of them without one)."""
        if boundary is None:
            return list(self.events)
        if boundary.last_event_id:
            i = self.event_index(boundary.last_event_id)
            if i >= 0:
                return self.events[i + 1:]
        # Legacy time boundary: keep same-timestamp events so nothing uncovered is dropped.
        return [e for e in self.events if e.timestamp >= boundary.cutoff_at]


def ledger_extends(events: Sequence[Event], known_count: int, known_last_id: str) -> bool:
    """Whether ``events`` is the ledger seen before (``known_count`` events, the last with ``known_last_id``) or
    that ledger with events appended — "the ledger only grew".

    A ledger is append-only, so anything else (shorter, or a different event at the old end) means
    the session was deleted and recreated under the same id and whatever was derived from it must
    start over.
    """
    if len(events) < known_count:
        return False
    return not known_count or events[known_count - 1].id == known_last_id


@dataclass(frozen=True)
class SessionHead:
    """How far one session's ledger goes: enough to tell whether it changed since it was read."""

    event_count: int
    last_event_id: str


@runtime_checkable
class SessionHeadReader(Protocol):
    """Optional for a ``SessionService``: the heads of a user's sessions without their events.

    Lets an index that follows every session of a user (recall) fetch only the sessions that
    changed, instead of listing them all on every search.
    """

    async def session_heads(self, app_name: str, user_id: str) -> dict[str, SessionHead]:
        """Session id -> head, for every session of the user, oldest session first."""
        ...


#: Counts the tokens of an event when it is appended (stored in ``Event.token_count``).
EventTokenCounter = Callable[[Event], int]


@runtime_checkable
class SessionService(Protocol):
    """Storage of sessions, their event ledgers, state and summaries.

    Methods that take a ``Session`` also update that in-memory object, so a runner that holds
    the session sees what it appended without a re-read.
    """

    async def create_session(self, app_name: str, user_id: str, session_id: str | None = None,
                             state: dict[str, Any] | None = None) -> Session:
        """A new empty session; ``ValueError`` when ``session_id`` is given and already exists."""
        ...

    async def get_session(self, app_name: str, user_id: str, session_id: str) -> Session | None:
        """A copy of the session with its events, or ``None`` when it was never created or was deleted."""
        ...

    async def list_sessions(self, app_name: str, user_id: str) -> list[Session]:
        """Every session of the user, with events (recall searches across them)."""
        ...

    async def delete_session(self, app_name: str, user_id: str, session_id: str) -> None:
        """Remove the session and everything in it; deleting an unknown session is not an error."""
        ...

    async def append_event(self, session: Session, event: Event) -> Event:
        """Persist one event (token count computed here, once) and append it to ``session``."""
        ...

    async def update_state(self, session: Session, delta: dict[str, Any]) -> None:
        """Merge ``delta`` into the stored state (each key replaces its value) and into ``session.state``."""
        ...

    async def get_summary(self, session: Session, filter_key: str = FULL_SESSION_KEY) -> Summary | None:
        """The summary stored under ``filter_key``, or ``None`` when none was written yet."""
        ...

    async def write_summary(self, session: Session, filter_key: str, summary: Summary) -> None:
        """Write text and boundary together, in one step."""
        ...

    async def get_event_window(self, app_name: str, user_id: str, session_id: str, event_id: str,
                               before: int = 1, after: int = 1,
                               roles: Sequence[str] | None = None) -> list[Event]:
        """Events around ``event_id`` (only those whose role is in ``roles`` are counted and
        returned when given). Raises ``KeyError`` if the session or anchor does not exist.
        """
        ...

    async def close(self) -> None:
        """Release the backend's resources (the database connection)."""
        ...
