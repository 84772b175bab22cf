"""The DuckDB session backend: one file holds sessions, the event ledger and summaries.

Tables (created on first use)::

    sessions  (app_name, user_id, session_id) PK, state JSON, created_at, updated_at
    events    (app_name, user_id, session_id, seq) PK, event_id, invocation_id, author, object,
              role, filter_key, timestamp, token_count, appended_at,
              event_json (the whole Event as JSON text)
    summaries (app_name, user_id, session_id, filter_key) PK, text, updated_at, boundary JSON,
              topics JSON

``seq`` numbers a session's events 0, 1, 2 ... in append order (the primary key guards it).
``appended_at`` is when the row was committed; a session's ``updated_at`` as read back is the
later of ``sessions.updated_at`` (create, state changes) and its newest ``appended_at``, so an
append costs one INSERT and no UPDATE of the sessions row.

Connection lifetime: DuckDB lets only one process open a file for writing. The service opens
the file on its first call and keeps one connection until :meth:`DuckDBSessionService.close`
(or the end of an ``async with`` block); a closed service reopens the file on its next call.
Close the service before another process needs the file, and use one service object per file
within a process (it caches the next ``seq`` of each session while its connection is open).

Concurrency: every DuckDB call runs in a worker thread (``asyncio.to_thread``) on that one
connection, guarded by a threading lock. Writes are serialised by an asyncio lock. Appends use
group commit: while one batch is being written, further appends queue up, and the next holder
of the lock writes everything queued in one transaction (one INSERT of column lists). The caller's
``Session`` objects are updated in batch order after the commit, so ``session.events`` always
matches ``seq``. An append returns only after its event is committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import duckdb

from agentlab.events import Event
from agentlab.session.base import (
    FULL_SESSION_KEY,
    EventTokenCounter,
    Session,
    SessionHead,
    SessionKey,
    Summary,
    SummaryBoundary,
)
from agentlab.session.inmemory import (
    check_window_sizes,
    default_token_counter,
    describe,
    ensure_token_count,
    merge_state,
    new_session_id,
)

_T = TypeVar("_T")
_Connection = duckdb.DuckDBPyConnection

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS sessions (
        app_name    VARCHAR NOT NULL,
        user_id     VARCHAR NOT NULL,
        session_id  VARCHAR NOT NULL,
        state       JSON    NOT NULL,
        created_at  DOUBLE  NOT NULL,
        updated_at  DOUBLE  NOT NULL,
        PRIMARY KEY (app_name, user_id, session_id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS events (
        app_name      VARCHAR NOT NULL,
        user_id       VARCHAR NOT NULL,
        session_id    VARCHAR NOT NULL,
        seq           BIGINT  NOT NULL,
        event_id      VARCHAR NOT NULL,
        invocation_id VARCHAR,
        author        VARCHAR,
        object        VARCHAR,
        role          VARCHAR,
        filter_key    VARCHAR,
        timestamp     DOUBLE,
        token_count   INTEGER,
        appended_at   DOUBLE  NOT NULL,
        event_json    VARCHAR NOT NULL,
        PRIMARY KEY (app_name, user_id, session_id, seq)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS summaries (
        app_name   VARCHAR NOT NULL,
        user_id    VARCHAR NOT NULL,
        session_id VARCHAR NOT NULL,
        filter_key VARCHAR NOT NULL,
        text       VARCHAR NOT NULL,
        updated_at DOUBLE  NOT NULL,
        boundary   JSON,
        topics     JSON,
        PRIMARY KEY (app_name, user_id, session_id, filter_key)
    )
    """,
)

_KEY_MATCH = "app_name = ? AND user_id = ? AND session_id = ?"

