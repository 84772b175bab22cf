"""The server's own tables, in the same DuckDB file as its session ledger.

Tables (created on first use)::

    serve_conversations (tenant, conversation_id) PK, session_id, key_source, created_at
    serve_prefixes      (tenant, chain_hash, conversation_id) PK, length
    serve_calls         one row per chat-completions call (see CALL_COLUMNS)
    serve_exchanges     one row per tool call the server ran itself (recall; see EXCHANGE_COLUMNS)

``serve_prefixes`` indexes every prefix of every conversation's ledger by its chain hash, so a
request without an explicit id finds its conversation by the longest known prefix. The live
conversations' part of the index is kept in memory, so that their lookups cost no query; a
conversation the proxy evicts (see ``ProxyBackend.max_conversations``), and everything on disk at
start-up, is looked up in the database instead. A fixed-size Bloom filter of those keys
(:class:`KeyFilter`) says when a lookup can skip the query, so the server's memory stays flat
however many conversations it has seen, and a new conversation costs no query.

Writes are queued and committed by one background writer: everything queued in one transaction
(group commit), so no request waits for them. The writer lingers ``flush_interval`` seconds
(default :data:`FLUSH_INTERVAL`) before each commit so that one transaction carries the rows of
many calls: DuckDB's cost is per statement (about 1.6 ms CPU for one ``serve_calls`` insert,
whatever its row count, plus the commit's fsync), so all call rows of a batch go in as one
columnar statement and all new prefixes as another. The durability trade-off: a crash loses at
most the last ``flush_interval`` of call rows and prefix-index rows (a lost prefix row costs only
a prefix match, never a ledger event); a batch is one transaction, so nothing is half-written. A
batch the database refuses (one bad row fails the whole statement) is written again row by row, each
row alone, so only the bad row is lost: a refused call row is stored with its text made storable,
outcome ``store_refused`` and the database's error (:attr:`ServeStore.refused` lists what was refused).
The conversation ledger itself is the session service's: a turn is committed while its request is
upstream, in group commits that gather every conversation's events for ``ServeConfig.ledger_linger``
(one statement for all; a new conversation's session row goes in with its first events); an error
answer waits for that commit, and with ``wait_for_ledger`` every answer does.
:meth:`ServeStore.flush` commits now and waits (the server does on settle and close).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import duckdb

import agentlab.serve.conversation_keys as conversation_keys
from agentlab.duckdb_files import DuckDBService, transaction
from agentlab.serve.recovery import reconcile

_T = TypeVar("_T")
log = logging.getLogger(__name__)

#: ``serve_calls`` columns and their SQL types, in order.
CALL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("call_id", "VARCHAR"), ("started_at", "DOUBLE"), ("tenant", "VARCHAR"), ("conversation_id", "VARCHAR"),
    ("session_id", "VARCHAR"), ("key_source", "VARCHAR"), ("arm", "VARCHAR"), ("model", "VARCHAR"),
    # "answer": the client's call; "summary": a call the arm's background summariser made upstream;
    # "projection": a call a mechanism made while projecting (a peer policy's summariser).
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
    # On a branch: the new session's ledger events covered by a summary carried from the previous
    # session (agentlab.serve.carry); 0 when none could be carried. Added after the others (an
    # older file gets it, NULL in its old rows, when opened).
    ("summary_reused_events", "INTEGER"),
    # Why the arm did less than it could on this call (a summary that waits until it can pay for
    # itself: agentlab.serve.budget); NULL when it did all it could.
    ("arm_note", "VARCHAR"),
)

#: ``serve_exchanges`` columns: a tool the arm added (recall) that the server ran within a call, its
#: arguments and the result that went upstream (never to the client, nor into the ledger).
EXCHANGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("call_id", "VARCHAR"), ("started_at", "DOUBLE"), ("tenant", "VARCHAR"), ("conversation_id", "VARCHAR"),
    ("session_id", "VARCHAR"), ("arm", "VARCHAR"), ("round", "INTEGER"), ("tool_call_id", "VARCHAR"),
    ("tool", "VARCHAR"), ("arguments", "VARCHAR"), ("result", "VARCHAR"), ("result_tokens", "INTEGER"),
    ("latency_ms", "DOUBLE"), ("error", "VARCHAR"),
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
    "CREATE TABLE IF NOT EXISTS serve_exchanges (" + ", ".join(f"{n} {t}" for n, t in EXCHANGE_COLUMNS) + ")",
)


# A batch of call rows goes in as one list per column (one statement for any number of rows).
# Columns are named, so a column added to an older file (at its end: see ServeStore) takes its values.
_INSERT_CALLS = (f"INSERT INTO serve_calls ({', '.join(n for n, _ in CALL_COLUMNS)}) SELECT "
                 + ", ".join(f"unnest(?::{t}[])" for _, t in CALL_COLUMNS))
_INSERT_EXCHANGES = "INSERT INTO serve_exchanges SELECT " + ", ".join(
    f"unnest(?::{t}[])" for _, t in EXCHANGE_COLUMNS)
_INSERT_PREFIXES = ("INSERT INTO serve_prefixes SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
                    "unnest(?::VARCHAR[]), unnest(?::INTEGER[]) ON CONFLICT DO NOTHING")
#: Conversations whose state the proxy keeps in memory at most (least recently used idle ones evicted).
MAX_CONVERSATIONS = 1024
#: Seconds the background writer waits to gather more rows into one commit (see the module docstring).
FLUSH_INTERVAL = 0.5


# A batch of conversations goes in as one statement too (one row per conversation: see save_conversation).
_UPSERT_CONVERSATIONS = ("INSERT INTO serve_conversations SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
                         "unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::DOUBLE[]) "
                         "ON CONFLICT (tenant, conversation_id) DO UPDATE SET session_id = excluded.session_id")


_CALL_INDEX = {name: i for i, (name, _) in enumerate(CALL_COLUMNS)}


def _columns(rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """Rows as one list per column (the parameters of the ``unnest`` statements above)."""
    return [list(column) for column in zip(*rows, strict=True)]


def _storable(value: Any) -> Any:
    r"""``value`` with a string's lone surrogates escaped (``\udc80``), so the database takes it."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _write_batch(con: duckdb.DuckDBPyConnection, batch: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> None:
    """Every statement of ``batch`` in one transaction (all or nothing)."""
    with transaction(con):
        for sql, rows in batch:
            con.execute(sql, _columns(rows))


