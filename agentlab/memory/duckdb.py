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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from agentlab.duckdb_files import DuckDBService
from agentlab.memory.service import (
    Memory,
    MemoryBackend,
    check_kind,
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


class DuckDBMemoryService(DuckDBService, MemoryBackend):
    """A ``MemoryService`` persisted in one DuckDB file (``":memory:"`` also works).

    Use ``async with DuckDBMemoryService(path) as memories: ...`` or call :meth:`close`, so the
    file is released for other processes. A closed service reopens the file on its next call
    (the connection's lifecycle is :class:`~agentlab.duckdb_files.DuckDBService`'s).
    """

    what = "memory database"
    schema = (_SCHEMA,)

    def __init__(self, path: str | Path, embedder: Embedder | str | None = None) -> None:
        DuckDBService.__init__(self, path)
        MemoryBackend.__init__(self, embedder)

    # -- writes --------------------------------------------------------------------------------

    async def _insert(self, memory: Memory) -> bool:
        def insert(con: _Connection) -> bool:
            try:
                con.execute("INSERT INTO memories VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _row_values(memory))
            except duckdb.ConstraintException:
                return False
            return True

        return await self._run(insert)

    async def _change(self, app_name: str, user_id: str, memory_id: str,
                      revise: Callable[[Memory], Memory]) -> Memory | None:
        """The read-modify-write holds the connection's lock throughout: atomic for this service."""

        def change(con: _Connection) -> Memory | None:
            row = con.execute(f"SELECT memory_json FROM memories WHERE {_ONE}",
                              [app_name, user_id, memory_id]).fetchone()
            if row is None:
                return None
            updated = revise(Memory.from_dict(json.loads(row[0])))
            con.execute(
                f"UPDATE memories SET kind = ?, text = ?, superseded_by = ?, updated_at = ?, memory_json = ?"
                f" WHERE {_ONE}",
                [updated.kind, updated.text, updated.superseded_by, updated.updated_at,
                 json.dumps(updated.to_dict(), ensure_ascii=False), app_name, user_id, memory_id],
            )
            return updated

        return await self._run(change)

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
