"""The in-memory session backend: fast, process-local, lost on exit.

It implements the same contract as the DuckDB backend (``tests/session`` runs one suite on both),
so tests, notebooks and benchmarks can swap backends without changing behaviour.

The small helpers at the top (default token counter, state merge, event window) are shared with
``agentlab.session.duckdb`` so both backends apply identical rules.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlab.events import Event, new_id
from agentlab.session.base import (
    FULL_SESSION_KEY,
    EventTokenCounter,
    Session,
    SessionHead,
    SessionKey,
    Summary,
)

# ---------------------------------------------------------------------------------------------
# Helpers shared by both backends
# ---------------------------------------------------------------------------------------------

_resolved_counter: EventTokenCounter | None = None


def _rough_count(event: Event) -> int:
    """About four characters per token: only used when ``agentlab.model.tokens`` is missing."""
    chars = 0
    for message in event.choices[:1]:
        chars += len(message.content)
        for call in message.tool_calls:
            chars += len(call.name) + len(call.arguments)
    return chars // 4


def default_token_counter(event: Event) -> int:
    """Count an event with ``agentlab.model.tokens.count_event`` (imported lazily).

    The import is lazy so ``agentlab.session`` never drags tiktoken in at import time, and a
    build without the model layer still works with a rough character estimate.
    """
    global _resolved_counter
    if _resolved_counter is None:
        try:
            from agentlab.model.tokens import count_event
        except ImportError:
            _resolved_counter = _rough_count
        else:
            _resolved_counter = count_event
    return _resolved_counter(event)


def new_session_id() -> str:
    """A unique session id (``s-`` and 32 hex digits), reproducible under :func:`agentlab.events.reproducible_ids`."""
    return new_id("s-")


def merge_state(state: dict[str, Any], delta: dict[str, Any]) -> None:
    """Shallow merge: each key of the delta replaces the stored value (``None`` is a value)."""
    state.update(delta)


def ensure_token_count(event: Event, counter: EventTokenCounter) -> None:
    """Count an event's tokens exactly once: an event that already carries a count keeps it."""
    if event.token_count is None:
        event.token_count = int(counter(event))


def select_window(events: Sequence[Event], anchor_index: int, before: int, after: int,
                  roles: Sequence[str] | None) -> list[Event]:
    """Up to ``before`` events before and ``after`` after the anchor, in ledger order.

    With ``roles`` only events of those roles are counted and returned; the anchor is always
    part of the window, whatever its role.
    """
    wanted = set(roles) if roles is not None else None

    def keep(event: Event) -> bool:
        return wanted is None or event.role in wanted

    earlier: list[Event] = []
    i = anchor_index - 1
    while i >= 0 and len(earlier) < before:
        if keep(events[i]):
            earlier.append(events[i])
        i -= 1
    later: list[Event] = []
    i = anchor_index + 1
    while i < len(events) and len(later) < after:
        if keep(events[i]):
            later.append(events[i])
        i += 1
    earlier.reverse()
    return [*earlier, events[anchor_index], *later]


def check_window_sizes(before: int, after: int) -> None:
    """Raise ``ValueError`` for a negative window size."""
    if before < 0 or after < 0:
        raise ValueError(f"event window sizes must be >= 0, got before={before} after={after}")


def describe(key: SessionKey) -> str:
    """A session key as it appears in error messages."""
    return f"app={key.app_name!r} user={key.user_id!r} session={key.session_id!r}"


# ---------------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------------


@dataclass
class _StoredSession:
    """What the store keeps per session; callers only ever get copies of it."""

    events: list[Event] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    summaries: dict[str, Summary] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)


