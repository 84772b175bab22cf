"""Embeddings cached by content in a DuckDB file, so a text is sent to a model once per machine.

:class:`CachedEmbedder` wraps any :class:`~agentlab.recall.embed.Embedder`. A vector is keyed by
the embedder's ``name``, the side it was embedded as (``document`` or ``query``: e5 encodes them
differently) and the sha256 of the text, so a changed text or a different model never reuses a
vector. A miss is embedded by the inner model and stored together with how long it took per text
(``embed_ms``), so a replayed query can still report what its embedding cost when it was made.

The default file is ``$AGENTLAB_EMBED_CACHE_DB`` or ``results/embed_cache.duckdb``;
``EmbeddingCache(None)`` keeps the cache in memory (tests).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from agentlab.duckdb_files import DuckDBService
from agentlab.recall.embed import Embedder, embed_query

__all__ = ["EMBED_CACHE_ENV", "CachedEmbedder", "EmbeddingCache", "default_embed_cache_path", "text_key"]

EMBED_CACHE_ENV = "AGENTLAB_EMBED_CACHE_DB"
DEFAULT_EMBED_CACHE_PATH = Path("results") / "embed_cache.duckdb"
Side = Literal["document", "query"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embedding_cache (
    embedder VARCHAR NOT NULL,
    side VARCHAR NOT NULL,          -- document | query
    text_sha256 VARCHAR NOT NULL,
    vector FLOAT[] NOT NULL,
    embed_ms DOUBLE,                -- model time per text when it was embedded
    created DOUBLE,
    PRIMARY KEY (embedder, side, text_sha256)
)
"""


def default_embed_cache_path() -> Path:
    """``$AGENTLAB_EMBED_CACHE_DB`` if set, else ``results/embed_cache.duckdb`` (relative to the working dir)."""
    return Path(os.environ.get(EMBED_CACHE_ENV) or DEFAULT_EMBED_CACHE_PATH)


def text_key(text: str) -> str:
    """The content key of a text: sha256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _EmbeddingFile(DuckDBService):
    """The embedding cache's DuckDB file (opened, locked and closed by :class:`DuckDBService`)."""

    what = "embedding cache"
    fix = f"set {EMBED_CACHE_ENV} to another file"
    schema = (_SCHEMA,)


class EmbeddingCache:
    """A DuckDB table of vectors keyed by (embedder, side, text sha256); one connection behind a lock.

    The file is opened at once (a file held by another run is a
    :class:`~agentlab.duckdb_files.DatabaseFileError` here, not at the first lookup).
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._file = _EmbeddingFile(self.path if self.path is not None else ":memory:")
        with self._file.lock:
            self._file.connection()

    def close(self) -> None:
        """Close the file (DuckDB releases its lock for other processes)."""
        self._file.close_sync()

    def get(self, embedder: str, side: Side, keys: Sequence[str]) -> dict[str, tuple[np.ndarray, float | None]]:
        """Stored (vector, embed_ms) of each key that is in the cache."""
        if not keys:
            return {}
        with self._file.lock:
            con = self._file.connection()
            con.execute("CREATE OR REPLACE TEMP TABLE _wanted (k VARCHAR)")
            con.executemany("INSERT INTO _wanted VALUES (?)", [(k,) for k in set(keys)])
            rows = con.execute(
                "SELECT c.text_sha256, c.vector, c.embed_ms FROM embedding_cache c JOIN _wanted w "
                "ON c.text_sha256 = w.k WHERE c.embedder = ? AND c.side = ?", [embedder, side]).fetchall()
        return {key: (np.asarray(vector, dtype=np.float32), ms) for key, vector, ms in rows}

    def put(self, embedder: str, side: Side, items: Sequence[tuple[str, np.ndarray, float | None]]) -> None:
        """Store (key, vector, embed_ms) rows; a key already stored keeps its first vector."""
        if not items:
            return
        now = time.time()
        with self._file.lock:
            self._file.connection().executemany(
                "INSERT OR IGNORE INTO embedding_cache VALUES (?, ?, ?, ?, ?, ?)",
                [(embedder, side, key, [float(x) for x in vector], ms, now) for key, vector, ms in items])

    def count(self, embedder: str | None = None) -> int:
        """Stored vectors (of one embedder when given)."""
        with self._file.lock:
            con = self._file.connection()
            if embedder is None:
                row = con.execute("SELECT count(*) FROM embedding_cache").fetchone()
            else:
                row = con.execute("SELECT count(*) FROM embedding_cache WHERE embedder = ?", [embedder]).fetchone()
        return int(row[0]) if row else 0


class CachedEmbedder:
    """An :class:`Embedder` that asks ``cache`` first and embeds only texts it has never seen.

    ``embedded`` and ``reused`` count texts sent to the model and texts served from the cache;
    :meth:`query_cost_ms` tells what embedding a query cost when it was first embedded.
    Misses are embedded in batches of ``batch_size`` (documents) or one at a time (queries with
    ``queries_one_by_one``: the time per query is then that of a real single search).
    """

    def __init__(self, inner: Embedder, cache: EmbeddingCache, *, batch_size: int = 64,
                 queries_one_by_one: bool = True) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.batch_size = batch_size
        self.queries_one_by_one = queries_one_by_one
        self.embedded = 0
        self.reused = 0
        self.model_seconds = 0.0
        self._query_ms: dict[str, float | None] = {}
        self._replayed_queries: set[str] = set()

    @property
    def dim(self) -> int:
        """The inner embedder's vector length."""
        return self.inner.dim

    def _embed(self, texts: list[str], side: Side) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.inner.dim), dtype=np.float32)
        keys = [text_key(t) for t in texts]
        found = self.cache.get(self.name, side, keys)
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            text_of = dict(zip(keys, texts, strict=True))
            step = 1 if side == "query" and self.queries_one_by_one else self.batch_size
            rows: list[tuple[str, np.ndarray, float | None]] = []
            for start in range(0, len(missing), step):
                batch = missing[start:start + step]
                began = time.perf_counter()
                batch_texts = [text_of[k] for k in batch]
                vectors = embed_query(self.inner, batch_texts) if side == "query" else self.inner.embed(batch_texts)
                spent = time.perf_counter() - began
                self.model_seconds += spent
                per_text_ms = spent * 1000.0 / len(batch)
                rows.extend((k, np.asarray(v, dtype=np.float32), per_text_ms) for k, v in zip(batch, vectors, strict=True))
            self.cache.put(self.name, side, rows)
            found.update({k: (v, ms) for k, v, ms in rows})
            self.embedded += len(missing)
        self.reused += len(keys) - len(missing)
        if side == "query":
            self._query_ms.update({k: found[k][1] for k in keys})
            self._replayed_queries.update(k for k in keys if k not in missing)
            self._replayed_queries.difference_update(missing)
        return np.stack([found[k][0] for k in keys]).astype(np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Document vectors, from the cache where stored."""
        return self._embed(list(texts), "document")

    def embed_query(self, texts: list[str]) -> np.ndarray:
        """Query vectors, from the cache where stored."""
        return self._embed(list(texts), "query")

    def query_cost_ms(self, text: str) -> float | None:
        """Model milliseconds the query's vector cost when it was embedded (None if never asked here)."""
        return self._query_ms.get(text_key(text))

    def replayed_query_cost_ms(self, text: str) -> float | None:
        """:meth:`query_cost_ms` if the query's last vector came from the cache, else None.

        A vector embedded by this call already spent its model time inside whatever timed the call.
        """
        key = text_key(text)
        return self._query_ms.get(key) if key in self._replayed_queries else None
