"""Batched appends: ``append_events``, a session created by its first append, and ``linger``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import duckdb
import pytest

from agentlab.events import user_event
from agentlab.session import DuckDBSessionService, Session

APP = "app"


def _counting(service: DuckDBSessionService) -> list[int]:
    """Patch ``service`` to record the size of every batch it commits (one INSERT statement each)."""
    sizes: list[int] = []
    insert = service._insert_events

    def counted(con: Any, batch: Any, reload_seq: bool = False) -> None:
        sizes.append(len(batch))
        insert(con, batch, reload_seq)

    service._insert_events = counted  # type: ignore[method-assign]
    return sizes


def _stored(path: Path) -> list[tuple[str, int, str]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("SELECT session_id, seq, event_json::JSON->'choices'->0->>'content' FROM events "
                           "ORDER BY session_id, seq").fetchall()


async def test_append_events_commits_its_events_in_one_batch_in_order(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 1) as service:
        session = await service.create_session(APP, "u", "one")
        sizes = _counting(service)
        await service.append_events(session, [user_event(f"m{i}") for i in range(5)])
        assert sizes == [5]
        assert [e.message.content for e in session.events if e.message] == [f"m{i}" for i in range(5)]
    assert _stored(path) == [("one", i, f"m{i}") for i in range(5)]


async def test_a_session_created_by_its_first_append_is_one_commit_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 1) as service:
        session = Session(app_name=APP, user_id="u", id="fresh", state={"origin": "proxy"})
        sizes = _counting(service)
        await service.append_events(session, [user_event("hello"), user_event("again")], create=True)
        await service.append_events(session, [user_event("third")])
        assert sizes == [2, 1]
    async with DuckDBSessionService(path) as service:
        back = await service.get_session(APP, "u", "fresh")
        assert back is not None and back.state == {"origin": "proxy"}
        assert [e.message.content for e in back.events if e.message] == ["hello", "again", "third"]
        assert [s.id for s in await service.list_sessions(APP, "u")] == ["fresh"]


async def test_creating_a_session_that_exists_fails_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 1) as service:
        await service.create_session(APP, "u", "taken")
        twin = Session(app_name=APP, user_id="u", id="taken")
        with pytest.raises(ValueError, match="session already exists"):
            await service.append_events(twin, [user_event("clash")], create=True)
        assert twin.events == []
        empty = Session(app_name=APP, user_id="u", id="empty")
        await service.append_events(empty, [], create=True)  # no events: the session is still created
        assert await service.get_session(APP, "u", "empty") is not None
    assert _stored(path) == []


async def test_linger_gathers_concurrent_sessions_appends_into_one_commit(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 1, linger=0.2) as service:
        sessions = [await service.create_session(APP, "u", f"c{i}") for i in range(8)]
        sizes = _counting(service)

        async def later(i: int) -> None:
            await asyncio.sleep(0.002 * i)  # arrivals spread over 14 ms, well inside the 200 ms linger
            await service.append_events(sessions[i], [user_event(f"q{i}"), user_event(f"r{i}")])

        await asyncio.gather(*(later(i) for i in range(8)))
        assert sizes == [16]
        for i, s in enumerate(sessions):  # every append returned after its commit, in its own order
            assert [e.message.content for e in s.events if e.message] == [f"q{i}", f"r{i}"]
    assert len(_stored(path)) == 16


async def test_without_linger_the_first_append_commits_at_once(tmp_path: Path) -> None:
    async with DuckDBSessionService(tmp_path / "s.duckdb", token_counter=lambda e: 1) as service:
        a = await service.create_session(APP, "u", "a")
        b = await service.create_session(APP, "u", "b")
        sizes = _counting(service)

        async def later() -> None:
            await asyncio.sleep(0.05)
            await service.append_events(b, [user_event("b")])

        await asyncio.gather(service.append_events(a, [user_event("a")]), later())
        assert sizes == [1, 1]


async def test_after_a_failed_event_the_same_sessions_later_events_in_the_batch_fail_too(tmp_path: Path) -> None:
    # One batch: a create of a session that exists (fails), then an append to it. Retried item by
    # item without this rule, the append would go into the existing session: a ledger whose first
    # turn was refused but whose second was stored.
    path = tmp_path / "s.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 1, linger=0.05) as service:
        await service.create_session(APP, "u", "taken")
        other = await service.create_session(APP, "u", "other")
        twin = Session(app_name=APP, user_id="u", id="taken")
        outcomes = await asyncio.gather(
            service.append_events(twin, [user_event("first")], create=True),
            service.append_events(twin, [user_event("second")]),
            service.append_events(other, [user_event("unrelated")]),
            return_exceptions=True)
        assert isinstance(outcomes[0], ValueError) and isinstance(outcomes[1], ValueError)
        assert outcomes[2] is None
    assert _stored(path) == [("other", 0, "unrelated")]


async def test_appends_queued_behind_a_failed_batch_fail_with_it(tmp_path: Path) -> None:
    # Without linger the create goes alone into the first batch; the append behind it waits for
    # the next. A caller that queues its next append without awaiting the one before (the serve
    # proxy does, so that one conversation's turns share commits) must not see it stored after
    # the refused one: the second append fails with the first's error, the other session's goes in.
    path = tmp_path / "s.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 1) as service:
        await service.create_session(APP, "u", "taken")
        other = await service.create_session(APP, "u", "other")
        twin = Session(app_name=APP, user_id="u", id="taken")
        sizes = _counting(service)
        first = asyncio.ensure_future(service.append_events(twin, [user_event("first")], create=True))
        await asyncio.sleep(0)  # its batch is being written now
        outcomes = await asyncio.gather(
            first,
            service.append_events(twin, [user_event("second")]),
            service.append_events(other, [user_event("unrelated")]),
            return_exceptions=True)
        assert sizes[0] == 1, sizes  # the create was a batch of its own
        assert isinstance(outcomes[0], ValueError) and isinstance(outcomes[1], ValueError), outcomes
        assert outcomes[2] is None
    assert _stored(path) == [("other", 0, "unrelated")]


def test_linger_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="linger must be >= 0"):
        DuckDBSessionService(tmp_path / "s.duckdb", linger=-0.1)


async def test_a_batch_of_large_events_goes_in_row_by_row_in_order(tmp_path: Path, monkeypatch: Any) -> None:
    from agentlab.session import duckdb_tables, duckdb_writes

    path = tmp_path / "s.duckdb"
    statements: list[int] = []

    class Counting:
        def __init__(self, con: Any) -> None:
            self.con = con

        def execute(self, sql: str, params: Any = None) -> Any:
            statements.append(len(params))
            return self.con.execute(sql, params)

    insert = duckdb_tables.insert_event_rows
    monkeypatch.setattr(duckdb_writes, "insert_event_rows", lambda con, rows: insert(Counting(con), rows))
    big = "word " * 500_000  # 2.5 MB each: two of them are over LARGE_BATCH_CHARS together
    async with DuckDBSessionService(path, token_counter=lambda e: 1) as service:
        session = await service.create_session(APP, "u", "one")
        await service.append_events(session, [user_event(f"{i} {big}") for i in range(3)])
        await service.append_events(session, [user_event("small"), user_event("ones")])
    # One statement a row (each row's 14 values), not one of 14 lists: the lock is given back
    # between rows. Small events still go in as one statement of 14 lists.
    assert statements == [14, 14, 14, 14]
    stored = _stored(path)
    assert [row[2].split(" ")[0] for row in stored] == ["0", "1", "2", "small", "ones"]
    assert len(stored[1][2]) == len(f"1 {big}")
