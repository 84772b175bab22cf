"""The server's own tables, in the same DuckDB file as its session ledger.

Tables (created on first use)::

    serve_conversations (tenant, conversation_id) PK, session_id, key_source, created_at
    serve_prefixes      (tenant, chain_hash, conversation_id) PK, length
    serve_calls         one row per chat-completions call (see CALL_COLUMNS)

``serve_prefixes`` indexes every prefix of every conversation's ledger by its chain hash, so a
request without an explicit id finds its conversation by the longest known prefix; the index
is also kept in memory (loaded at start) so that lookups cost no query.

Writes are queued and committed by one background writer, everything queued in one transaction
(group commit: one fsync for many calls instead of one each), so no request waits for them; a call
row is one INSERT, so a call is either recorded whole or not at all. :meth:`ServeStore.flush`
waits for the queue to drain (the server does on settle and close).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import duckdb

_T = TypeVar("_T")

#: ``serve_calls`` columns and their SQL types, in order.
CALL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("call_id", "VARCHAR"), ("started_at", "DOUBLE"), ("tenant", "VARCHAR"), ("conversation_id", "VARCHAR"),
    ("session_id", "VARCHAR"), ("key_source", "VARCHAR"), ("arm", "VARCHAR"), ("model", "VARCHAR"),
    # "answer": the client's call; "summary": a call the arm's summariser made upstream.
    ("purpose", "VARCHAR"),
    ("stream", "BOOLEAN"), ("ledger_mode", "VARCHAR"), ("retry", "BOOLEAN"), ("events_appended", "INTEGER"),
    ("client_messages", "INTEGER"), ("upstream_messages", "INTEGER"),
    ("client_prompt_tokens", "INTEGER"), ("upstream_prompt_tokens", "INTEGER"),
    ("client_prefix_tokens", "INTEGER"), ("upstream_prefix_tokens", "INTEGER"),
    ("usage_prompt_tokens", "INTEGER"), ("usage_completion_tokens", "INTEGER"), ("usage_cached_tokens", "INTEGER"),
    ("upstream_calls", "INTEGER"), ("recall_rounds", "INTEGER"),
    ("latency_ms", "DOUBLE"), ("ttft_ms", "DOUBLE"), ("upstream_ms", "DOUBLE"),
    ("status", "INTEGER"), ("outcome", "VARCHAR"), ("error", "VARCHAR"), ("check_error", "VARCHAR"),
    ("finish_reason", "VARCHAR"),
)

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS serve_conversations (
        tenant VARCHAR NOT NULL, conversation_id VARCHAR NOT NULL, session_id VARCHAR NOT NULL,
        key_source VARCHAR NOT NULL, created_at DOUBLE NOT NULL,
        PRIMARY KEY (tenant, conversation_id))
    """,
    """
    CREATE TABLE IF NOT EXISTS serve_prefixes (
        tenant VARCHAR NOT NULL, chain_hash VARCHAR NOT NULL, conversation_id VARCHAR NOT NULL,
        length INTEGER NOT NULL,
        PRIMARY KEY (tenant, chain_hash, conversation_id))
    """,
    "CREATE TABLE IF NOT EXISTS serve_calls (" + ", ".join(f"{n} {t}" for n, t in CALL_COLUMNS) + ")",
)


_INSERT_CALL = f"INSERT INTO serve_calls VALUES ({', '.join('?' * len(CALL_COLUMNS))})"


def duckdb_config(fsync: bool) -> dict[str, str | bool | int | float | list[str]]:
    """The connection config the session service uses too (DuckDB refuses a second connection to
    one file with another config, so both sides must agree).
    """
    return {"fsync_mode": "STANDARD" if fsync else "NONE"}


