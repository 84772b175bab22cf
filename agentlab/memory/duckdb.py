"""The DuckDB memory backend: memories of every (app, user) in one table of one file.

Table (created on first use)::

    memories (app_name, user_id, memory_id) PK, kind, text, source_session_id, superseded_by,
             created_at, updated_at, memory_json (the whole Memory as JSON text)

The columns are for filtering and inspection in SQL; ``memory_json`` is what is read back, so a
memory round-trips exactly (history, topics, participants included).

Search indexes are built in this process from the table on the first search of a user and then
kept current by this service object's own writes. Two processes writing one file is not
supported (DuckDB allows only one writer per file anyway). Every database call runs in a worker
thread on one connection guarded by a lock; a read-modify-write (``update``) holds the lock for
its whole duration, so it is atomic with respect to this service.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from agentlab.duckdb_files import DuckDBService
from agentlab.memory.service import (
    Memory,
    MemoryHit,
    UserIndexes,
    apply_changes,
    build_memory,
    check_kind,
    next_timestamp,
    resolve_embedder,
)

if TYPE_CHECKING:
    from agentlab.recall.embed import Embedder

_Connection = duckdb.DuckDBPyConnection

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    app_name          VARCHAR NOT NULL,
    user_id           VARCHAR NOT NULL,
    memory_id         VARCHAR NOT NULL,
    kind              VARCHAR NOT NULL,
    text              VARCHAR NOT NULL,
    source_session_id VARCHAR,
    superseded_by     VARCHAR,
    created_at        DOUBLE  NOT NULL,
    updated_at        DOUBLE  NOT NULL,
    memory_json       VARCHAR NOT NULL,
    PRIMARY KEY (app_name, user_id, memory_id)
)
"""

_USER = "app_name = ? AND user_id = ?"
_ONE = "app_name = ? AND user_id = ? AND memory_id = ?"


def _row_values(memory: Memory) -> list[Any]:
    return [memory.app_name, memory.user_id, memory.id, memory.kind, memory.text, memory.source_session_id,
            memory.superseded_by, memory.created_at, memory.updated_at,
            json.dumps(memory.to_dict(), ensure_ascii=False)]