_EVENT_COLUMNS = (
    ("app_name", "VARCHAR"), ("user_id", "VARCHAR"), ("session_id", "VARCHAR"), ("seq", "BIGINT"),
    ("event_id", "VARCHAR"), ("invocation_id", "VARCHAR"), ("author", "VARCHAR"), ("object", "VARCHAR"),
    ("role", "VARCHAR"), ("filter_key", "VARCHAR"), ("timestamp", "DOUBLE"), ("token_count", "INTEGER"),
    ("appended_at", "DOUBLE"), ("event_json", "VARCHAR"),
)
_INSERT_INTO_EVENTS = f"INSERT INTO events ({', '.join(name for name, _ in _EVENT_COLUMNS)}) "
_INSERT_ONE_EVENT = _INSERT_INTO_EVENTS + f"VALUES ({', '.join(['?'] * len(_EVENT_COLUMNS))})"
# A batch goes in as one list per column: DuckDB binds 14 list parameters far faster than
# 14 x N scalar ones (measured ~3x for 100 rows), and one statement fits any batch size.
_INSERT_EVENT_COLUMNS = _INSERT_INTO_EVENTS + "SELECT " + ", ".join(
    f"unnest(?::{sql_type}[])" for _, sql_type in _EVENT_COLUMNS
)


def _insert_event_rows(con: _Connection, rows: list[list[Any]]) -> None:
    if len(rows) == 1:
        con.execute(_INSERT_ONE_EVENT, rows[0])  # a single row binds fastest as plain VALUES
    else:
        con.execute(_INSERT_EVENT_COLUMNS, [list(column) for column in zip(*rows, strict=True)])


@dataclass(eq=False)
class _PendingAppend:
    """An append waiting for (or inside) a group-commit batch."""

    session: Session
    event: Event
    event_json: str
    delta: dict[str, Any] | None
    done: asyncio.Future[None]
    appended_at: float = 0.0
    #: The session is new: its row goes in with this event, in the same transaction.
    create: bool = False
    #: The last event of its ``append_events`` call (``done``, shared by the call's events, is set after it).
    last: bool = False


