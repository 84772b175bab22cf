"""The serve store on its own: batched commits, lookups of what is only on disk, the key filter."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest

from agentlab.serve.store import KeyFilter, ServeStore, background_writer


def _count(path: Path, table: str) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]
    finally:
        con.close()


def test_call_rows_wait_for_the_batch_and_a_flush_commits_them_in_one_go(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, int, int]:
        store = ServeStore(tmp_path / "s.duckdb", fsync=False, flush_interval=30)
        statements: list[int] = []
        run = store.run

        async def counted(work: Any, *executor: Any) -> Any:
            statements.append(1)
            return await run(work, *executor)

        store.run = counted  # type: ignore[method-assign]
        for i in range(5):
            store.record_call({"call_id": f"call-{i}", "started_at": float(i), "status": 200},
                              [{"call_id": f"call-{i}", "tool": "session_search", "round": 1}])
        await asyncio.sleep(0.05)
        before = int(store.query("SELECT count(*) AS n FROM serve_calls")["n"][0])
        await store.flush()
        after = int(store.query("SELECT count(*) AS n FROM serve_calls")["n"][0])
        exchanges = int(store.query("SELECT count(*) AS n FROM serve_exchanges")["n"][0])
        await store.close()
        assert len(statements) == 1  # one transaction for all five calls and their exchanges
        return before, after, exchanges

    assert asyncio.run(scenario()) == (0, 5, 5)


def test_a_forgotten_conversation_is_found_while_its_rows_are_being_written(tmp_path: Path) -> None:
    async def scenario() -> tuple[Any, ...]:
        store = ServeStore(tmp_path / "s.duckdb", fsync=False, flush_interval=0)
        run = store.run
        started = asyncio.Event()

        async def slow_writer(work: Any, *executor: Any) -> Any:
            if not started.is_set():  # the writer's transaction: taken from the queue, not yet committed
                started.set()
                await asyncio.sleep(0.3)
            return await run(work, *executor)

        store.run = slow_writer  # type: ignore[method-assign]
        store.save_conversation("t", "conv-a", "sess-a", "new")
        store.index_prefixes("t", "conv-a", ["h1", "h2", "h3"])
        store.forget("t", "conv-a")
        assert store.prefixes == {} and store.conversations == {}
        await started.wait()
        during = (await store.session_of("t", "conv-a"), await store.match_prefix("t", ["h1", "h2", "h3", "h4"], 2))
        await store.flush()
        after = (await store.session_of("t", "conv-a"), await store.match_prefix("t", ["h1", "h2", "h9"], 2),
                 await store.session_of("t", "conv-b"), await store.match_prefix("t", ["x1", "x2"], 2))
        await store.close()
        return during, after

    (session, match), (session_after, match_after, unknown, no_match) = asyncio.run(scenario())
    assert session == session_after == "sess-a"
    assert (match.conversation_id, match.length) == ("conv-a", 3)
    assert (match_after.conversation_id, match_after.length) == ("conv-a", 2)
    assert unknown is None and no_match.conversation_id is None and not no_match.ambiguous


def test_a_restarted_store_holds_nothing_in_memory_but_finds_everything(tmp_path: Path) -> None:
    async def write() -> None:
        store = ServeStore(tmp_path / "s.duckdb", fsync=False)
        for i in range(50):
            store.save_conversation("t", f"conv-{i}", f"sess-{i}", "new")
            store.index_prefixes("t", f"conv-{i}", [f"a{i}", f"b{i}"])
        await store.flush()
        await store.close()

    async def read() -> tuple[Any, ...]:
        store = ServeStore(tmp_path / "s.duckdb", fsync=False)
        found = (store.conversations, store.prefixes, await store.session_of("t", "conv-7"),
                 (await store.match_prefix("t", ["a7", "b7", "c7"], 2)).conversation_id)
        await store.close()
        return found

    asyncio.run(write())
    assert asyncio.run(read()) == ({}, {}, "sess-7", "conv-7")
    assert _count(tmp_path / "s.duckdb", "serve_prefixes") == 100


def test_the_key_filter_never_forgets_and_keeps_its_size() -> None:
    f = KeyFilter(bits=1 << 16)
    size = len(f._array)
    added = [f"key-{i}" for i in range(2000)]
    for key in added:
        f.add(key)
    assert all(key in f for key in added)  # no false negative
    false_positives = sum(f"other-{i}" in f for i in range(2000))
    assert false_positives < 200 and len(f._array) == size
    with pytest.raises(ValueError, match="flush_interval"):
        ServeStore(":memory:", flush_interval=-1)


def test_conversations_go_in_as_one_statement_and_a_moved_one_keeps_its_first_row(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[tuple[Any, ...]], int, str | None]:
        store = ServeStore(tmp_path / "s.duckdb", fsync=False, flush_interval=30)
        statements: list[str] = []
        run = store.run

        async def counted(work: Any, *executor: Any) -> Any:
            return await run(lambda con: work(_Spy(con, statements)), *executor)

        store.run = counted  # type: ignore[method-assign]
        for i in range(20):
            store.save_conversation("t", f"conv-{i}", f"sess-{i}", "new")
        store.save_conversation("t", "conv-3", "sess-3~branch", "branch")  # moved before its commit
        queued = await store.session_of("t", "conv-3")
        await store.flush()
        store.save_conversation("t", "conv-4", "sess-4~branch", "branch")  # moved after it
        await store.flush()
        rows = store.query("SELECT conversation_id, session_id, key_source FROM serve_conversations "
                           "ORDER BY conversation_id").itertuples(index=False, name=None)
        await store.close()
        return list(rows), sum("serve_conversations" in s for s in statements), queued

    rows, upserts, queued = asyncio.run(scenario())
    assert upserts == 2  # one statement per commit, not one per conversation
    assert len(rows) == 20 and queued == "sess-3~branch"
    by_id = {c: (s, k) for c, s, k in rows}
    assert by_id["conv-3"] == ("sess-3~branch", "new") and by_id["conv-4"] == ("sess-4~branch", "new")
    assert by_id["conv-7"] == ("sess-7", "new")


class _Spy:
    """A connection that records the SQL it runs."""

    def __init__(self, con: Any, log: list[str]) -> None:
        self._con, self._log = con, log

    def execute(self, sql: str, *args: Any) -> Any:
        self._log.append(sql)
        return self._con.execute(sql, *args)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")
def test_the_background_writer_runs_below_normal_priority_and_nice_zero_leaves_it() -> None:
    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    base = niceness()
    for nice, expected in ((10, max(base, 10)), (0, base)):
        pool = background_writer(nice)
        try:
            assert pool.submit(niceness).result() == expected
        finally:
            pool.shutdown()
    assert niceness() == base  # the caller's thread is left alone
    with pytest.raises(ValueError, match="between 0 and 19"):
        background_writer(20)


def test_the_server_commits_off_path_work_on_its_writer_and_the_agent_back_end_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlab.serve.server import ServeApp, ServeConfig

    monkeypatch.setenv("AGENTLAB_SERVE_TEST_UPSTREAM", "http://127.0.0.1:9/v1")  # the factory's model; never called

    proxy = ServeApp(ServeConfig(upstream="http://127.0.0.1:9/v1", db=str(tmp_path / "p.duckdb")))
    waiting = ServeApp(ServeConfig(upstream="http://127.0.0.1:9/v1", db=str(tmp_path / "w.duckdb"),
                                   wait_for_ledger=True))
    agent = ServeApp(ServeConfig(agent="serve_agent_factory:make_agent", db=str(tmp_path / "a.duckdb")))
    try:
        assert proxy.store.write_executor is proxy.writer and proxy.sessions.append_executor is proxy.writer
        assert proxy.sessions.linger > 0
        # An answer that waits for its commit, and the agent back end's runner, keep the default executor.
        assert waiting.sessions.append_executor is None and waiting.sessions.linger == 0
        assert agent.store.write_executor is agent.writer and agent.sessions.append_executor is None
    finally:
        for app in (proxy, waiting, agent):
            asyncio.run(app.close())
    with pytest.raises(ValueError, match="--writer-nice"):
        ServeConfig(upstream="http://127.0.0.1:9/v1", writer_nice=-1).check()


def test_a_file_written_before_a_call_column_existed_gets_it_and_keeps_its_rows(tmp_path: Path) -> None:
    from agentlab.serve.store import CALL_COLUMNS

    path = tmp_path / "old.duckdb"
    older = [(n, t) for n, t in CALL_COLUMNS if n != "summary_reused_events"]
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE serve_calls (" + ", ".join(f"{n} {t}" for n, t in older) + ")")
    con.execute("INSERT INTO serve_calls (call_id, started_at, ledger_mode) VALUES ('old', 1.0, 'branch')")
    con.close()

    async def scenario() -> Any:
        store = ServeStore(path, fsync=False)
        store.record_call({"call_id": "new", "started_at": 2.0, "ledger_mode": "branch", "summary_reused_events": 9,
                           "status": 200})
        await store.flush()
        rows = store.query("SELECT call_id, status, summary_reused_events FROM serve_calls ORDER BY started_at")
        await store.close()
        return rows

    rows = asyncio.run(scenario())
    assert rows.to_dict("records")[0]["call_id"] == "old" and rows["summary_reused_events"].isna().iloc[0]
    assert rows.to_dict("records")[1] == {"call_id": "new", "status": 200, "summary_reused_events": 9}


def test_a_file_that_cannot_be_opened_fails_the_constructor_with_its_name(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_text("this is not a duckdb file")
    with pytest.raises(RuntimeError, match="^" + re.escape(f"cannot open the serve database {garbage}: ")):
        ServeStore(garbage, fsync=False)  # at start-up, not on the first request


def test_a_closed_store_reopens_its_file_on_the_next_call(tmp_path: Path) -> None:
    async def scenario() -> tuple[str | None, list[tuple[Any, ...]]]:
        store = ServeStore(tmp_path / "s.duckdb", fsync=False, flush_interval=0)
        store.save_conversation("t", "c1", "s1", "explicit")
        await store.flush()
        await store.close()
        store.forget("t", "c1")  # only on disk now: the lookup queries the reopened file
        found = await store.session_of("t", "c1")
        rows = [tuple(r) for r in store.query("SELECT conversation_id, session_id FROM serve_conversations")
                .itertuples(index=False)]
        await store.close()
        return found, rows

    assert asyncio.run(scenario()) == ("s1", [("c1", "s1")])


def test_a_row_the_database_refuses_loses_only_itself_not_the_other_tenants_rows(tmp_path: Path) -> None:
    # A lone surrogate cannot be stored as UTF-8: the batch's statement fails as a whole. Four
    # tenants' conversations, prefixes and calls share that batch with it; all four are kept.
    async def scenario() -> tuple[Any, ...]:
        store = ServeStore(tmp_path / "s.duckdb", fsync=False, flush_interval=30)
        tenants = [f"tenant-{i}" for i in range(4)]
        for i, tenant in enumerate(tenants):
            store.save_conversation(tenant, f"conv-{i}", f"session-{i}", "explicit")
            store.index_prefixes(tenant, f"conv-{i}", [f"h{i}a", f"h{i}b"])
            store.record_call({"call_id": f"call-{i}", "started_at": float(i), "tenant": tenant,
                               "conversation_id": f"conv-{i}", "model": "m", "status": 200, "outcome": "ok"})
        store.record_call({"call_id": "call-bad", "started_at": 9.0, "tenant": "tenant-x",
                           "model": "bad\ud800model", "status": 400, "outcome": "bad_request"})
        await store.flush()
        conversations = store.query("SELECT tenant FROM serve_conversations ORDER BY tenant")["tenant"].tolist()
        prefixes = int(store.query("SELECT count(*) AS n FROM serve_prefixes")["n"][0])
        calls = store.query("SELECT call_id, outcome, model, error FROM serve_calls ORDER BY call_id")
        refused = list(store.refused)
        await store.close()
        return conversations, prefixes, calls, refused

    conversations, prefixes, calls, refused = asyncio.run(scenario())
    assert conversations == [f"tenant-{i}" for i in range(4)]
    assert prefixes == 8
    assert calls["call_id"].tolist() == ["call-0", "call-1", "call-2", "call-3", "call-bad"]
    assert calls["outcome"].tolist()[:4] == ["ok"] * 4
    bad = calls[calls["call_id"] == "call-bad"].iloc[0]
    assert bad["outcome"] == "store_refused"  # the refused row is kept as an error, its text escaped
    assert bad["model"] == "bad\\ud800model"
    assert "refused" in bad["error"]
    assert [table for table, _ in refused] == ["serve_calls"]