class ServeStore:
    """Conversations, the prefix index and the call log, on one connection guarded by a lock."""

    def __init__(self, path: str | Path, *, fsync: bool = True) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = duckdb.connect(self.path, config=duckdb_config(fsync))
        except duckdb.Error as exc:
            raise RuntimeError(f"cannot open the serve database {self.path}: {str(exc).splitlines()[0]}") from None
        for statement in _SCHEMA:
            self._con.execute(statement)
        self._lock = threading.Lock()
        self._queue: list[tuple[str, list[Any]]] = []
        self._writer: asyncio.Future[None] | None = None
        #: The last error of a background write (the writer logs it and carries on).
        self.last_error: Exception | None = None
        #: (tenant, chain hash) -> conversation ids whose ledger has that prefix.
        self.prefixes: dict[tuple[str, str], set[str]] = {}
        for tenant, chain, conv in self._con.execute(
                "SELECT tenant, chain_hash, conversation_id FROM serve_prefixes").fetchall():
            self.prefixes.setdefault((tenant, chain), set()).add(conv)
        #: (tenant, conversation id) -> chain hashes already in ``serve_prefixes``.
        self._written: dict[tuple[str, str], set[str]] = {}
        for (tenant, chain), convs in self.prefixes.items():
            for conv in convs:
                self._written.setdefault((tenant, conv), set()).add(chain)
        #: (tenant, conversation id) -> current session id.
        self.conversations: dict[tuple[str, str], str] = {
            (t, c): s for t, c, s in self._con.execute(
                "SELECT tenant, conversation_id, session_id FROM serve_conversations").fetchall()}

    def close(self) -> None:
        """Close the connection (after :meth:`flush`, or queued writes are lost)."""
        with self._lock:
            self._con.close()

    def _locked(self, work: Callable[[duckdb.DuckDBPyConnection], _T]) -> _T:
        with self._lock:
            return work(self._con)

    async def run(self, work: Callable[[duckdb.DuckDBPyConnection], _T]) -> _T:
        """Run ``work(connection)`` in a worker thread, under the lock."""
        return await asyncio.to_thread(self._locked, work)

    def submit(self, sql: str, params: Sequence[Any]) -> None:
        """Queue one statement for the background writer (starts it when idle)."""
        self._queue.append((sql, list(params)))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []

            def write(con: duckdb.DuckDBPyConnection, batch: list[tuple[str, list[Any]]] = batch) -> None:
                con.execute("BEGIN TRANSACTION")
                try:
                    for sql, params in batch:
                        con.execute(sql, params)
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")

            try:
                await self.run(write)
            except Exception as exc:  # logged by the caller's flush; a lost call row must not stop serving
                self.last_error = exc

    async def flush(self) -> None:
        """Wait until every queued write is committed."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    def query(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """A pandas frame of ``sql`` on this connection (for in-process readers: notebooks, tests)."""
        return self._locked(lambda con: con.execute(sql, list(params)).df())

    # ------------------------------------------------------------------ conversations

    def save_conversation(self, tenant: str, conversation_id: str, session_id: str, key_source: str) -> None:
        """Insert or move a conversation to ``session_id`` (a branch moves it)."""
        self.conversations[(tenant, conversation_id)] = session_id
        self.submit("INSERT INTO serve_conversations VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, conversation_id)"
                    " DO UPDATE SET session_id = excluded.session_id",
                    [tenant, conversation_id, session_id, key_source, time.time()])

    def note_prefixes(self, tenant: str, conversation_id: str, chain: Sequence[str]) -> None:
        """Index ``chain``'s prefixes in memory now (:meth:`index_prefixes` makes them durable)."""
        for h in chain:
            self.prefixes.setdefault((tenant, h), set()).add(conversation_id)

    def index_prefixes(self, tenant: str, conversation_id: str, chain: Sequence[str]) -> None:
        """Record that ``conversation_id``'s ledger has every prefix in ``chain`` (hash i = length i + 1)."""
        written = self._written.setdefault((tenant, conversation_id), set())
        new = [(h, i + 1) for i, h in enumerate(chain) if h not in written]
        if not new:
            return
        self.note_prefixes(tenant, conversation_id, chain)
        written.update(h for h, _ in new)

        self.submit("INSERT INTO serve_prefixes SELECT ?, unnest(?::VARCHAR[]), ?, unnest(?::INTEGER[])"
                    " ON CONFLICT DO NOTHING", [tenant, [h for h, _ in new], conversation_id, [n for _, n in new]])

    # ------------------------------------------------------------------ calls

    def record_call(self, row: dict[str, Any]) -> None:
        """Queue one call row (missing columns are NULL)."""
        self.submit(_INSERT_CALL, [row.get(name) for name, _ in CALL_COLUMNS])
