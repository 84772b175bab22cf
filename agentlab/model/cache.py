"""Record and replay of model calls in DuckDB, so reruns cost nothing and notebooks/CI are deterministic.

A call is identified by :meth:`ModelRequest.cache_key` with the model's name: a sha256 of the
normalised request (model, messages without ids, tools, generation parameters, sample index).
Transport settings (base URL, timeout, retries) and the call's purpose are not part of it.

:class:`CachedModel` wraps any :class:`~agentlab.model.base.Model`. A hit returns the stored
response with ``cache_hit=True`` and the *original* usage (so token accounting of a replayed run
matches the recorded one); a miss calls the inner model, stores the answer and returns it. Errors
are never stored. Either way exactly one :class:`~agentlab.model.base.CallRecord` is reported.

The default database is ``$AGENTLAB_CACHE_DB`` or ``results/cache.duckdb``; ``CallCache(None)``
keeps the cache in memory.

Caches travel between processes as rows (:meth:`CallCache.entries`, :meth:`CallCache.merge`): a
remote worker of a distributed run keeps its own in-memory cache, sends the rows of the calls it
made back with each case, and the driver merges them into its file, so a replay anywhere is free.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.duckdb_files import DuckDBService
from agentlab.events import Message, Usage
from agentlab.model.base import (
    CallRecord,
    Model,
    ModelChunk,
    ModelInfo,
    ModelRequest,
    ModelResponse,
    blob_key,
    model_name,
    report_call,
    suppress_reports,
)

if TYPE_CHECKING:
    import duckdb

DEFAULT_CACHE_PATH = Path("results") / "cache.duckdb"
CACHE_PATH_ENV = "AGENTLAB_CACHE_DB"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS call_cache (
    cache_key VARCHAR PRIMARY KEY,
    model VARCHAR NOT NULL,
    purpose VARCHAR,
    sample_index INTEGER,
    request_json VARCHAR,
    message_json VARCHAR NOT NULL,
    prompt_tokens BIGINT,
    completion_tokens BIGINT,
    cached_tokens BIGINT,
    finish_reason VARCHAR,
    latency_ms DOUBLE,
    created DOUBLE
)
"""


#: Column order of the rows :meth:`CallCache.entries` returns and :meth:`CallCache.merge` takes.
ENTRY_COLUMNS = ("cache_key", "model", "purpose", "sample_index", "request_json", "message_json", "prompt_tokens",
                 "completion_tokens", "cached_tokens", "finish_reason", "latency_ms", "created")
#: One stored call as plain values (picklable, in :data:`ENTRY_COLUMNS` order).
CacheEntry = tuple


#: Stored answers wait in memory until this many are pending, then go to the file in one statement.
FLUSH_ROWS = 256
#: Rows per INSERT statement when pending answers are written.
_INSERT_CHUNK = 64
#: Up to this many stored answers, the cache holds their keys in memory, so a miss (every call of
#: a new run) costs a set lookup instead of a DuckDB query (about a millisecond of the event loop).
KEY_SET_LIMIT = 250_000

_OPEN_CACHES: weakref.WeakSet[CallCache] = weakref.WeakSet()
#: The key sets of the cache files open in this process, shared by every CallCache of one file
#: (so what one stores another finds); None: the file holds more than KEY_SET_LIMIT answers.
_KEY_SETS: dict[str, set[str] | None] = {}


@atexit.register
def _flush_open_caches() -> None:
    """Write what every cache still holds in memory when the interpreter exits (best effort)."""
    for cache in list(_OPEN_CACHES):
        try:
            cache.flush()
        except Exception:  # a closed or broken file at exit: nothing left to do
            pass


def close_open_caches() -> None:
    """Write out and close every call cache open in this process (each file is left checkpointed)."""
    for cache in list(_OPEN_CACHES):
        cache.close()


def default_cache_path() -> Path:
    """``$AGENTLAB_CACHE_DB`` if set, else ``results/cache.duckdb`` (relative to the working dir)."""
    return Path(os.environ.get(CACHE_PATH_ENV) or DEFAULT_CACHE_PATH)


@dataclass(frozen=True)
class CachedCall:
    """One stored answer."""

    message: Message
    usage: Usage
    model: str
    finish_reason: str | None
    latency_ms: float
    created: float


class _CallCacheFile(DuckDBService):
    """The call cache's DuckDB file (opened, locked and closed by :class:`DuckDBService`)."""

    what = "call cache"
    fix = f"set {CACHE_PATH_ENV} to another file"
    schema = (_SCHEMA,)


