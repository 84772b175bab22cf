"""The writes of the DuckDB session backend, appends by group commit.

Writes are serialised by an asyncio lock (one per event loop, so a service works from several
``asyncio.run()`` calls). Appends use group commit: while one batch is being written, further
appends queue up, and the next holder of the lock writes everything queued in one transaction (one
INSERT of column lists). The caller's ``Session`` objects are updated in batch order after the
commit, so ``session.events`` always matches ``seq``. An append returns only after its event is
committed.

The next ``seq`` of each session and the session heads of each (app, user) are cached here while
the connection is open (no other process can write the file meanwhile) and dropped whenever it
opens or closes. The reads and the service itself are in :mod:`agentlab.session.duckdb`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from agentlab.duckdb_files import DuckDBService, transaction
from agentlab.events import Event
from agentlab.session.base import EventTokenCounter, Session, SessionHead, SessionKey, Summary
from agentlab.session.duckdb_tables import (
    KEY_MATCH,
    SESSION_SCHEMA,
    DuckConnection,
    event_json,
    insert_event_rows,
    key_params,
)
from agentlab.session.duckdb_texts import LongTexts, remove_session_texts, texts_folder
from agentlab.session.inmemory import (
    default_token_counter,
    describe,
    ensure_token_count,
    merge_state,
    new_session_id,
)


@dataclass(eq=False)
class _PendingAppend:
    """An append waiting for (or inside) a group-commit batch."""

    session: Session
    event: Event
    #: The event as stored (encoded by the writer thread, on first use).
    event_json: str
    delta: dict[str, Any] | None
    done: asyncio.Future[None]
    appended_at: float = 0.0
    #: The session is new: its row goes in with this event, in the same transaction.
    create: bool = False
    #: The last event of its ``append_events`` call (``done``, shared by the call's events, is set after it).
    last: bool = False
    #: The files its long texts were written to (removed if it is never committed).
    files: list[Path] = field(default_factory=list)


@dataclass
class _LoopWriter:
    """Write serialisation for one event loop: the lock and the appends queued behind it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: list[_PendingAppend] = field(default_factory=list)