class DuckDBMemoryService(DuckDBService):
    """A ``MemoryService`` persisted in one DuckDB file (``":memory:"`` also works).

    Use ``async with DuckDBMemoryService(path) as memories: ...`` or call :meth:`close`, so the
    file is released for other processes. A closed service reopens the file on its next call
    (the connection's lifecycle is :class:`~agentlab.duckdb_files.DuckDBService`'s).
    """

    what = "memory database"
    schema = (_SCHEMA,)

    def __init__(self, path: str | Path, embedder: Embedder | str | None = None) -> None:
        super().__init__(path)
        self._indexes = UserIndexes(resolve_embedder(embedder))
        self._last_write = 0.0

    @property
    def embedder(self) -> Embedder | None:
        """The embedder used for dense and hybrid search, or ``None`` (lexical only)."""
        return self._indexes.embedder

    def ensure_embedder(self, spec: str | None) -> None:
        """Set the embedder from ``spec`` unless one is already configured (a configured one wins)."""
        if self._indexes.embedder is None and spec:
            self._indexes.set_embedder(resolve_embedder(spec))

    # -- writes --------------------------------------------------------------------------------

    def _now(self) -> float:
        self._last_write = next_timestamp(self._last_write)
        return self._last_write

    async def add(self, app_name: str, user_id: str, text: str, *, kind: str = "fact",
                  topics: Sequence[str] = (), event_time: str | None = None,
                  participants: Sequence[str] = (), location: str | None = None,
                  source_session_id: str | None = None, memory_id: str | None = None) -> Memory:
        """Insert a new memory and index it; ``ValueError`` when ``memory_id`` is already taken."""
        memory = build_memory(app_name, user_id, text, kind=kind, topics=topics, event_time=event_time,
                              participants=participants, location=location,
                              source_session_id=source_session_id, memory_id=memory_id, now=self._now())

        def insert(con: _Connection) -> None:
            try:
                con.execute("INSERT INTO memories VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _row_values(memory))
            except duckdb.ConstraintException:
                raise ValueError(
                    f"memory {memory.id!r} already exists for app={app_name!r} user={user_id!r}"
                ) from None

        await self._run(insert)
        self._indexes.put(memory)
        return memory

    async def update(self, app_name: str, user_id: str, memory_id: str, *, text: str | None = None,
                     kind: str | None = None, topics: Sequence[str] | None = None,
                     event_time: str | None = None, participants: Sequence[str] | None = None,
                     location: str | None = None, superseded_by: str | None = None,
                     keep_history: bool = False) -> Memory:
        """Change the given fields in one locked read-modify-write; ``KeyError`` for an unknown id."""
        now = self._now()

        def change(con: _Connection) -> Memory:
            row = con.execute(f"SELECT memory_json FROM memories WHERE {_ONE}",
                              [app_name, user_id, memory_id]).fetchone()
            if row is None:
                raise KeyError(f"no memory {memory_id!r} for app={app_name!r} user={user_id!r}")
            updated = apply_changes(Memory.from_dict(json.loads(row[0])), text=text, kind=kind, topics=topics,
                                    event_time=event_time, participants=participants, location=location,
                                    superseded_by=superseded_by, keep_history=keep_history, now=now)
            con.execute(
                f"UPDATE memories SET kind = ?, text = ?, superseded_by = ?, updated_at = ?, memory_json = ?"
                f" WHERE {_ONE}",
                [updated.kind, updated.text, updated.superseded_by, updated.updated_at,
                 json.dumps(updated.to_dict(), ensure_ascii=False), app_name, user_id, memory_id],
            )
            return updated

        updated = await self._run(change)
        self._indexes.put(updated)
        return updated

    async def delete(self, app_name: str, user_id: str, memory_id: str) -> bool:
        """Delete one memory; ``True`` when it existed."""
        def remove(con: _Connection) -> bool:
            row = con.execute(f"DELETE FROM memories WHERE {_ONE} RETURNING memory_id",
                              [app_name, user_id, memory_id]).fetchone()
            return row is not None

        removed = await self._run(remove)
        if removed:
            self._indexes.drop(app_name, user_id, memory_id)
        return removed

    async def clear(self, app_name: str, user_id: str) -> int:
        """Delete every memory of the user; returns how many rows went."""
        def remove(con: _Connection) -> int:
            return len(con.execute(f"DELETE FROM memories WHERE {_USER} RETURNING memory_id",
                                   [app_name, user_id]).fetchall())

        removed = await self._run(remove)
        self._indexes.drop(app_name, user_id)
        return removed

    # -- reads ---------------------------------------------------------------------------------

    async def get(self, app_name: str, user_id: str, memory_id: str) -> Memory | None:
        """The memory, or ``None`` when the id is unknown for this (app, user)."""
        def read(con: _Connection) -> Memory | None:
            row = con.execute(f"SELECT memory_json FROM memories WHERE {_ONE}",
                              [app_name, user_id, memory_id]).fetchone()
            return None if row is None else Memory.from_dict(json.loads(row[0]))

        return await self._run(read)

    async def list(self, app_name: str, user_id: str, *, kind: str | None = None,
                   limit: int | None = None) -> list[Memory]:
        """Memories of the user, most recently updated first, optionally of one ``kind`` and at most
        ``limit``.
        """
        check_kind(kind, allow_none=True)
        sql = f"SELECT memory_json FROM memories WHERE {_USER}"
        params: list[Any] = [app_name, user_id]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        sql += " ORDER BY updated_at DESC, created_at DESC, memory_id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, int(limit)))

        def read(con: _Connection) -> list[Memory]:
            return [Memory.from_dict(json.loads(r[0])) for r in con.execute(sql, params).fetchall()]

        return await self._run(read)

    async def _load(self, app_name: str, user_id: str) -> builtins.list[Memory]:
        return await self.list(app_name, user_id)

    async def search(self, app_name: str, user_id: str, query: str, *, top_k: int = 10,
                     kind: str | None = None, mode: str = "lexical",
                     min_score: float | None = None) -> builtins.list[MemoryHit]:
        """At most ``top_k`` hits for ``query``, best first (see :meth:`MemoryService.search`); the user's
        index is built from the table on first use.
        """
        return await self._indexes.search(app_name, user_id, query, top_k=top_k, kind=kind, mode=mode,
                                          min_score=min_score, load=lambda: self._load(app_name, user_id))

    async def similarities(self, app_name: str, user_id: str, text: str,
                           memory_ids: Sequence[str]) -> builtins.list[float]:
        """Cosine between ``text`` and each stored memory of ``memory_ids`` (needs an embedder)."""
        return await self._indexes.similarities(app_name, user_id, text, memory_ids,
                                                 load=lambda: self._load(app_name, user_id))