class CallCache:
    """A DuckDB table of finished calls keyed by request hash; safe to share across asyncio tasks.

    One connection (a :class:`~agentlab.duckdb_files.DuckDBService`) guarded by its thread lock.
    A stored answer is first kept in memory (``get`` sees it at once) and written with others in one transaction: when :data:`FLUSH_ROWS` are
    pending, on :meth:`flush` (the executor's writer thread flushes before it writes finished
    cases, so a stored case's calls are always in the file), on :meth:`close` and at interpreter
    exit. A flush writes through its own cursor without holding the lock, so lookups on the event
    loop do not wait for the file's commit (an fsync: tens of milliseconds on a busy disk, which
    a commit per answer made every call in flight wait for).
    """

    _shared: dict[str, CallCache] = {}
    _shared_lock = threading.Lock()

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._file = _CallCacheFile(self.path if self.path is not None else ":memory:")
        #: The file's lock (:attr:`DuckDBService.lock`): it guards the connection and the rows in memory.
        self._lock = self._file.lock
        self._closed = False
        #: Answers stored but not yet written: cache key -> row in ENTRY_COLUMNS order.
        self._pending: dict[str, CacheEntry] = {}
        #: Answers a flush is writing right now (still answered from memory until committed).
        self._flushing: dict[str, CacheEntry] = {}
        #: One flush (or merge, or clear) writes at a time, through ``_writer``.
        self._flush_lock = threading.Lock()
        self._writer: duckdb.DuckDBPyConnection | None = None
        #: Where this file's key set is kept: _KEY_SETS, shared by the caches of one file (in memory:
        #: this cache's own).
        self._key_sets: dict[str, set[str] | None] = _KEY_SETS if self.path is not None else {}
        self._keys_slot = str(self.path.resolve()) if self.path is not None else ":memory:"
        with self._lock:
            self._open()  # open now: a file held by another run is an error here, not at the first call
        _OPEN_CACHES.add(self)

    @classmethod
    def default(cls) -> CallCache:
        """The process-wide cache at :func:`default_cache_path` (one connection per file)."""
        path = default_cache_path().resolve()
        with cls._shared_lock:
            cache = cls._shared.get(str(path))
            if cache is None or cache._closed:
                cache = cls(path)
                cls._shared[str(path)] = cache
            return cache

    def _open(self) -> duckdb.DuckDBPyConnection:
        """The connection; a clear error instead of an ``AttributeError`` once :meth:`close` ran."""
        if self._closed:
            raise RuntimeError(f"the call cache at {self.path or ':memory:'} is closed; "
                               "use CallCache.default() or a new CallCache")
        return self._file.connection()

    def __repr__(self) -> str:
        return f"CallCache({str(self.path) if self.path else None!r})"

    def get(self, key: str) -> CachedCall | None:
        """The stored answer for ``key``, or ``None`` on a miss."""
        with self._lock:
            entry = self._pending.get(key) or self._flushing.get(key)
            if entry is not None:
                row: tuple[Any, ...] | None = (entry[5], entry[6], entry[7], entry[8], entry[1], entry[9],
                                                  entry[10], entry[11])
            elif not self._may_hold(key):
                return None
            else:
                row = self._open().execute(
                    "SELECT message_json, prompt_tokens, completion_tokens, cached_tokens, model, "
                    "finish_reason, latency_ms, created FROM call_cache WHERE cache_key = ?",
                    [key],
                ).fetchone()
        if row is None:
            return None
        message_json, prompt, completion, cached, model, finish, latency, created = row
        return CachedCall(
            message=Message.from_dict(json.loads(message_json)),
            usage=Usage(int(prompt or 0), int(completion or 0), int(cached or 0)),
            model=model,
            finish_reason=finish,
            latency_ms=float(latency or 0.0),
            created=float(created or 0.0),
        )

    def _key_set(self) -> set[str] | None:
        """Every key in the file or pending (None: too many to hold); loaded once per file. Lock held."""
        if self._keys_slot not in self._key_sets:
            conn = self._open()
            count = conn.execute("SELECT count(*) FROM call_cache").fetchone()
            keys = None
            if count is not None and int(count[0]) <= KEY_SET_LIMIT:
                keys = {str(r[0]) for r in conn.execute("SELECT cache_key FROM call_cache").fetchall()}
            self._key_sets.setdefault(self._keys_slot, keys)
        return self._key_sets[self._keys_slot]

    def _may_hold(self, key: str) -> bool:
        """Whether the file may hold ``key`` (False is certain). Lock held."""
        keys = self._key_set()
        return keys is None or key in keys

    def _known(self, keys: Iterable[str]) -> None:
        """Record keys now stored (or pending). Lock held."""
        known = self._key_set()
        if known is not None:
            known.update(keys)
            if len(known) > KEY_SET_LIMIT:
                self._key_sets[self._keys_slot] = None

    def put(self, key: str, response: ModelResponse, request: ModelRequest, model_name: str, *,
            request_json: str | None = None) -> None:
        """Store (or replace) the answer for ``key``; ``request_json``: the request's
        :meth:`~agentlab.model.base.ModelRequest.cache_blob` when the caller has it already.
        """
        payload = request_json if request_json is not None else request.cache_blob(model_name)
        row = (key, model_name, request.purpose, request.sample_index, payload,
               json.dumps(response.message.to_dict(), ensure_ascii=False), response.usage.prompt_tokens,
               response.usage.completion_tokens, response.usage.cached_tokens, response.finish_reason,
               response.latency_ms, time.time())
        with self._lock:
            self._open()  # a closed cache refuses now, not at the next flush
            self._pending[key] = row
            self._known((key,))
            full = len(self._pending) >= FLUSH_ROWS
        if full:
            self.flush()

    def flush(self) -> int:
        """Write the answers kept in memory to the file (one transaction); returns how many.

        Safe from any thread; the lock is held only to take the rows, not while they are written.
        """
        with self._flush_lock:
            return self._flush_now()

    def _flush_now(self) -> int:
        with self._lock:
            if not self._pending:
                return 0
            batch, self._pending, self._flushing = self._pending, {}, self._pending
            if self._writer is None:
                self._writer = self._open().cursor()
            writer = self._writer
        rows = list(batch.values())
        placeholders = "(" + ", ".join("?" for _ in ENTRY_COLUMNS) + ")"
        try:
            writer.execute("BEGIN TRANSACTION")
            try:
                for i in range(0, len(rows), _INSERT_CHUNK):
                    chunk = rows[i:i + _INSERT_CHUNK]
                    writer.execute("INSERT OR REPLACE INTO call_cache VALUES "
                                   + ", ".join([placeholders] * len(chunk)), [value for r in chunk for value in r])
                writer.execute("COMMIT")
            except BaseException:
                writer.execute("ROLLBACK")
                raise
        except BaseException:
            with self._lock:  # not written: kept for the next flush (newer answers win)
                self._pending = {**batch, **self._pending}
            raise
        finally:
            with self._lock:
                self._flushing = {}
        return len(rows)

    def entries(self, keys: Iterable[str] | None = None, *, models: Iterable[str] | None = None,
                with_requests: bool = True) -> list[CacheEntry]:
        """Stored rows for ``keys`` (all when None), optionally only of ``models``.

        ``with_requests=False`` leaves out the request JSON (the bulk of a row): enough to answer
        from, which is all a worker seeded with the driver's cache needs.
        """
        request_col = "request_json" if with_requests else "NULL"
        columns = ", ".join(request_col if c == "request_json" else c for c in ENTRY_COLUMNS)
        where, params = [], []
        if keys is not None:
            key_list = sorted(set(keys))
            if not key_list:
                return []
            where.append("cache_key IN (SELECT unnest(?::VARCHAR[]))")
            params.append(key_list)
        if models is not None:
            where.append("model IN (SELECT unnest(?::VARCHAR[]))")
            params.append(sorted(set(models)))
        sql = f"SELECT {columns} FROM call_cache" + (" WHERE " + " AND ".join(where) if where else "")
        self.flush()
        with self._lock:
            return [tuple(row) for row in self._open().execute(sql, params).fetchall()]

    def merge(self, entries: Iterable[CacheEntry]) -> int:
        """Add rows from another cache; a key already stored keeps its answer. Returns rows offered."""
        rows = [list(e) for e in entries]
        if not rows:
            return 0
        placeholders = ", ".join("?" for _ in ENTRY_COLUMNS)
        with self._flush_lock:
            self._flush_now()
            with self._lock:
                self._open().executemany(f"INSERT OR IGNORE INTO call_cache VALUES ({placeholders})", rows)
                self._known(str(r[0]) for r in rows)
        return len(rows)

    def __len__(self) -> int:
        self.flush()
        with self._lock:
            row = self._open().execute("SELECT count(*) FROM call_cache").fetchone()
        return int(row[0]) if row else 0

    def clear(self) -> None:
        """Forget every stored call (the file stays); later calls go to the model again."""
        with self._flush_lock, self._lock:
            self._pending.clear()
            self._open().execute("DELETE FROM call_cache")
            self._key_sets[self._keys_slot] = set()

    def close(self) -> None:
        """Close the file and drop this cache from the process-wide registry; :meth:`default` then opens a
        fresh one.
        """
        with self._flush_lock:
            try:
                if not self._closed:
                    self._flush_now()
            finally:
                with self._lock:
                    if self._writer is not None:
                        self._writer.close()
                        self._writer = None
                    self._closed = True
                self._file.close_sync()
        _OPEN_CACHES.discard(self)
        if all(c._key_sets is not self._key_sets or c._keys_slot != self._keys_slot for c in _OPEN_CACHES):
            self._key_sets.pop(self._keys_slot, None)  # the next opening reads the file again
        with CallCache._shared_lock:
            for path, cache in list(CallCache._shared.items()):
                if cache is self:
                    del CallCache._shared[path]