class InMemorySessionService:
    """A ``SessionService`` that keeps everything in a dict.

    Appended events are stored as JSON round-tripped copies, so a caller that later mutates its
    event object cannot rewrite the ledger, and a value that would not survive the DuckDB
    backend (not JSON-serialisable) fails here too. Every method body runs without awaiting,
    so concurrent asyncio tasks see each call as atomic.
    """

    def __init__(self, token_counter: EventTokenCounter | None = None) -> None:
        self._count_tokens: EventTokenCounter = token_counter or default_token_counter
        self._sessions: dict[SessionKey, _StoredSession] = {}

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(self, app_name: str, user_id: str, session_id: str | None = None,
                             state: dict[str, Any] | None = None) -> Session:
        """A new empty session; ``ValueError`` when ``session_id`` is given and already exists."""
        key = SessionKey(app_name, user_id, session_id or new_session_id())
        if key in self._sessions:
            raise ValueError(f"session already exists: {describe(key)}")
        now = time.time()
        stored = _StoredSession(state=dict(state or {}), created_at=now, updated_at=now)
        self._sessions[key] = stored
        return self._to_session(key, stored)

    async def get_session(self, app_name: str, user_id: str, session_id: str) -> Session | None:
        """A copy of the session, or ``None`` when it was never created or was deleted."""
        key = SessionKey(app_name, user_id, session_id)
        stored = self._sessions.get(key)
        return None if stored is None else self._to_session(key, stored)

    async def list_sessions(self, app_name: str, user_id: str) -> list[Session]:
        """Every session of the user with events, oldest first (by creation time, then id)."""
        found = [
            self._to_session(key, stored)
            for key, stored in self._sessions.items()
            if key.app_name == app_name and key.user_id == user_id
        ]
        found.sort(key=lambda s: (s.created_at, s.id))
        return found

    async def session_heads(self, app_name: str, user_id: str) -> dict[str, SessionHead]:
        """Session id -> head (event count and last event id) for every session of the user, oldest first."""
        found = sorted(
            ((stored.created_at, key.session_id, stored) for key, stored in self._sessions.items()
             if key.app_name == app_name and key.user_id == user_id),
            key=lambda item: (item[0], item[1]),
        )
        return {sid: SessionHead(len(stored.events), stored.events[-1].id if stored.events else "")
                for _, sid, stored in found}

    async def delete_session(self, app_name: str, user_id: str, session_id: str) -> None:
        """Remove the session; deleting an unknown one is not an error."""
        self._sessions.pop(SessionKey(app_name, user_id, session_id), None)

    # -- ledger and state ----------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store a copy of ``event`` (counting its tokens once), apply its ``state_delta``, and append it to
        ``session``; ``KeyError`` when the session does not exist.
        """
        stored = self._require(session.key)
        ensure_token_count(event, self._count_tokens)
        ledger_copy = Event.from_json(event.to_json())
        stored.events.append(ledger_copy)
        now = time.time()
        stored.updated_at = now
        if event.state_delta:
            merge_state(stored.state, ledger_copy.state_delta)
            merge_state(session.state, event.state_delta)
        session.events.append(event)
        session.updated_at = now
        return event

    async def update_state(self, session: Session, delta: dict[str, Any]) -> None:
        """Merge ``delta`` into the stored state and ``session.state``; ``KeyError`` when the session does not
        exist.
        """
        stored = self._require(session.key)
        merge_state(stored.state, _json_copy(delta))
        stored.updated_at = time.time()
        merge_state(session.state, delta)
        session.updated_at = stored.updated_at

    async def get_event_window(self, app_name: str, user_id: str, session_id: str, event_id: str,
                               before: int = 1, after: int = 1,
                               roles: Sequence[str] | None = None) -> list[Event]:
        """Events around ``event_id`` (see :meth:`SessionService.get_event_window`); ``KeyError`` when the
        session or the anchor event does not exist.
        """
        check_window_sizes(before, after)
        key = SessionKey(app_name, user_id, session_id)
        stored = self._sessions.get(key)
        if stored is None:
            raise KeyError(f"no such session: {describe(key)}")
        for index in range(len(stored.events) - 1, -1, -1):
            if stored.events[index].id == event_id:
                return select_window(stored.events, index, before, after, roles)
        raise KeyError(f"no event {event_id!r} in session {describe(key)}")

    # -- summaries -----------------------------------------------------------------------------

    async def get_summary(self, session: Session, filter_key: str = FULL_SESSION_KEY) -> Summary | None:
        """The summary stored under ``filter_key``, or ``None`` when none was written yet."""
        stored = self._sessions.get(session.key)
        return None if stored is None else stored.summaries.get(filter_key)

    async def write_summary(self, session: Session, filter_key: str, summary: Summary) -> None:
        """Replace the summary of ``filter_key`` (text and boundary together) in the store and in
        ``session``.
        """
        stored = self._require(session.key)
        # Summary is frozen, so text and boundary are replaced together by one assignment.
        stored.summaries[filter_key] = summary
        session.summaries[filter_key] = summary

    async def close(self) -> None:
        """Nothing to release; kept for the protocol."""

    # -- internals -----------------------------------------------------------------------------

    def _require(self, key: SessionKey) -> _StoredSession:
        stored = self._sessions.get(key)
        if stored is None:
            raise KeyError(f"no such session: {describe(key)} (create it before appending)")
        return stored

    @staticmethod
    def _to_session(key: SessionKey, stored: _StoredSession) -> Session:
        return Session(
            app_name=key.app_name,
            user_id=key.user_id,
            id=key.session_id,
            events=list(stored.events),
            state=_json_copy(stored.state),
            summaries=dict(stored.summaries),
            created_at=stored.created_at,
            updated_at=stored.updated_at,
        )


def _json_copy(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy through JSON, matching what the DuckDB backend can store and return."""
    return json.loads(json.dumps(value))