#: Default niceness of the serve's writer thread (see :func:`background_writer`).
WRITER_NICE = 10


def background_writer(nice: int = WRITER_NICE) -> ThreadPoolExecutor:
    """One thread for the server's commits, at niceness ``nice`` (Linux; never above the process's own
    priority; elsewhere at normal priority).

    Nothing waits on these commits (an answer does not wait for its ledger commit, call rows are
    batched), but they are a large share of the server's CPU. On a machine whose cores the client and the
    upstream share with the server, a normal-priority writer delays the requests in flight; a
    lower-priority one runs in what the cores have spare. Reads stay at normal priority (they are
    on a request's path). ``nice=0`` leaves the priority alone.
    """
    if not 0 <= nice <= 19:
        raise ValueError(f"the writer's niceness must be between 0 and 19, got {nice}")

    def lower_priority() -> None:
        if nice and sys.platform.startswith("linux"):  # per thread on Linux only
            with contextlib.suppress(OSError):
                thread = threading.get_native_id()
                if os.getpriority(os.PRIO_PROCESS, thread) < nice:  # only ever lower it
                    os.setpriority(os.PRIO_PROCESS, thread, nice)

    return ThreadPoolExecutor(1, thread_name_prefix="agentlab-writer", initializer=lower_priority)


class KeyFilter:
    """A Bloom filter of strings: ``key in f`` is False only for keys never added (fixed memory).

    The default 2**23 bits (1 MiB) with 4 probes keeps false positives near 2 % at a million keys;
    a false positive costs one database query, never a wrong answer.
    """

    def __init__(self, bits: int = 1 << 23, probes: int = 4) -> None:
        self.bits = bits
        self.probes = probes
        self._array = bytearray(bits // 8)

    def _positions(self, key: str) -> list[int]:
        digest = hashlib.blake2b(key.encode(), digest_size=4 * self.probes).digest()
        return [int.from_bytes(digest[4 * i:4 * i + 4], "little") % self.bits for i in range(self.probes)]

    def add(self, key: str) -> None:
        """Remember ``key``."""
        for p in self._positions(key):
            self._array[p >> 3] |= 1 << (p & 7)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and all(self._array[p >> 3] >> (p & 7) & 1 for p in self._positions(key))


def _conversation_key(tenant: str, conversation_id: str) -> str:
    return f"c\x00{tenant}\x00{conversation_id}"


def _prefix_key(tenant: str, chain_hash: str) -> str:
    return f"p\x00{tenant}\x00{chain_hash}"


#: DuckDB worker threads of the proxy's file. Its statements are small inserts and indexed
#: lookups, which gain nothing from parallel workers; a second worker thread was woken at every
#: commit and spent CPU there.
DUCKDB_THREADS = 1


def duckdb_config(fsync: bool) -> dict[str, str | bool | int | float | list[str]]:
    """The connection config the session service uses too (DuckDB refuses a second connection to
    one file with another config, so both sides must agree: the server passes the same
    ``threads`` to :class:`~agentlab.session.duckdb.DuckDBSessionService`).
    """
    return {"fsync_mode": "STANDARD" if fsync else "NONE", "threads": DUCKDB_THREADS}


class ServeStore(DuckDBService):
    """Conversations, the prefix index and the call log, on one connection guarded by a lock.

    The connection's lifecycle is :class:`~agentlab.duckdb_files.DuckDBService`'s, except that the
    file is opened by the constructor: a server fails at start-up, not on its first request, when
    the file is held by another process, and the filter of what is on disk is read before any lookup.
    Close it (:meth:`close`, or :meth:`close_sync` without an event loop) after :meth:`flush`, or
    queued writes are lost. A closed store reopens the file on its next call, with the index it
    had: what another process wrote while it was closed is not in :attr:`on_disk`.
    """

    what = "the serve database"
    # A file written before a column existed gets it (NULL in old rows).
    schema = (*_SCHEMA, *(f"ALTER TABLE serve_calls ADD COLUMN IF NOT EXISTS {name} {sql_type}"
                          for name, sql_type in CALL_COLUMNS))

    def __init__(self, path: str | Path, *, fsync: bool = True, flush_interval: float = FLUSH_INTERVAL,
                 write_executor: Executor | None = None) -> None:
        if flush_interval < 0:
            raise ValueError(f"flush_interval must be >= 0 seconds, got {flush_interval}")
        super().__init__(path)
        self.fsync = fsync
        self.flush_interval = flush_interval
        #: Where the background writer's commits run (default: asyncio's default executor).
        self.write_executor = write_executor
        self._calls: list[list[Any]] = []
        self._exchanges: list[list[Any]] = []
        self._prefix_rows: list[tuple[str, str, str, int]] = []
        #: (tenant, conversation id) -> its serve_conversations row, queued (the latest session wins).
        self._conversation_rows: dict[tuple[str, str], list[Any]] = {}
        #: The conversation and prefix rows of the transaction being written (still visible to
        #: lookups: a read may take the connection before the writer does).
        self._writing_conversations: dict[tuple[str, str], list[Any]] = {}
        self._writing_prefixes: list[tuple[str, str, str, int]] = []
        self._writer: asyncio.Future[None] | None = None
        self._now: asyncio.Event | None = None
        #: The last error of a background write (the writer logs it and carries on).
        self.last_error: Exception | None = None
        #: (table, error) of the latest rows the database refused (a batch that fails is written
        #: again row by row, so only its bad rows are lost; a call row is kept with its error).
        self.refused: list[tuple[str, str]] = []
        #: (tenant, chain hash) -> live conversation ids whose ledger has that prefix.
        self.prefixes: dict[tuple[str, str], set[str]] = {}
        #: (tenant, conversation id) -> chain hashes already in ``serve_prefixes``.
        self._written: dict[tuple[str, str], set[str]] = {}
        #: (tenant, conversation id) -> every chain hash indexed in memory for it.
        self._noted: dict[tuple[str, str], set[str]] = {}
        #: (tenant, live conversation id) -> current session id.
        self.conversations: dict[tuple[str, str], str] = {}
        #: Conversations and prefixes that are only on disk (stored before this start, or evicted).
        self.on_disk = KeyFilter()
        #: (conversation rows, prefix rows) rebuilt from the ledger at open (after an unclean stop;
        #: see :mod:`agentlab.serve.recovery`).
        self.recovered = self._locked(reconcile)  # opens the file now (see the class docstring)
        self._locked(self._read_on_disk)

    def _read_on_disk(self, con: duckdb.DuckDBPyConnection) -> None:
        for sql, key_of in (("SELECT tenant, conversation_id FROM serve_conversations", _conversation_key),
                            ("SELECT DISTINCT tenant, chain_hash FROM serve_prefixes", _prefix_key)):
            cursor = con.execute(sql)
            while rows := cursor.fetchmany(10_000):
                for tenant, name in rows:
                    self.on_disk.add(key_of(tenant, name))

    def _config(self) -> dict[str, str | bool | int | float | list[str]]:
        return duckdb_config(self.fsync)

    async def run(self, work: Callable[[duckdb.DuckDBPyConnection], _T], executor: Executor | None = None) -> _T:
        """Run ``work(connection)`` in a worker thread (of ``executor``, else asyncio's default), under the lock."""
        return await self._run(work, executor)

    def _wake(self) -> None:
        if self._writer is None or self._writer.done():
            self._now = asyncio.Event()
            self._writer = asyncio.ensure_future(self._drain())

    def _take(self) -> list[tuple[str, list[Sequence[Any]]]]:
        """Everything queued, as the statements of one transaction (each with its rows)."""
        batch: list[tuple[str, list[Sequence[Any]]]] = []
        if self._conversation_rows:
            conversations, self._conversation_rows = self._conversation_rows, {}
            self._writing_conversations = conversations
            batch.append((_UPSERT_CONVERSATIONS, list(conversations.values())))
        if self._prefix_rows:
            rows = list(dict.fromkeys(self._prefix_rows))  # a statement must not carry a key twice
            self._prefix_rows, self._writing_prefixes = [], rows
            batch.append((_INSERT_PREFIXES, list(rows)))
        if self._exchanges:
            exchanges, self._exchanges = self._exchanges, []
            batch.append((_INSERT_EXCHANGES, list(exchanges)))
        if self._calls:
            calls, self._calls = self._calls, []
            batch.append((_INSERT_CALLS, list(calls)))
        return batch

    async def _drain(self) -> None:
        assert self._now is not None
        while self.pending:
            if self.flush_interval and not self._now.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._now.wait(), self.flush_interval)
            batch = self._take()
            try:
                await self.run(functools.partial(_write_batch, batch=batch), self.write_executor)
            except Exception as exc:  # one bad row must not take the others with it: retried row by row
                self.last_error = exc
                try:
                    await self.run(functools.partial(self._write_rows_alone, batch=batch), self.write_executor)
                except Exception as again:  # the file itself failed: logged by the caller's flush
                    self.last_error = again
            finally:
                self._writing_prefixes, self._writing_conversations = [], {}

    def _write_rows_alone(self, con: duckdb.DuckDBPyConnection, batch: list[tuple[str, list[Sequence[Any]]]]) -> None:
        """After a batch failed: each row in a transaction of its own, so only a bad row is refused.

        A refused call row is stored again with its text made storable (a lone surrogate escaped)
        and its ``outcome`` ``store_refused`` with the store's error; any other refused row is
        logged and kept in :attr:`refused`.
        """
        for sql, rows in batch:
            for row in rows:
                try:
                    con.execute(sql, _columns([row]))
                except duckdb.Error as exc:
                    if sql is _INSERT_CALLS:
                        error = f"the store refused this call row: {type(exc).__name__}: {exc}"
                        fixed = [_storable(v) for v in row]
                        fixed[_CALL_INDEX["outcome"]] = "store_refused"
                        fixed[_CALL_INDEX["error"]] = _storable(error)
                        with contextlib.suppress(duckdb.Error):
                            con.execute(sql, _columns([fixed]))
                    table = sql.split()[2]
                    log.error("%s refused a row: %s: %s", table, type(exc).__name__, exc)
                    self.refused.append((table, f"{type(exc).__name__}: {exc}"))
                    del self.refused[:-100]

    @property
    def pending(self) -> int:
        """Rows and statements queued and not yet committed."""
        return (len(self._calls) + len(self._exchanges) + len(self._prefix_rows)
                + len(self._conversation_rows))

    async def flush(self) -> None:
        """Commit every queued write now and wait until it is committed."""
        while self._writer is not None and not self._writer.done():
            if self._now is not None:
                self._now.set()
            await asyncio.shield(self._writer)

    def query(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """A pandas frame of ``sql`` on this connection (for in-process readers: notebooks, tests)."""
        return self._locked(lambda con: con.execute(sql, list(params)).df())

    # ------------------------------------------------------------------ conversations

    def save_conversation(self, tenant: str, conversation_id: str, session_id: str, key_source: str) -> None:
        """Insert or move a conversation to ``session_id`` (a branch moves it)."""
        key = (tenant, conversation_id)
        self.conversations[key] = session_id
        queued = self._conversation_rows.get(key)
        if queued is not None:  # one statement may not upsert a row twice: the first row, the latest session
            queued[2] = session_id
        else:
            self._conversation_rows[key] = [tenant, conversation_id, session_id, key_source, time.time()]
        self._wake()

    async def session_of(self, tenant: str, conversation_id: str) -> str | None:
        """The current session of a conversation: from memory, else (when it may be on disk only)
        from the queued writes or the database; ``None`` for a conversation never stored.
        """
        session_id = self.conversations.get((tenant, conversation_id))
        if session_id is not None or _conversation_key(tenant, conversation_id) not in self.on_disk:
            return session_id
        for queued in (self._conversation_rows, self._writing_conversations):
            if (tenant, conversation_id) in queued:
                return str(queued[(tenant, conversation_id)][2])
        row = await self.run(lambda con: con.execute(
            "SELECT session_id FROM serve_conversations WHERE tenant = ? AND conversation_id = ?",
            [tenant, conversation_id]).fetchone())
        return None if row is None else str(row[0])

    def remember(self, tenant: str, conversation_id: str, session_id: str, chain: Sequence[str]) -> None:
        """Make a stored conversation live again: its session and its ledger's (durable) prefixes in memory."""
        key = (tenant, conversation_id)
        self.conversations[key] = session_id
        self.note_prefixes(tenant, conversation_id, chain)
        self._written.setdefault(key, set()).update(chain)

    def forget(self, tenant: str, conversation_id: str) -> None:
        """Drop a conversation's in-memory index (it stays findable on disk: :meth:`session_of`,
        :meth:`match_prefix`).
        """
        key = (tenant, conversation_id)
        self.conversations.pop(key, None)
        self.on_disk.add(_conversation_key(tenant, conversation_id))
        for h in self._noted.pop(key, set()) | self._written.pop(key, set()):
            self.on_disk.add(_prefix_key(tenant, h))
            holders = self.prefixes.get((tenant, h))
            if holders is not None:
                holders.discard(conversation_id)
                if not holders:
                    del self.prefixes[(tenant, h)]

    async def match_prefix(self, tenant: str, chain: Sequence[str], minimum: int) -> conversation_keys.PrefixMatch:
        """:func:`agentlab.serve.conversation_keys.match_prefix` over the whole index: the live conversations in
        memory, and the ones on disk only when the filter says some prefix of ``chain`` may be there.
        """
        found = conversation_keys.match_prefix(self.prefixes, tenant, chain, minimum)
        start = max(found.length, minimum, 1) - 1
        maybe = [h for h in chain[start:] if _prefix_key(tenant, h) in self.on_disk]
        if not maybe:
            return found
        wanted = set(maybe)
        rows = [(h, c) for t, h, c, _ in (*self._writing_prefixes, *self._prefix_rows) if t == tenant and h in wanted]
        rows += await self.run(lambda con: con.execute(
            "SELECT chain_hash, conversation_id FROM serve_prefixes WHERE tenant = ? AND chain_hash IN "
            "(SELECT unnest(?::VARCHAR[]))", [tenant, maybe]).fetchall())
        index = {(tenant, h): set(self.prefixes.get((tenant, h), ())) for h in chain[start:]}
        for h, c in rows:
            index[(tenant, h)].add(c)
        return conversation_keys.match_prefix(index, tenant, chain, minimum)

    def note_prefixes(self, tenant: str, conversation_id: str, chain: Sequence[str]) -> None:
        """Index ``chain``'s prefixes in memory now (:meth:`index_prefixes` makes them durable)."""
        self._noted.setdefault((tenant, conversation_id), set()).update(chain)
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

        self._prefix_rows.extend((tenant, h, conversation_id, n) for h, n in new)
        self._wake()

    # ------------------------------------------------------------------ calls

    def record_call(self, row: dict[str, Any], exchanges: Sequence[dict[str, Any]] = ()) -> None:
        """Queue one call row (missing columns are NULL) with the tool exchanges the server ran in
        it: all in the same commit.
        """
        self._exchanges.extend([x.get(name) for name, _ in EXCHANGE_COLUMNS] for x in exchanges)
        self._calls.append([row.get(name) for name, _ in CALL_COLUMNS])
        self._wake()