class CachedModel:
    """A :class:`Model` that answers from a :class:`CallCache` when it can and records misses."""

    def __init__(self, inner: Model, cache: CallCache) -> None:
        self.inner = inner
        self.cache = cache

    def __repr__(self) -> str:
        return f"CachedModel({self.inner!r}, {self.cache!r})"

    @property
    def info(self) -> ModelInfo:
        # Read through: a backend may learn its real window on first use (the embedded server).
        """The inner model's info, read through on every access: a backend may learn its real window only
        on first use.
        """
        return self.inner.info

    @property
    def model_name(self) -> str:
        """The inner model's name without resolving its window (the cache key needs only the name)."""
        return model_name(self.inner)

    def resolve_info(self) -> ModelInfo:
        """The inner model's info, its window resolved (see ``OpenAICompatModel.resolve_info``)."""
        resolve = getattr(self.inner, "resolve_info", None)
        return resolve() if resolve is not None else self.inner.info

    def server_problem(self) -> str | None:
        """What would stop every call to the inner model's server (``None``: it answers, or has none)."""
        check = getattr(self.inner, "server_problem", None)
        return check() if check is not None else None

    def _key(self, request: ModelRequest) -> tuple[str, str]:
        """The request's cache key and the JSON text it hashes (stored with the answer: encoded once)."""
        blob = request.cache_blob(self.model_name)
        return blob_key(blob), blob

    def _hit(self, request: ModelRequest, key: str, started: float) -> ModelResponse | None:
        stored = self.cache.get(key)
        if stored is None:
            return None
        latency = (time.perf_counter() - started) * 1000
        report_call(CallRecord(model=self.model_name, purpose=request.purpose, usage=stored.usage,
                               latency_ms=latency, cache_hit=True, cache_key=key, attempts=0))
        return ModelResponse(message=stored.message, usage=stored.usage, model=stored.model,
                             finish_reason=stored.finish_reason, cache_hit=True, latency_ms=latency, attempts=0)

    def _record(self, request: ModelRequest, key: str, response: ModelResponse, blob: str | None = None) -> None:
        self.cache.put(key, response, request, self.model_name, request_json=blob)
        report_call(CallRecord(model=self.model_name, purpose=request.purpose, usage=response.usage,
                               latency_ms=response.latency_ms, cache_hit=False, cache_key=key,
                               attempts=response.attempts))

    def _report_error(self, request: ModelRequest, key: str, started: float, exc: BaseException) -> None:
        report_call(CallRecord(model=self.model_name, purpose=request.purpose, usage=Usage(),
                               latency_ms=(time.perf_counter() - started) * 1000, cache_hit=False,
                               cache_key=key, error=f"{type(exc).__name__}: {exc}",
                               attempts=getattr(exc, "attempts", 1)))

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The cached response when this exact request was answered before, else the inner model's (stored
        for next time; failures are not stored).
        """
        started = time.perf_counter()
        key, blob = self._key(request)
        hit = self._hit(request, key, started)
        if hit is not None:
            return hit
        try:
            with suppress_reports():
                response = await self.inner.generate(request)
        except Exception as exc:
            self._report_error(request, key, started, exc)
            raise
        self._record(request, key, response, blob)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """Like :meth:`generate`, streamed: a cache hit replays as one chunk, a miss streams from the inner
        model and is stored once complete.
        """
        started = time.perf_counter()
        key, blob = self._key(request)
        hit = self._hit(request, key, started)
        if hit is not None:
            # A replay has nothing to wait for: the whole text and the response in one chunk.
            yield ModelChunk(delta=hit.message.content, response=hit)
            return
        chunks = self.inner.stream(request)
        response: ModelResponse | None = None
        try:
            while True:
                # Suppress only while the inner stream runs, never across our own yields, so the
                # consumer's other model calls between chunks are still reported.
                try:
                    with suppress_reports():
                        chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    self._report_error(request, key, started, exc)
                    raise
                if chunk.response is not None:
                    response = chunk.response
                    self._record(request, key, response, blob)
                yield chunk
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
