"""DuckDB-only behaviour: persistence across processes, the seq column, releasing the file."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb

from agentlab.events import Event, Message, ToolCall, user_event
from agentlab.session import FULL_SESSION_KEY, DuckDBSessionService, Summary, SummaryBoundary

APP = "app"
USER = "alice"

# Runs in a separate interpreter (the project's .venv python that runs pytest).
_CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    from agentlab.events import Event, Message, ToolCall, user_event
    from agentlab.session import DuckDBSessionService, Summary, SummaryBoundary

    path, session_id, count, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

    async def main():
        service = DuckDBSessionService(path, token_counter=lambda e: 5)
        session = await service.get_session("app", "alice", session_id)
        if session is None:
            session = await service.create_session("app", "alice", session_id, state={"origin": "child"})
        start = len(session.events)
        for i in range(count):
            await service.append_event(session, user_event(f"child turn {start + i}"))
        await service.append_event(session, Event(
            author="agent", choices=[Message.assistant("", [ToolCall("call-9", "lookup", '{"k": 1}')])],
            state_delta={"child_done": True}))
        last = session.events[-1]
        await service.write_summary(session, "", Summary(
            text="child summary", updated_at=5.0,
            boundary=SummaryBoundary(cutoff_at=last.timestamp, last_event_id=last.id)))
        if how == "crash":
            os._exit(0)  # no close, no interpreter shutdown: only committed data may survive
        await service.close()

    asyncio.run(main())
    print("ok")
    """
)


def _run_child(path: Path, session_id: str, count: int, how: str = "close") -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), session_id, str(count), how],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr


async def test_events_written_by_another_process_are_read_after_restart(tmp_path: Path) -> None:
    path = tmp_path / "store" / "sessions.duckdb"
    await asyncio.to_thread(_run_child, path, "s1", 25)

    service = DuckDBSessionService(path, token_counter=lambda e: 1)
    try:
        session = await service.get_session(APP, USER, "s1")
        assert session is not None
        assert [e.text for e in session.events[:25]] == [f"child turn {i}" for i in range(25)]
        assert len(session.events) == 26
        assert session.events[-1].message is not None
        assert session.events[-1].message.tool_calls == (ToolCall("call-9", "lookup", '{"k": 1}'),)
        assert all(e.token_count == 5 for e in session.events)  # counted once, by the child
        assert session.state == {"origin": "child", "child_done": True}
        summary = await service.get_summary(session, FULL_SESSION_KEY)
        assert summary is not None and summary.text == "child summary"
        assert summary.boundary is not None and summary.boundary.last_event_id == session.events[-1].id

        # This process appends too, then releases the file so the child can write again.
        await service.append_event(session, user_event("parent turn"))
    finally:
        await service.close()

    await asyncio.to_thread(_run_child, path, "s1", 3)
    # The same service object reopens the file on its next call and sees the child's appends.
    try:
        session = await service.get_session(APP, USER, "s1")
        assert session is not None
        texts = [e.text for e in session.events]
        assert texts[25:27] == ["", "parent turn"]
        assert texts[27:30] == ["child turn 27", "child turn 28", "child turn 29"]
        assert len(texts) == 31
    finally:
        await service.close()


async def test_committed_appends_survive_a_process_that_dies_without_closing(tmp_path: Path) -> None:
    path = tmp_path / "sessions.duckdb"
    await asyncio.to_thread(_run_child, path, "crashy", 10, "crash")
    async with DuckDBSessionService(path) as service:
        session = await service.get_session(APP, USER, "crashy")
        assert session is not None
        assert len(session.events) == 11
        assert session.state["child_done"] is True
        assert (await service.get_summary(session)) is not None


async def test_concurrent_appends_get_distinct_gap_free_seq_in_ledger_order(tmp_path: Path) -> None:
    path = tmp_path / "sessions.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 1) as service:
        session = await service.create_session(APP, USER, "busy")
        batch = [user_event(f"m{i}") for i in range(100)]
        await asyncio.gather(*(service.append_event(session, e) for e in batch))
        in_object_order = [e.id for e in session.events]

    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute(
            "SELECT seq, event_id FROM events WHERE session_id = 'busy' ORDER BY seq"
        ).fetchall()
    assert [seq for seq, _ in rows] == list(range(100))
    assert [event_id for _, event_id in rows] == in_object_order