class SessionWrites(DuckDBService):
    """The writing half of :class:`~agentlab.session.duckdb.DuckDBSessionService`: every write, the
    group commit of appends, and the caches those writes keep (next ``seq``, session heads).
    """

    what = "session store"
    schema = SESSION_SCHEMA

    def __init__(self, path: str | Path, token_counter: EventTokenCounter | None, *, linger: float,
                 append_executor: Executor | None, text_file_over: int | None = None, fsync: bool = True) -> None:
        if not linger >= 0:
            raise ValueError(f"linger must be >= 0 seconds, got {linger}")
        super().__init__(path)
        #: Where the ledger's long texts are (read whenever the file has any; see ``duckdb_texts``).
        self.texts_root = texts_folder(self.path) if isinstance(self.path, Path) else None
        if text_file_over is not None and not isinstance(self.path, Path):
            raise ValueError("text_file_over keeps long texts in files beside the database file;"
                             " an in-memory session store has none (leave it None)")
        #: Writes the strings over ``text_file_over`` characters to files (``None``: every text in its row).
        self.long_texts = None if text_file_over is None else LongTexts(Path(self.path), text_file_over, fsync=fsync)
        self.linger = linger
        #: Where group commits run (default: asyncio's default executor, like every other call).
        self.append_executor = append_executor
        self._count_tokens: EventTokenCounter = token_counter or default_token_counter
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

    def _forget(self) -> None:
        self._next_seq.clear()
        self._heads.clear()

    def _open(self) -> DuckConnection:
        opening = self._connection is None
        con = super()._open()
        if opening and self.long_texts is not None:  # this process holds the file now: no write is under way
            self.long_texts.remove_partial_files()
        return con

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(self, app_name: str, user_id: str, session_id: str | None = None,
                             state: dict[str, Any] | None = None) -> Session:
        """Insert a new empty session; ``ValueError`` when ``session_id`` is given and already exists."""
        key = SessionKey(app_name, user_id, session_id or new_session_id())
        initial_state = dict(state or {})
        state_json = json.dumps(initial_state)
        now = time.time()

        def insert(con: DuckConnection) -> None:
            try:
                con.execute(
                    "INSERT INTO sessions (app_name, user_id, session_id, state, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    [*key_params(key), state_json, now, now],
                )
            except duckdb.ConstraintException:
                raise ValueError(f"session already exists: {describe(key)}") from None
            self._next_seq[key] = 0
            self._heads.pop((app_name, user_id), None)  # reloaded in created_at order on next use

        async with self._write_lock():
            await self._run(insert)
        return Session(app_name=app_name, user_id=user_id, id=key.session_id, state=initial_state,
                       created_at=now, updated_at=now)


    async def delete_session(self, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session's events, summaries and row in one transaction; an unknown session is not an
        error.
        """
        params = [app_name, user_id, session_id]

        def delete(con: DuckConnection) -> None:
            with transaction(con):
                for table in ("events", "summaries", "sessions"):
                    con.execute(f"DELETE FROM {table} WHERE {KEY_MATCH}", params)
            key = SessionKey(app_name, user_id, session_id)
            self._next_seq.pop(key, None)
            self._heads.pop((app_name, user_id), None)
            if self.texts_root is not None:
                remove_session_texts(self.texts_root, key)

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

        Appends to one session are committed in the order they were called, whether they share a
        batch or not, so a caller need not wait for one append's commit before making the next: if
        an append fails, the appends to that session queued behind it fail with the same error
        instead of being committed after a gap.
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
            items.append(_PendingAppend(session=session, event=event, event_json="", delta=delta,
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
                    flush = asyncio.ensure_future(self._flush(batch, writer))
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

    async def _flush(self, batch: list[_PendingAppend], writer: _LoopWriter) -> None:
        """Write a batch in one transaction; if that fails, write its items one by one so a bad
        item (say, a deleted session) fails alone, with the later items of its session: those in
        the batch and those already queued for the next one (the ledger never has a gap).
        """
        try:
            await self._run(lambda con: self._insert_events(con, batch), self.append_executor)
        except Exception:
            failed: dict[SessionKey, Exception] = {}
            for item in batch:
                key = item.session.key
                if key in failed:  # an earlier event of this session was not stored: neither is this one
                    self._discard(item)
                    if not item.done.done():
                        item.done.set_exception(failed[key])
                    continue
                try:
                    await self._run(functools.partial(self._insert_events, batch=[item], reload_seq=True),
                                    self.append_executor)
                except Exception as exc:
                    failed[key] = exc
                    self._discard(item)
                    if not item.done.done():
                        item.done.set_exception(exc)
                else:
                    self._apply_to_session(item)
            if failed:  # queued while this batch was written: they would land after the gap
                kept = []
                for item in writer.pending:
                    error = failed.get(item.session.key)
                    if error is None:
                        kept.append(item)
                    else:
                        self._discard(item)
                        if not item.done.done():
                            item.done.set_exception(error)
                writer.pending[:] = kept
            return
        for item in batch:
            self._apply_to_session(item)

    def _discard(self, item: _PendingAppend) -> None:
        """An append that will never be committed: remove the files of its long texts."""
        if item.files and self.long_texts is not None:
            self.long_texts.discard(item.files)
            item.files.clear()

    @staticmethod
    def _apply_to_session(item: _PendingAppend) -> None:
        session = item.session
        if item.event.state_delta:
            merge_state(session.state, item.event.state_delta)
        session.events.append(item.event)
        session.updated_at = max(session.updated_at, item.appended_at)
        if item.last and not item.done.done():
            item.done.set_result(None)

    def _insert_events(self, con: DuckConnection, batch: list[_PendingAppend], reload_seq: bool = False) -> None:
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
            if not item.event_json:  # encoded here, in the worker thread: a large event holds up no event loop
                # Long strings in pieces (the lock is given back between them), or to files of their own.
                item.event_json = (event_json(event) if self.long_texts is None
                                   else self.long_texts.stored_json(key, event, item.files))
            rows.append([*key_params(key), next_seq[key], event.id, event.invocation_id, event.author,
                         event.object, event.role, event.filter_key, event.timestamp, event.token_count,
                         now, item.event_json])
            next_seq[key] += 1
            if item.delta:
                deltas.setdefault(key, []).append(item.delta)
            item.appended_at = now

        if not deltas and not created:
            # One statement is its own transaction; BEGIN/COMMIT would add two round trips.
            insert_event_rows(con, rows)
            self._next_seq.update(next_seq)
            self._advance_heads(batch, next_seq)
            return
        with transaction(con):
            if created:
                self._insert_sessions(con, created, now)
            insert_event_rows(con, rows)
            for key, key_deltas in deltas.items():
                row = con.execute(f"SELECT state FROM sessions WHERE {KEY_MATCH}", key_params(key)).fetchone()
                if row is None:
                    raise KeyError(f"no such session: {describe(key)} (create it before appending)")
                stored_state = json.loads(row[0])
                for delta in key_deltas:
                    merge_state(stored_state, delta)
                con.execute(f"UPDATE sessions SET state = ?, updated_at = ? WHERE {KEY_MATCH}",
                            [json.dumps(stored_state), now, *key_params(key)])
        self._next_seq.update(next_seq)
        self._advance_heads(batch, next_seq)

    def _insert_sessions(self, con: DuckConnection, created: list[_PendingAppend], now: float) -> None:
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

    def _load_next_seq(self, con: DuckConnection, key: SessionKey) -> int:
        row = con.execute(
            f"SELECT (SELECT count(*) FROM sessions WHERE {KEY_MATCH}),"
            f" (SELECT coalesce(max(seq) + 1, 0) FROM events WHERE {KEY_MATCH})",
            [*key_params(key), *key_params(key)],
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

        def update(con: DuckConnection) -> None:
            with transaction(con):
                row = con.execute(f"SELECT state FROM sessions WHERE {KEY_MATCH}", key_params(key)).fetchone()
                if row is None:
                    raise KeyError(f"no such session: {describe(key)}")
                stored_state = json.loads(row[0])
                merge_state(stored_state, delta_copy)
                con.execute(f"UPDATE sessions SET state = ?, updated_at = ? WHERE {KEY_MATCH}",
                            [json.dumps(stored_state), time.time(), *key_params(key)])

        async with self._write_lock():
            await self._run(update)
            merge_state(session.state, delta)
            session.updated_at = time.time()


    # -- summaries -----------------------------------------------------------------------------

    async def write_summary(self, session: Session, filter_key: str, summary: Summary) -> None:
        """Replace the summary of ``filter_key`` (text and boundary in one row) and update ``session``;
        ``KeyError`` when the session does not exist.
        """
        key = session.key
        boundary_json = json.dumps(summary.boundary.to_dict()) if summary.boundary else None
        topics_json = json.dumps(list(summary.topics))

        def write(con: DuckConnection) -> None:
            with transaction(con):
                exists = con.execute(f"SELECT 1 FROM sessions WHERE {KEY_MATCH}", key_params(key)).fetchone()
                if exists is None:
                    raise KeyError(f"no such session: {describe(key)}")
                # One row holds text and boundary, so a single upsert moves them together.
                con.execute(
                    "INSERT OR REPLACE INTO summaries (app_name, user_id, session_id, filter_key, text,"
                    " updated_at, boundary, topics) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [*key_params(key), filter_key, summary.text, summary.updated_at, boundary_json,
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


def _consume_outcome(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
