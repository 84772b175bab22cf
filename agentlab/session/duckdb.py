"""The DuckDB session backend: one file holds sessions, the event ledger and summaries.

The tables are described in :mod:`agentlab.session.duckdb_tables`; the writes, appends by group
commit, are in :mod:`agentlab.session.duckdb_writes`; this module holds the service and its reads.

Connection lifetime: DuckDB lets only one process open a file for writing. The service opens
the file on its first call and keeps one connection until :meth:`DuckDBSessionService.close`
(or the end of an ``async with`` block); a closed service reopens the file on its next call
(:class:`agentlab.duckdb_files.DuckDBService`). Close the service before another process needs
the file, and use one service object per file within a process (it caches the next ``seq`` of
each session while its connection is open).

Concurrency: every DuckDB call runs in a worker thread (``asyncio.to_thread``) on that one
connection, guarded by a threading lock. Writes are serialised by an asyncio lock. Appends use
group commit: while one batch is being written, further appends queue up, and the next holder
of the lock writes everything queued in one transaction (one INSERT of column lists). The caller's
``Session`` objects are updated in batch order after the commit, so ``session.events`` always
matches ``seq``. An append returns only after its event is committed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from agentlab.events import Event
from agentlab.session.base import (
    FULL_SESSION_KEY,
    EventTokenCounter,
    Session,
    SessionHead,
    SessionKey,
    Summary,
)
from agentlab.session.duckdb_tables import KEY_MATCH, DuckConnection, key_params, summary_from_row
from agentlab.session.duckdb_texts import event_from_row
from agentlab.session.duckdb_writes import SessionWrites
from agentlab.session.inmemory import check_window_sizes, describe


class DuckDBSessionService(SessionWrites):
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
    ``threads`` sets DuckDB's worker threads (default: DuckDB's, one per core).

    ``text_file_over`` (default ``None``: every text in its row) keeps each string of an event
    longer than that many characters in a file of its own, in ``<path>.texts/``, written before
    the event's commit: DuckDB rewrites the whole last row group of the ledger at every
    checkpoint, so multi-megabyte events in the table make every checkpoint slower and larger
    (:mod:`agentlab.session.duckdb_texts`). Such events are read back whatever this setting;
    copy the folder along with the file.
    """

    def __init__(self, path: str | Path, token_counter: EventTokenCounter | None = None, *,
                 fsync: bool = True, linger: float = 0.0, append_executor: Executor | None = None,
                 threads: int | None = None, text_file_over: int | None = None) -> None:
        super().__init__(path, token_counter, linger=linger, append_executor=append_executor,
                         text_file_over=text_file_over, fsync=fsync)
        self.fsync = fsync
        self.threads = threads

    def _event(self, row_text: str) -> Event:
        """A stored event, its long texts read back from their files (see ``duckdb_texts``)."""
        return event_from_row(row_text, self.texts_root)

    def _config(self) -> dict[str, str | bool | int | float | list[str]]:
        config: dict[str, str | bool | int | float | list[str]] = {"fsync_mode": "STANDARD" if self.fsync else "NONE"}
        if self.threads is not None:
            config["threads"] = self.threads
        return config

    # -- reads ---------------------------------------------------------------------------------

    async def get_session(self, app_name: str, user_id: str, session_id: str) -> Session | None:
        """The session with its events and summaries, or ``None`` when it was never created or was deleted."""
        key = SessionKey(app_name, user_id, session_id)

        def read(con: DuckConnection) -> Session | None:
            row = con.execute(
                f"SELECT state, created_at, updated_at FROM sessions WHERE {KEY_MATCH}", key_params(key)
            ).fetchone()
            if row is None:
                return None
            events = con.execute(
                f"SELECT appended_at, event_json FROM events WHERE {KEY_MATCH} ORDER BY seq", key_params(key)
            ).fetchall()
            summaries = con.execute(
                f"SELECT filter_key, text, updated_at, boundary, topics FROM summaries WHERE {KEY_MATCH}",
                key_params(key),
            ).fetchall()
            return Session(
                app_name=app_name,
                user_id=user_id,
                id=session_id,
                events=[self._event(text) for _, text in events],
                state=json.loads(row[0]),
                summaries={fk: summary_from_row(*rest) for fk, *rest in summaries},
                created_at=float(row[1]),
                updated_at=max([float(row[2]), *(appended for appended, _ in events)]),
            )

        return await self._run(read)

    async def list_sessions(self, app_name: str, user_id: str) -> list[Session]:
        # Three queries in total, whatever the number of sessions (no per-session round trip).
        """Every session of the user with events and summaries, oldest first, read in three queries whatever
        their number.
        """
        def read(con: DuckConnection) -> list[Session]:
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
                    session.events.append(self._event(text))
                    session.updated_at = max(session.updated_at, appended_at)
            for sid, fk, *rest in con.execute(
                "SELECT session_id, filter_key, text, updated_at, boundary, topics FROM summaries"
                " WHERE app_name = ? AND user_id = ?",
                params,
            ).fetchall():
                if sid in sessions:
                    sessions[sid].summaries[fk] = summary_from_row(*rest)
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
        def read(con: DuckConnection) -> dict[str, SessionHead]:
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

        def read(con: DuckConnection) -> list[Event]:
            anchor = con.execute(
                f"SELECT seq, event_json FROM events WHERE {KEY_MATCH} AND event_id = ?"
                " ORDER BY seq DESC LIMIT 1",
                [*key_params(key), event_id],
            ).fetchone()
            if anchor is None:
                exists = con.execute(f"SELECT 1 FROM sessions WHERE {KEY_MATCH}", key_params(key)).fetchone()
                if exists is None:
                    raise KeyError(f"no such session: {describe(key)}")
                raise KeyError(f"no event {event_id!r} in session {describe(key)}")
            anchor_seq, anchor_json = anchor
            earlier = con.execute(
                f"SELECT event_json FROM events WHERE {KEY_MATCH} AND seq < ?{role_filter}"
                " ORDER BY seq DESC LIMIT ?",
                [*key_params(key), anchor_seq, *role_params, before],
            ).fetchall()
            later = con.execute(
                f"SELECT event_json FROM events WHERE {KEY_MATCH} AND seq > ?{role_filter}"
                " ORDER BY seq LIMIT ?",
                [*key_params(key), anchor_seq, *role_params, after],
            ).fetchall()
            texts = [t for (t,) in reversed(earlier)] + [anchor_json] + [t for (t,) in later]
            return [self._event(text) for text in texts]

        return await self._run(read)

    # -- summaries -----------------------------------------------------------------------------

    async def get_summary(self, session: Session, filter_key: str = FULL_SESSION_KEY) -> Summary | None:
        """The summary stored under ``filter_key``, or ``None`` when none was written yet."""
        params = [*key_params(session.key), filter_key]

        def read(con: DuckConnection) -> Summary | None:
            row = con.execute(
                f"SELECT text, updated_at, boundary, topics FROM summaries WHERE {KEY_MATCH} AND filter_key = ?",
                params,
            ).fetchone()
            return None if row is None else summary_from_row(*row)

        return await self._run(read)