async def test_columns_mirror_the_event_for_sql_analysis(tmp_path: Path) -> None:
    path = tmp_path / "sessions.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 42) as service:
        session = await service.create_session(APP, USER, "s1")
        event = Event(author="agent", choices=[Message.tool("c1", "search", "found")], invocation_id="inv",
                      filter_key="branch")
        await service.append_event(session, event)
        await service.write_summary(session, "branch", Summary(
            text="t", updated_at=3.0, boundary=SummaryBoundary(filter_key="branch", last_event_id=event.id),
            topics=("a", "b")))

    with duckdb.connect(str(path), read_only=True) as con:
        row = con.execute(
            "SELECT event_id, invocation_id, author, role, filter_key, token_count, timestamp FROM events"
        ).fetchone()
        summary_row = con.execute(
            "SELECT filter_key, text, boundary->>'last_event_id', topics->>'$[1]' FROM summaries"
        ).fetchone()
    assert row == (event.id, "inv", "agent", "tool", "branch", 42, event.timestamp)
    assert summary_row == ("branch", "t", event.id, "b")


async def test_open_failure_names_the_file(tmp_path: Path) -> None:
    not_a_db = tmp_path / "garbage.duckdb"
    not_a_db.write_text("this is not a duckdb file")
    service = DuckDBSessionService(not_a_db)
    try:
        await service.get_session(APP, USER, "s1")
    except RuntimeError as exc:
        assert "garbage.duckdb" in str(exc)
    else:
        raise AssertionError("opening a non-DuckDB file should fail")


async def test_session_object_order_matches_seq_even_when_thread_hops_finish_late(tmp_path: Path) -> None:
    # Delay the return from the worker thread by a random amount after each commit: without
    # the write lock spanning commit + Session update, session.events would drift from seq.
    rng = random.Random(7)
    async with DuckDBSessionService(tmp_path / "sessions.duckdb", token_counter=lambda e: 1) as service:
        original_run = service._run

        async def late_run(work, *executor):  # type: ignore[no-untyped-def]
            result = await original_run(work, *executor)
            await asyncio.sleep(rng.random() / 200)
            return result

        service._run = late_run  # type: ignore[method-assign]
        session = await service.create_session(APP, USER, "busy")
        await asyncio.gather(*(service.append_event(session, user_event(f"m{i}")) for i in range(40)))
        fetched = await service.get_session(APP, USER, "busy")
    assert fetched is not None
    assert [e.id for e in fetched.events] == [e.id for e in session.events]


async def test_two_service_objects_on_one_file_do_not_collide_on_seq(tmp_path: Path) -> None:
    # Not the recommended setup (one service per file), but it must not corrupt the ledger:
    # a stale seq cache hits the primary key and the append is retried with a fresh seq.
    path = tmp_path / "sessions.duckdb"
    first = DuckDBSessionService(path, token_counter=lambda e: 1)
    second = DuckDBSessionService(path, token_counter=lambda e: 1)
    try:
        a = await first.create_session(APP, USER, "shared")
        b = await second.get_session(APP, USER, "shared")
        assert b is not None
        for i in range(3):
            await first.append_event(a, user_event(f"first {i}"))
            await second.append_event(b, user_event(f"second {i}"))
        stored = await first.get_session(APP, USER, "shared")
        assert stored is not None
        assert [e.text for e in stored.events] == [
            "first 0", "second 0", "first 1", "second 1", "first 2", "second 2"]
    finally:
        await first.close()
        await second.close()


async def test_fsync_off_is_applied_and_data_still_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "fast.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 1, fsync=False) as service:
        mode = await service._run(lambda con: con.execute("SELECT current_setting('fsync_mode')").fetchone())
        assert mode == ("NONE",)
        session = await service.create_session(APP, USER, "s1")
        await asyncio.gather(*(service.append_event(session, user_event(f"m{i}")) for i in range(20)))
    async with DuckDBSessionService(path) as reopened:
        mode = await reopened._run(lambda con: con.execute("SELECT current_setting('fsync_mode')").fetchone())
        assert mode == ("STANDARD",)
        stored = await reopened.get_session(APP, USER, "s1")
        assert stored is not None and [e.id for e in stored.events] == [e.id for e in session.events]


async def test_in_memory_database_path_works() -> None:
    async with DuckDBSessionService(":memory:", token_counter=lambda e: 1) as service:
        session = await service.create_session(APP, USER, "s1")
        await service.append_event(session, user_event("hi"))
        stored = await service.get_session(APP, USER, "s1")
        assert stored is not None and stored.events[0].text == "hi"