@dataclass
class _LoopWriter:
    """Write serialisation for one event loop: the lock and the appends queued behind it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: list[_PendingAppend] = field(default_factory=list)


def _key_params(key: SessionKey) -> list[str]:
    return [key.app_name, key.user_id, key.session_id]


def _summary_from_row(text: str, updated_at: float, boundary: str | None, topics: str | None) -> Summary:
    return Summary(
        text=text,
        updated_at=float(updated_at),
        boundary=SummaryBoundary.from_dict(json.loads(boundary) if boundary else None),
        topics=tuple(json.loads(topics) if topics else ()),
    )


class DuckDBSessionService:
    """A ``SessionService`` persisted in one DuckDB file (``":memory:"`` also works).

    Use ``async with DuckDBSessionService(path) as sessions: ...`` or call :meth:`close` when
    done, so the file lock is released for other processes.

    ``fsync`` (default ``True``) makes every commit durable on disk before an append returns.
    ``fsync=False`` (DuckDB ``fsync_mode=NONE``) is about three times faster for one-by-one
    appends; a crash of the *process* still loses nothing, but an OS or power failure may lose
    recent commits or damage the file, so use it only for stores you can regenerate
    (benchmarks, throwaway notebooks).

    Concurrent appends share one commit (group commit): appends queued while a commit runs go in
    the next one, as one statement. ``linger`` (default 0) is how many seconds the first append of
    a batch waits for company before committing. DuckDB's cost is per statement (about 1 ms CPU
    for an insert of one row or of many), so a writer whose appends are off its answer's path
    (the serve proxy, where many conversations append at once) sets a few milliseconds and
    commits many conversations' events in one statement; every append still returns only after
    its commit. ``append_executor`` runs those commits somewhere else than asyncio's default
    executor (the serve proxy's low-priority writer thread); reads stay on the default one.
    """

    def __init__(self, path: str | Path, token_counter: EventTokenCounter | None = None, *,
                 fsync: bool = True, linger: float = 0.0, append_executor: Executor | None = None) -> None:
        if not linger >= 0:
            raise ValueError(f"linger must be >= 0 seconds, got {linger}")
        self.path = path if str(path) == ":memory:" else Path(path)
        self.fsync = fsync
        self.linger = linger
        #: Where group commits run (default: asyncio's default executor, like every other call).
        self.append_executor = append_executor
        self._count_tokens: EventTokenCounter = token_counter or default_token_counter
        self._connection: _Connection | None = None
        self._db_lock = threading.Lock()
        # Next seq per session; valid while this service holds the connection (no other
        # process can write the file meanwhile), dropped whenever the connection changes.
        self._next_seq: dict[SessionKey, int] = {}
        # Session heads per (app, user), kept up to date by this service's own writes under the
        # same single-writer assumption as ``_next_seq``; loaded on first use, dropped with it.
        self._heads: dict[tuple[str, str], dict[str, SessionHead]] = {}
        # asyncio primitives bind to the loop that first uses them; one writer per loop keeps
        # the service usable from several asyncio.run() calls (scripts, notebooks).
        self._writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWriter] = (
            weakref.WeakKeyDictionary()
        )

    # -- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> DuckDBSessionService:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection and release the file; the next call reopens it."""
        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:
        """:meth:`close` for code without an event loop (``atexit`` handlers, notebooks)."""
        with self._db_lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
                self._next_seq.clear()
                self._heads.clear()

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(self, app_name: str, user_id: str, session_id: str | None = None,
                             state: dict[str, Any] | None = None) -> Session:
        """Insert a new empty session; ``ValueError`` when ``session_id`` is given and already exists."""
        key = SessionKey(app_name, user_id, session_id or new_session_id())
        initial_state = dict(state or {})
        state_json = json.dumps(initial_state)
        now = time.time()

        def insert(con: _Connection) -> None:
            try:
                con.execute(
                    "INSERT INTO sessions (app_name, user_id, session_id, state, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    [*_key_params(key), state_json, now, now],
                )
            except duckdb.ConstraintException:
                raise ValueError(f"session already exists: {describe(key)}") from None
            self._next_seq[key] = 0
            self._heads.pop((app_name, user_id), None)  # reloaded in created_at order on next use

        async with self._write_lock():
            await self._run(insert)
        return Session(app_name=app_name, user_id=user_id, id=key.session_id, state=initial_state,
                       created_at=now, updated_at=now)

    async def get_session(self, app_name: str, user_id: str, session_id: str) -> Session | None:
        """The session with its events and summaries, or ``None`` when it was never created or was deleted."""
        key = SessionKey(app_name, user_id, session_id)

        def read(con: _Connection) -> Session | None:
            row = con.execute(
                f"SELECT state, created_at, updated_at FROM sessions WHERE {_KEY_MATCH}", _key_params(key)
            ).fetchone()
            if row is None:
                return None
            events = con.execute(
                f"SELECT appended_at, event_json FROM events WHERE {_KEY_MATCH} ORDER BY seq", _key_params(key)
            ).fetchall()
            summaries = con.execute(
                f"SELECT filter_key, text, updated_at, boundary, topics FROM summaries WHERE {_KEY_MATCH}",
                _key_params(key),
            ).fetchall()
            return Session(
                app_name=app_name,
                user_id=user_id,
                id=session_id,
                events=[Event.from_json(text) for _, text in events],
                state=json.loads(row[0]),
                summaries={fk: _summary_from_row(*rest) for fk, *rest in summaries},
                created_at=float(row[1]),
                updated_at=max([float(row[2]), *(appended for appended, _ in events)]),
            )

        return await self._run(read)

    async def list_sessions(self, app_name: str, user_id: str) -> list[Session]:
        # Three queries in total, whatever the number of sessions (no per-session round trip).
        """Every session of the user with events and summaries, oldest first, read in three queries whatever
        their number.
        """
        def read(con: _Connection) -> list[Session]:
            params = [app_name, user_id]
            rows = con.execute(
                "SELECT session_id, state, created_at, updated_at FROM sessions"
                " WHERE app_name = ? AND user_id = ? ORDER BY created_at, session_id",
                params,
            ).fetchall()
            sessions = {
                sid: Session(app_name=app_name, user_id=user_id, id=sid, state=json.loads(state),
                             created_at=float(created), updated_at=float(updated))
                for sid, state, created, updated in rows
            }
            for sid, appended_at, text in con.execute(
                "SELECT session_id, appended_at, event_json FROM events WHERE app_name = ? AND user_id = ?"
                " ORDER BY session_id, seq",
                params,
            ).fetchall():
                if sid in sessions:
                    session = sessions[sid]
                    session.events.append(Event.from_json(text))
                    session.updated_at = max(session.updated_at, appended_at)
            for sid, fk, *rest in con.execute(
                "SELECT session_id, filter_key, text, updated_at, boundary, topics FROM summaries"
                " WHERE app_name = ? AND user_id = ?",
                params,
            ).fetchall():
                if sid in sessions:
                    sessions[sid].summaries[fk] = _summary_from_row(*rest)
            return list(sessions.values())

        return await self._run(read)

    async def session_heads(self, app_name: str, user_id: str) -> dict[str, SessionHead]:
        """Session id -> head for every session of the user, oldest first; answered from a cache kept by this
        service's own writes when it can, so a recall index can poll it cheaply.
        """
        user = (app_name, user_id)
        # Known heads are answered without a thread hop, unless a write holds the lock right now.
        if self._connection is not None and self._db_lock.acquire(blocking=False):
            try:
                known = self._heads.get(user)
                if known is not None:
                    return dict(known)
            finally:
                self._db_lock.release()

        # Two small queries (a join of the two costs twice as much): no event JSON is read.
        def read(con: _Connection) -> dict[str, SessionHead]:
            known = self._heads.get(user)
            if known is None:
                params = [app_name, user_id]
                ids = con.execute("SELECT session_id FROM sessions WHERE app_name = ? AND user_id = ?"
                                  " ORDER BY created_at, session_id", params).fetchall()
                ends = {sid: (int(count), last) for sid, count, last in con.execute(
                    "SELECT session_id, count(*), arg_max(event_id, seq) FROM events"
                    " WHERE app_name = ? AND user_id = ? GROUP BY session_id", params).fetchall()}
                known = self._heads[user] = {sid: SessionHead(*ends.get(sid, (0, ""))) for (sid,) in ids}
            return dict(known)

        return await self._run(read)

    async def delete_session(self, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session's events, summaries and row in one transaction; an unknown session is not an
        error.
        """
        params = [app_name, user_id, session_id]

        def delete(con: _Connection) -> None:
            with _transaction(con):
                for table in ("events", "summaries", "sessions"):
                    con.execute(f"DELETE FROM {table} WHERE {_KEY_MATCH}", params)
            self._next_seq.pop(SessionKey(app_name, user_id, session_id), None)
            self._heads.pop((app_name, user_id), None)

        async with self._write_lock():
            await self._run(delete)

    # -- ledger and state ----------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        """Commit ``event`` (group commit with concurrent appends) and then append it to ``session``;
        ``KeyError`` when the session does not exist. Returns only after the commit.
        """
        await self.append_events(session, [event])
        return event

    async def append_events(self, session: Session, events: Sequence[Event], *, create: bool = False) -> None:
        """Commit ``events`` in order, in one group commit (one statement with whatever concurrent
        appends join it), then append them to ``session``. Returns only after the commit; if one
        fails, the ones after it in this session fail too (the ledger never has a gap).

        ``create=True``: ``session`` is new and not stored yet; its row is inserted in the same
        transaction as its first events (``ValueError`` when it exists), which saves a commit of its own.
        """
        if not events:
            if create:
                await self.create_session(session.app_name, session.user_id, session.id, session.state)
            return
        # One future for the call: its events are queued together, so they are always in one batch.
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # A caller cancelled after its items joined a batch never awaits the outcome; consume it
        # so asyncio does not log "exception was never retrieved".
        done.add_done_callback(_consume_outcome)
        items = []
        for event in events:
            ensure_token_count(event, self._count_tokens)
            delta = json.loads(json.dumps(event.state_delta)) if event.state_delta else None
            items.append(_PendingAppend(session=session, event=event, event_json=event.to_json(), delta=delta,
                                        done=done))
        items[0].create = create
        items[-1].last = True
        writer = self._writer()
        writer.pending.extend(items)
        try:
            async with writer.lock:
                if not done.done():
                    if self.linger:
                        await asyncio.sleep(self.linger)  # the batch gathers the appends that come meanwhile
                    batch, writer.pending = writer.pending, []
                    flush = asyncio.ensure_future(self._flush(batch))
                    try:
                        await asyncio.shield(flush)
                    except asyncio.CancelledError:
                        # Other tasks' events are in this batch: finish it before giving up the lock.
                        await flush
                        raise
        except asyncio.CancelledError:
            for item in items:
                if item in writer.pending:
                    writer.pending.remove(item)  # never started: the event is not written
            raise
        await done

    async def _flush(self, batch: list[_PendingAppend]) -> None:
        """Write a batch in one transaction; if that fails, write its items one by one so a bad
        item (say, a deleted session) fails alone.
        """
        try:
            await self._run(lambda con: self._insert_events(con, batch), self.append_executor)
        except Exception:
            failed: dict[SessionKey, Exception] = {}
            for item in batch:
                key = item.session.key
                if key in failed:  # an earlier event of this session was not stored: neither is this one
                    if not item.done.done():
                        item.done.set_exception(failed[key])
                    continue
                try:
                    await self._run(functools.partial(self._insert_events, batch=[item], reload_seq=True),
                                    self.append_executor)
                except Exception as exc:
                    failed[key] = exc
                    if not item.done.done():
                        item.done.set_exception(exc)
                else:
                    self._apply_to_session(item)
            return
        for item in batch:
            self._apply_to_session(item)

    @staticmethod
    def _apply_to_session(item: _PendingAppend) -> None:
        session = item.session
        if item.event.state_delta:
            merge_state(session.state, item.event.state_delta)
        session.events.append(item.event)
        session.updated_at = max(session.updated_at, item.appended_at)
        if item.last and not item.done.done():
            item.done.set_result(None)

    def _insert_events(self, con: _Connection, batch: list[_PendingAppend], reload_seq: bool = False) -> None:
        """Runs in the worker thread. Seqs are taken from the cache and committed to it only
        after the transaction succeeds, so a rolled-back batch leaves no gap.
        """
        now = time.time()
        next_seq: dict[SessionKey, int] = {}
        rows: list[list[Any]] = []
        deltas: dict[SessionKey, list[dict[str, Any]]] = {}
        created: list[_PendingAppend] = []
        for item in batch:
            key = item.session.key
            if item.create and key not in next_seq:
                created.append(item)
                next_seq[key] = 0
            elif key not in next_seq:
                cached = None if reload_seq else self._next_seq.get(key)
                next_seq[key] = cached if cached is not None else self._load_next_seq(con, key)
            event = item.event
            rows.append([*_key_params(key), next_seq[key], event.id, event.invocation_id, event.author,
                         event.object, event.role, event.filter_key, event.timestamp, event.token_count,
                         now, item.event_json])
            next_seq[key] += 1
            if item.delta:
                deltas.setdefault(key, []).append(item.delta)
            item.appended_at = now

        if not deltas and not created:
            # One statement is its own transaction; BEGIN/COMMIT would add two round trips.
            _insert_event_rows(con, rows)
            self._next_seq.update(next_seq)
            self._advance_heads(batch, next_seq)
            return
        with _transaction(con):
            if created:
                self._insert_sessions(con, created, now)
            _insert_event_rows(con, rows)
            for key, key_deltas in deltas.items():
                row = con.execute(f"SELECT state FROM sessions WHERE {_KEY_MATCH}", _key_params(key)).fetchone()
                if row is None:
                    raise KeyError(f"no such session: {describe(key)} (create it before appending)")
                stored_state = json.loads(row[0])
                for delta in key_deltas:
                    merge_state(stored_state, delta)
                con.execute(f"UPDATE sessions SET state = ?, updated_at = ? WHERE {_KEY_MATCH}",
                            [json.dumps(stored_state), now, *_key_params(key)])
        self._next_seq.update(next_seq)
        self._advance_heads(batch, next_seq)

    def _insert_sessions(self, con: _Connection, created: list[_PendingAppend], now: float) -> None:
        """The rows of sessions created by their first append (one statement; in its transaction)."""
        sessions = [item.session for item in created]
        columns = [[s.app_name for s in sessions], [s.user_id for s in sessions], [s.id for s in sessions],
                   [json.dumps(s.state) for s in sessions]]
        try:
            con.execute("INSERT INTO sessions (app_name, user_id, session_id, state, created_at, updated_at)"
                        " SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),"
                        " unnest(?::VARCHAR[])::JSON, ?, ?", [*columns, now, now])
        except duckdb.ConstraintException:
            if len(sessions) == 1:
                raise ValueError(f"session already exists: {describe(sessions[0].key)}") from None
            raise
        for s in sessions:
            self._heads.pop((s.app_name, s.user_id), None)  # reloaded in created_at order on next use

    def _advance_heads(self, batch: list[_PendingAppend], next_seq: dict[SessionKey, int]) -> None:
        """After a committed batch: the heads of its sessions (seq = count, as seqs start at 0)."""
        for item in batch:
            key = item.session.key
            heads = self._heads.get((key.app_name, key.user_id))
            if heads is not None:
                heads[key.session_id] = SessionHead(next_seq[key], item.event.id)

    def _load_next_seq(self, con: _Connection, key: SessionKey) -> int:
        row = con.execute(
            f"SELECT (SELECT count(*) FROM sessions WHERE {_KEY_MATCH}),"
            f" (SELECT coalesce(max(seq) + 1, 0) FROM events WHERE {_KEY_MATCH})",
            [*_key_params(key), *_key_params(key)],
        ).fetchone()
        if row is None or not row[0]:
            raise KeyError(f"no such session: {describe(key)} (create it before appending)")
        return int(row[1])

    async def update_state(self, session: Session, delta: dict[str, Any]) -> None:
        """Merge ``delta`` into the stored state and ``session.state``; ``KeyError`` when the session does not
        exist.
        """
        key = session.key
        delta_copy = json.loads(json.dumps(delta))

        def update(con: _Connection) -> None:
            with _transaction(con):
                row = con.execute(f"SELECT state FROM sessions WHERE {_KEY_MATCH}", _key_params(key)).fetchone()
                if row is None:
                    raise KeyError(f"no such session: {describe(key)}")
                stored_state = json.loads(row[0])
                merge_state(stored_state, delta_copy)
                con.execute(f"UPDATE sessions SET state = ?, updated_at = ? WHERE {_KEY_MATCH}",
                            [json.dumps(stored_state), time.time(), *_key_params(key)])

        async with self._write_lock():
            await self._run(update)
            merge_state(session.state, delta)
            session.updated_at = time.time()

    async def get_event_window(self, app_name: str, user_id: str, session_id: str, event_id: str,
                               before: int = 1, after: int = 1,
                               roles: Sequence[str] | None = None) -> list[Event]:
        """Events around ``event_id`` (see :meth:`SessionService.get_event_window`), read without loading the
        whole ledger; ``KeyError`` when the session or the anchor event does not exist.
        """
        check_window_sizes(before, after)
        key = SessionKey(app_name, user_id, session_id)
        role_filter = "" if roles is None else " AND list_contains(?, role)"
        role_params: list[Any] = [] if roles is None else [list(roles)]

        def read(con: _Connection) -> list[Event]:
            anchor = con.execute(
                f"SELECT seq, event_json FROM events WHERE {_KEY_MATCH} AND event_id = ?"
                " ORDER BY seq DESC LIMIT 1",
                [*_key_params(key), event_id],
            ).fetchone()
            if anchor is None:
                exists = con.execute(f"SELECT 1 FROM sessions WHERE {_KEY_MATCH}", _key_params(key)).fetchone()
                if exists is None:
                    raise KeyError(f"no such session: {describe(key)}")
                raise KeyError(f"no event {event_id!r} in session {describe(key)}")
            anchor_seq, anchor_json = anchor
            earlier = con.execute(
                f"SELECT event_json FROM events WHERE {_KEY_MATCH} AND seq < ?{role_filter}"
                " ORDER BY seq DESC LIMIT ?",
                [*_key_params(key), anchor_seq, *role_params, before],
            ).fetchall()
            later = con.execute(
                f"SELECT event_json FROM events WHERE {_KEY_MATCH} AND seq > ?{role_filter}"
                " ORDER BY seq LIMIT ?",
                [*_key_params(key), anchor_seq, *role_params, after],
            ).fetchall()
            texts = [t for (t,) in reversed(earlier)] + [anchor_json] + [t for (t,) in later]
            return [Event.from_json(text) for text in texts]

        return await self._run(read)

    # -- summaries -----------------------------------------------------------------------------

    async def get_summary(self, session: Session, filter_key: str = FULL_SESSION_KEY) -> Summary | None:
        """The summary stored under ``filter_key``, or ``None`` when none was written yet."""
        params = [*_key_params(session.key), filter_key]

        def read(con: _Connection) -> Summary | None:
            row = con.execute(
                f"SELECT text, updated_at, boundary, topics FROM summaries WHERE {_KEY_MATCH} AND filter_key = ?",
                params,
            ).fetchone()
            return None if row is None else _summary_from_row(*row)

        return await self._run(read)

    async def write_summary(self, session: Session, filter_key: str, summary: Summary) -> None:
        """Replace the summary of ``filter_key`` (text and boundary in one row) and update ``session``;
        ``KeyError`` when the session does not exist.
        """
        key = session.key
        boundary_json = json.dumps(summary.boundary.to_dict()) if summary.boundary else None
        topics_json = json.dumps(list(summary.topics))

        def write(con: _Connection) -> None:
            with _transaction(con):
                exists = con.execute(f"SELECT 1 FROM sessions WHERE {_KEY_MATCH}", _key_params(key)).fetchone()
                if exists is None:
                    raise KeyError(f"no such session: {describe(key)}")
                # One row holds text and boundary, so a single upsert moves them together.
                con.execute(
                    "INSERT OR REPLACE INTO summaries (app_name, user_id, session_id, filter_key, text,"
                    " updated_at, boundary, topics) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [*_key_params(key), filter_key, summary.text, summary.updated_at, boundary_json,
                     topics_json],
                )

        async with self._write_lock():
            await self._run(write)
            session.summaries[filter_key] = summary

    # -- internals -----------------------------------------------------------------------------

    def _writer(self) -> _LoopWriter:
        loop = asyncio.get_running_loop()
        writer = self._writers.get(loop)
        if writer is None:
            writer = self._writers[loop] = _LoopWriter()
        return writer

    def _write_lock(self) -> asyncio.Lock:
        return self._writer().lock

    def _open(self) -> _Connection:
        if self._connection is None:
            if isinstance(self.path, Path):
                self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                con = duckdb.connect(str(self.path),
                                     config={"fsync_mode": "STANDARD" if self.fsync else "NONE"})
            except duckdb.Error as exc:
                raise RuntimeError(f"cannot open session store {self.path}: {exc}") from None
            for statement in _SCHEMA:
                con.execute(statement)
            self._next_seq.clear()
            self._heads.clear()
            self._connection = con
        return self._connection

    def _locked(self, work: Callable[[_Connection], _T]) -> _T:
        with self._db_lock:
            return work(self._open())

    async def _run(self, work: Callable[[_Connection], _T], executor: Executor | None = None) -> _T:
        if executor is None:
            return await asyncio.to_thread(self._locked, work)
        return await asyncio.get_running_loop().run_in_executor(executor, self._locked, work)


def _consume_outcome(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


@contextlib.contextmanager
def _transaction(con: _Connection) -> Iterator[_Connection]:
    """BEGIN ... COMMIT, or ROLLBACK when the block raises."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
