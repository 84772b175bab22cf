"""The one DuckDB connection lifecycle of every DuckDB file agentlab keeps open (:class:`DuckDBService`)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import duckdb
import pytest

from agentlab.duckdb_files import DatabaseFileError, DuckDBService
from agentlab.memory.duckdb import DuckDBMemoryService
from agentlab.model.cache import CallCache
from agentlab.recall.embed_cache import EmbeddingCache
from agentlab.session.duckdb import DuckDBSessionService


class Counter(DuckDBService):
    what = "counter file"
    schema = ("CREATE TABLE IF NOT EXISTS n (x INTEGER)",)

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.forgotten = 0

    def _forget(self) -> None:
        self.forgotten += 1


async def test_the_file_opens_on_first_call_keeps_one_connection_and_reopens_after_close(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "counter.duckdb"
    service = Counter(path)
    assert not path.exists() and service.forgotten == 0  # nothing opened by the constructor

    first = await service._run(lambda con: con)
    await service._run(lambda con: con.execute("INSERT INTO n VALUES (1)"))
    assert path.exists() and service.forgotten == 1  # opened once: folder made, schema run
    assert await service._run(lambda con: con) is first

    await service.close()
    assert service._connection is None and service.forgotten == 2
    service.close_sync()  # closing a closed service is a no-op
    assert service.forgotten == 2

    async with service:
        assert await service._run(lambda con: con) is not first  # reopened ...
        assert await service._run(lambda con: con.execute("SELECT x FROM n").fetchall()) == [(1,)]  # ... same file
    assert service._connection is None and service.forgotten == 4


async def test_calls_take_turns_on_the_one_connection(tmp_path: Path) -> None:
    service = Counter(tmp_path / "counter.duckdb")
    inside = 0
    overlaps = 0
    guard = threading.Lock()

    def work(con: duckdb.DuckDBPyConnection) -> None:
        nonlocal inside, overlaps
        with guard:
            inside += 1
            overlaps += inside > 1
        time.sleep(0.01)
        con.execute("INSERT INTO n VALUES (1)")
        with guard:
            inside -= 1

    await asyncio.gather(*(service._run(work) for _ in range(8)))
    assert overlaps == 0
    assert await service._run(lambda con: con.execute("SELECT count(*) FROM n").fetchone()) == (8,)
    await service.close()


@pytest.mark.parametrize(("service_class", "what"), [(Counter, "counter file"),
                                                      (DuckDBSessionService, "session store"),
                                                      (DuckDBMemoryService, "memory database")])
async def test_a_file_that_cannot_be_opened_is_named_in_the_error(tmp_path: Path, service_class: type,
                                                                  what: str) -> None:
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_text("this is not a duckdb file")
    service = service_class(garbage)
    with pytest.raises(RuntimeError, match="^" + re.escape(f"cannot open {what} {garbage}: ")):
        await service._run(lambda con: con)
    assert service._connection is None


@pytest.mark.parametrize(("open_cache", "what", "variable"), [(CallCache, "call cache", "AGENTLAB_CACHE_DB"),
                                                               (EmbeddingCache, "embedding cache",
                                                                "AGENTLAB_EMBED_CACHE_DB")])
def test_the_caches_open_their_file_through_the_service_and_name_the_fix(tmp_path: Path, open_cache: type,
                                                                         what: str, variable: str) -> None:
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_text("this is not a duckdb file")
    with pytest.raises(DatabaseFileError) as raised:
        open_cache(garbage)  # at construction, not at the first lookup
    assert str(raised.value).startswith(f"{what} {garbage} is not a readable DuckDB file")
    assert str(raised.value).endswith(f"set {variable} to another file")
    assert garbage.read_text() == "this is not a duckdb file"  # nothing written to it
    cache = open_cache(tmp_path / "sub" / "cache.duckdb")  # the missing folder is made
    assert isinstance(cache._file, DuckDBService) and cache._file._connection is not None
    cache.close()
    assert cache._file._connection is None  # the file is released for other processes


async def test_the_session_service_drops_its_caches_when_the_connection_closes(tmp_path: Path) -> None:
    service = DuckDBSessionService(tmp_path / "sessions.duckdb")
    await service.create_session("app", "user", "s1")
    await service.session_heads("app", "user")
    assert service._next_seq and service._heads
    await service.close()
    assert not service._next_seq and not service._heads
    async with service:
        assert set(await service.session_heads("app", "user")) == {"s1"}
