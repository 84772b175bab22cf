"""The remote executor's scheduling (requeue, failure, replacement, affinity, caches that travel) without Ray.

A fake backend runs real :class:`~agentlab.bench.running.distributed.CaseWorker` objects (each with its own
models and in-memory call cache) as asyncio tasks in this process, and can make a worker "die"
when it is handed a given case. Both executors talk to the local OpenAI-compatible test server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import bench_demo_task as demo
import pytest

from agentlab.bench.config import load_settings
from agentlab.bench.running import executor
from agentlab.bench.running.distributed import CaseWorker, ExecutorError, RemoteExecutor, WorkerLost
from agentlab.bench.running.executor import CaseOutcome, Job
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import Case, get_task
from agentlab.model.cache import CacheEntry, CallCache
from agentlab.testing.openai_server import OpenAITestServer


@pytest.fixture(autouse=True)
def _reset_demo() -> Iterator[None]:
    demo.reset()
    yield
    demo.reset()


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as s:
        yield s


class _FakeWorker:
    def __init__(self, index: int, impl: CaseWorker) -> None:
        self.index = index
        self.impl = impl
        self.alive = True
        self.pending: set[asyncio.Task[Any]] = set()


class FakeBackend:
    """Workers as in-process asyncio tasks; ``deaths[case_id]`` = times the worker dies on that case."""

    def __init__(self, workers: int = 2, deaths: dict[str, int] | None = None,
                 broken: Sequence[str] = ()) -> None:
        self.n = workers
        self.deaths = dict(deaths or {})
        self.broken = set(broken)  # cases whose result cannot come back (an error outside the case)
        self.spawned: list[_FakeWorker] = []
        self.ran: dict[str, list[int]] = {}
        self.owner: dict[asyncio.Task[Any], _FakeWorker] = {}
        self.seed: list[CacheEntry] = []
        self.closed = False

    async def open(self, job: Job, seed: list[CacheEntry], slots: int) -> None:
        self.args = (job.task, job.request, job.run_id, seed)
        self.seed = seed
        self.slots = slots

    def default_workers(self) -> int:
        return self.n

    def spawn(self) -> _FakeWorker:
        worker = _FakeWorker(len(self.spawned), CaseWorker(*self.args))
        self.spawned.append(worker)
        return worker

    async def ready(self, workers: Sequence[_FakeWorker]) -> list[str]:
        return [f"fake:{w.index}" for w in workers]

    def submit(self, worker: _FakeWorker, ordinal: int, case: Case) -> asyncio.Task[Any]:
        assert worker.alive, "a dead worker was given a case"
        self.ran.setdefault(case.id, []).append(worker.index)
        if self.deaths.get(case.id, 0) > 0:
            self.deaths[case.id] -= 1
            task = asyncio.create_task(self._die(worker))
        elif case.id in self.broken:
            task = asyncio.create_task(self._unpicklable())
        else:
            task = asyncio.create_task(worker.impl.run(ordinal, case))
        worker.pending.add(task)
        self.owner[task] = worker
        return task

    async def _die(self, worker: _FakeWorker) -> None:
        await asyncio.sleep(0.01)
        self.discard(worker)

    async def _unpicklable(self) -> None:
        raise TypeError("cannot pickle '_thread.lock' object")

    async def wait(self, pending: Sequence[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
        done, _ = await asyncio.wait(pending, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
        return list(done)

    def result(self, pending: asyncio.Task[Any]) -> CaseOutcome:
        worker = self.owner[pending]
        if not worker.alive:
            raise WorkerLost(f"fake worker {worker.index} died")
        return pending.result()

    def discard(self, worker: _FakeWorker) -> None:
        worker.alive = False
        current = asyncio.current_task()
        for task in worker.pending:
            if task is not current:
                task.cancel()

    async def close(self) -> None:
        for worker in self.spawned:
            self.discard(worker)
        self.closed = True


def request(spec: str, **kw: Any) -> executor.RunRequest:
    task = get_task("demo")
    values: dict[str, Any] = {"benchmark": "demo", "mode": "long_context", "model_spec": spec,
                              "settings": load_settings("demo", task.default_settings()), "judge_spec": spec,
                              "concurrency": 2, "progress": False}
    values.update(kw)
    return executor.RunRequest(**values)


async def run(db: Path, cache: Path, spec: str, chosen: executor.Executor | None = None, *,
              task: Any = None, **kw: Any) -> executor.RunSummary:
    req = request(spec, **kw)
    model, judge = executor.build_models(req, cache=CallCache(cache))
    try:
        with ResultStore(db) as store:
            return await executor.run_task(task or get_task("demo"), req, model=model, store=store, judge=judge,
                                           executor=chosen)
    finally:
        model.cache.close()  # type: ignore[attr-defined]


def stored(db: Path) -> dict[str, tuple[Any, ...]]:
    """case id -> (status, prediction, error_code, sorted scores) of the one run in ``db``."""
    with ResultStore(db) as store:
        rows = store.query("SELECT case_id, status, prediction, error_code FROM cases")
        scores = store.query("SELECT case_id, metric, value FROM scores ORDER BY metric")
    out = {}
    for case_id, status, prediction, code in rows:
        out[case_id] = (status, prediction, code, [(m, v) for c, m, v in scores if c == case_id])
    return out


def remote(backend: FakeBackend, **kw: Any) -> RemoteExecutor:
    return RemoteExecutor(backend, workers=backend.n, **kw)


async def test_remote_run_stores_what_the_in_process_run_stores(tmp_path: Path, server: OpenAITestServer) -> None:
    local = await run(tmp_path / "a.duckdb", tmp_path / "a-cache.duckdb", server.model_spec)
    backend = FakeBackend(workers=2)
    far = await run(tmp_path / "b.duckdb", tmp_path / "b-cache.duckdb", server.model_spec, remote(backend))
    assert far.run_id == local.run_id  # the executor is not part of the run id
    assert (far.ok, far.failed, far.attempted) == (6, 0, 6)
    assert stored(tmp_path / "b.duckdb") == stored(tmp_path / "a.duckdb")
    assert len(set(stored(tmp_path / "b.duckdb"))) == 6
    assert {w for ran in backend.ran.values() for w in ran} == {0, 1}  # both workers took cases
    assert backend.closed and backend.slots == 2


async def test_a_lost_worker_is_replaced_and_its_case_requeued(tmp_path: Path, server: OpenAITestServer) -> None:
    backend = FakeBackend(workers=2, deaths={"d03": 1})
    summary = await run(tmp_path / "r.duckdb", tmp_path / "c.duckdb", server.model_spec, remote(backend))
    assert (summary.ok, summary.failed) == (6, 0)
    assert len(backend.ran["d03"]) == 2  # sent twice: the first worker died on it
    assert len(backend.spawned) == 3  # two, plus one replacement
    assert all(status == "ok" for status, *_ in stored(tmp_path / "r.duckdb").values())


async def test_a_case_that_keeps_killing_workers_is_stored_failed(tmp_path: Path, server: OpenAITestServer) -> None:
    backend = FakeBackend(workers=2, deaths={"d02": 99})
    summary = await run(tmp_path / "r.duckdb", tmp_path / "c.duckdb", server.model_spec,
                        remote(backend, max_requeues=2, max_replacements=5))
    assert (summary.ok, summary.failed, summary.errors) == (5, 1, {"worker_lost": 1})
    assert len(backend.ran["d02"]) == 3  # the first attempt and two requeues
    status, prediction, code, scores = stored(tmp_path / "r.duckdb")["d02"]
    assert (status, prediction, code, scores) == ("failed", None, "worker_lost", [])
    with ResultStore(tmp_path / "r.duckdb") as store:
        (error,), = store.query("SELECT error FROM cases WHERE case_id = 'd02'")
    assert "died 3 times" in error


async def test_no_worker_left_stops_the_run_and_a_rerun_in_process_finishes_it(
        tmp_path: Path, server: OpenAITestServer) -> None:
    db, cache = tmp_path / "r.duckdb", tmp_path / "c.duckdb"
    # Each of d05 and d06 kills whichever worker takes it: which worker takes which depends on timing
    # (a worker that finishes d04 late may be handed the requeued d05), the outcome must not.
    backend = FakeBackend(workers=2, deaths={"d05": 9, "d06": 9})
    with pytest.raises(ExecutorError, match="every worker was lost"):
        await run(db, cache, server.model_spec, remote(backend, max_replacements=0), concurrency=1)
    first = stored(db)
    assert first and "d05" not in first and "d06" not in first
    assert all(status == "ok" for status, *_ in first.values())
    with ResultStore(db) as store:
        assert store.query("SELECT status FROM runs") == [("failed",)]
    again = await run(db, cache, server.model_spec)  # in-process this time: only the missing cases
    assert (again.already_done, again.attempted, again.ok) == (len(first), 6 - len(first), 6 - len(first))
    assert len(stored(db)) == 6


async def test_an_error_outside_the_case_is_a_failed_case(tmp_path: Path, server: OpenAITestServer) -> None:
    backend = FakeBackend(workers=1, broken=["d01"])
    summary = await run(tmp_path / "r.duckdb", tmp_path / "c.duckdb", server.model_spec, remote(backend))
    assert (summary.ok, summary.failed, summary.errors) == (5, 1, {"TypeError": 1})


async def test_a_case_error_keeps_its_code(tmp_path: Path, server: OpenAITestServer) -> None:
    class Failing(type(get_task("demo"))):  # type: ignore[misc]
        async def run_case(self, case: Case, mode: str, ctx: Any) -> Any:
            if case.id == "d04":
                from agentlab.bench.tasks import CaseError

                raise CaseError("too long", code="context_length", metadata={"prompt_tokens_needed": 9})
            return await super().run_case(case, mode, ctx)

    summary = await run(tmp_path / "r.duckdb", tmp_path / "c.duckdb", server.model_spec, remote(FakeBackend()),
                        task=Failing())
    assert summary.errors == {"context_length": 1}
    with ResultStore(tmp_path / "r.duckdb") as store:
        (meta,), = store.query("SELECT metadata->>'prompt_tokens_needed' FROM cases WHERE case_id = 'd04'")
    assert meta == "9"


async def test_cases_sharing_work_go_to_one_worker(tmp_path: Path, server: OpenAITestServer) -> None:
    base = type(get_task("demo"))

    class Grouped(base):  # type: ignore[misc, valid-type]
        def case_group(self, case: Case) -> str | None:
            return str(int(case.data) % 3)  # three groups over six cases

    backend = FakeBackend(workers=2)
    await run(tmp_path / "r.duckdb", tmp_path / "c.duckdb", server.model_spec, remote(backend),
              task=Grouped(), mode="summary", concurrency=1)
    by_group: dict[int, set[int]] = {}
    for case_id, workers in backend.ran.items():
        by_group.setdefault(int(case_id[1:]) % 3, set()).update(workers)
    assert all(len(ws) == 1 for ws in by_group.values()), by_group
    assert len({w for ws in by_group.values() for w in ws}) == 2  # and the groups were spread


async def test_one_shard_builds_the_shared_summary_once(tmp_path: Path, server: OpenAITestServer) -> None:
    base = type(get_task("demo"))

    class OneMeeting(base):  # type: ignore[misc, valid-type]
        def case_group(self, case: Case) -> str | None:
            return "the-transcript"  # every case shares the one summary (ctx.once("summary"))

    await run(tmp_path / "r.duckdb", tmp_path / "c.duckdb", server.model_spec, remote(FakeBackend(workers=2)),
              task=OneMeeting(), mode="summary")
    with ResultStore(tmp_path / "r.duckdb") as store:
        assert store.query("SELECT count(*) FROM calls WHERE purpose = 'summary'") == [(1,)]


async def test_worker_cache_entries_travel_to_the_driver_and_seed_the_next_workers(
        tmp_path: Path, server: OpenAITestServer) -> None:
    cache = tmp_path / "c.duckdb"
    await run(tmp_path / "a.duckdb", cache, server.model_spec, remote(FakeBackend(workers=2)))
    with ResultStore(tmp_path / "a.duckdb") as store:
        (made,), = store.query("SELECT count(*) FROM calls WHERE NOT cache_hit AND error IS NULL")
    merged = CallCache(cache)
    try:
        assert len(merged) == made > 0
        assert all(e[4] for e in merged.entries())  # request JSON kept, as for a local call
    finally:
        merged.close()
    served = server.stats.answers.total()
    # A replay anywhere is free: in-process from the merged cache, and on fresh workers seeded from it.
    local = await run(tmp_path / "b.duckdb", cache, server.model_spec)
    seeded = FakeBackend(workers=2)
    far = await run(tmp_path / "c.duckdb", cache, server.model_spec, remote(seeded))
    assert server.stats.answers.total() == served
    assert len(seeded.seed) == made and all(e[4] is None for e in seeded.seed)  # answers only
    for db in ("b.duckdb", "c.duckdb"):
        with ResultStore(tmp_path / db) as store:
            assert store.query("SELECT bool_and(cache_hit), count(*) FROM calls") == [(True, made)]
    assert local.ok == far.ok == 6
    assert stored(tmp_path / "c.duckdb") == stored(tmp_path / "a.duckdb")


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="workers must be >= 1"):
        RemoteExecutor(FakeBackend(), workers=0)


def run_cli(*argv: str) -> tuple[int, str, str]:
    import io
    import sys

    from agentlab.bench.cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        code = cli.main(list(argv), out=out)
    finally:
        sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def test_executor_flags_are_checked(tmp_path: Path, server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLAB_CACHE_DB", str(tmp_path / "cache.duckdb"))
    common = ("demo", "--model", server.model_spec, "--db", str(tmp_path / "r.duckdb"), "--no-progress")
    code, _, err = run_cli(*common, "--workers", "2")
    assert (code, err) == (2, "error: --workers needs --executor ray\n")
    code, _, err = run_cli(*common, "--ray-address", "auto")
    assert (code, err) == (2, "error: --ray-address needs --executor ray\n")
    code, _, err = run_cli(*common, "--executor", "ray", "--workers", "0")
    assert (code, err) == (2, "error: --workers must be >= 1, got 0\n")
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # Ray not installed
    code, _, err = run_cli(*common, "--executor", "ray")
    assert code == 2 and err.startswith("error: --executor ray needs Ray: pip install 'agentlab[ray]'")
    assert err.count("\n") == 1
    # The in-process executor is the default and finishes the run the failed Ray attempt started.
    code, out, _ = run_cli(*common)
    assert code == 0 and "6 ok, 0 failed this time" in out


async def test_a_group_runs_one_case_at_a_time_and_groups_run_together(
        tmp_path: Path, server: OpenAITestServer) -> None:
    base = type(get_task("demo"))
    in_flight: dict[str, int] = {}
    peak: dict[str, int] = {}
    overall = {"now": 0, "peak": 0}

    class Grouped(base):  # type: ignore[misc, valid-type]
        def case_group(self, case: Case) -> str | None:
            return str(int(case.data) % 2)

        async def run_case(self, case: Case, mode: str, ctx: Any) -> Any:
            group = self.case_group(case) or ""
            in_flight[group] = in_flight.get(group, 0) + 1
            peak[group] = max(peak.get(group, 0), in_flight[group])
            overall["now"] += 1
            overall["peak"] = max(overall["peak"], overall["now"])
            try:
                await asyncio.sleep(0.05)
                return await super().run_case(case, mode, ctx)
            finally:
                in_flight[group] -= 1
                overall["now"] -= 1

    summary = await run(tmp_path / "r.duckdb", tmp_path / "c.duckdb", server.model_spec,
                        remote(FakeBackend(workers=1), slots=4), task=Grouped())
    assert summary.ok == 6
    assert peak == {"0": 1, "1": 1}  # four slots, yet one case per group at a time
    assert overall["peak"] == 2  # the two groups ran side by side
