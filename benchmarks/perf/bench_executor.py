"""Cases per second and harness overhead of the in-process and Ray executors (prints figures; asserts nothing).

A one-call task (each case sends one short prompt and stores the answer) runs against the local
OpenAI-compatible test server (``agentlab.testing.openai_server``, in its own process) answering
every completion after ``--latency`` seconds (default 0.2). For each executor and each total
concurrency C (default 1, 8, 32) it runs ``--cases`` fresh cases (new results and cache files, so
every call reaches the server) through :func:`agentlab.bench.executor.run_task`, which stores
each case in DuckDB as a real run does, and prints:

* ``cases/s``      cases / wall time of the run (start-up included);
* ``ideal_s``      ceil(cases / C) x latency: the wall time if the harness cost nothing;
* ``overhead_s``   wall - ideal: the harness's time beyond the model's latency;
* ``ms/case``      overhead_s / cases;
* ``startup_s``    (Ray) from the run's start until its workers reported ready — actor start,
                   imports, model set-up; the Ray instance itself is started once beforehand
                   (its start-up, ``ray.init``, is printed once);
* ``after_startup cases/s``  cases / (wall - startup_s): the rate once the workers are up.

With Ray, C cases in flight = ``workers`` actors x ``slots`` each (C=1: 1 x 1; otherwise 2
workers x C/2 slots). On one small machine the driver, the Ray workers and the test server share
the same cores, so Ray here measures the executor's overhead, not a speed-up. Run::

    .venv/bin/python benchmarks/perf/bench_executor.py [--cases 64] [--latency 0.2]
        [--concurrency 1,8,32] [--executors in-process,ray]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentlab.bench import executor
from agentlab.bench.config import Settings
from agentlab.bench.store import ResultStore
from agentlab.bench.tasks import Case, CaseResult, CaseSelection, RunContext, Task
from agentlab.events import Message
from agentlab.model.base import GenerationConfig, ModelRequest
from agentlab.model.cache import CallCache


class OneCallTask(Task):
    """Each case is one short completion: the model's latency is the case's whole necessary cost."""

    name = "perf-one-call"
    version = "1"
    modes = ("answer",)
    default_mode = "answer"

    def __init__(self, cases: int, tag: str) -> None:
        self.n = cases
        self.tag = tag  # makes every run's prompts new, so nothing is answered from a cache

    def load_cases(self, settings: Settings) -> CaseSelection:
        cases = [Case(id=f"c{i:04d}", question=f"[{self.tag}] Item {i} is blue. What colour is item {i}?",
                      reference="blue") for i in range(self.n)]
        return CaseSelection(cases, dataset_sha256=f"perf-{self.tag}", loaded=self.n)

    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        request = ModelRequest([Message.user(case.question)], config=GenerationConfig(temperature=0.0, max_tokens=16),
                               purpose="answer")
        response = await ctx.model.generate(request)
        return CaseResult(prediction=response.message.content)


def start_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "agentlab.testing.openai_server", "--latency", str(latency)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "--model " not in line:
        proc.kill()
        raise SystemExit(f"the test server did not start: {line!r}")
    return proc, line.rsplit("--model ", 1)[1].strip()


async def direct_calls(spec: str, n: int = 7) -> float:
    """Median seconds of one completion through the model client alone (after one warm-up call)."""
    from agentlab.model.registry import get_model

    model = get_model(spec, cache=False)
    times = []
    for i in range(n + 1):
        request = ModelRequest([Message.user(f"Item {i} is red. What colour is item {i}?")],
                               config=GenerationConfig(temperature=0.0, max_tokens=16), purpose="answer")
        started = time.perf_counter()
        await model.generate(request)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def ray_executor(workers: int, slots: int) -> Any:
    from agentlab.bench.distributed import RayBackend, RemoteExecutor

    class ReadyClock(RayBackend):
        ready_at: float | None = None

        async def ready(self, handles: Any) -> list[str]:
            described = await super().ready(handles)
            self.ready_at = time.perf_counter()
            return described

    backend = ReadyClock(None)
    return RemoteExecutor(backend, workers=workers, slots=slots, name="ray"), backend


async def one_run(kind: str, concurrency: int, cases: int, spec: str, folder: Path) -> dict[str, Any]:
    tag = f"{kind}-{concurrency}-{time.time_ns()}"
    task = OneCallTask(cases, tag)
    request = executor.RunRequest(benchmark=task.name, mode="answer", model_spec=spec, settings=Settings({}),
                                  concurrency=concurrency, progress=False)
    backend = None
    if kind == "ray":
        workers, slots = (1, 1) if concurrency == 1 else (2, max(1, concurrency // 2))
        chosen, backend = ray_executor(workers, slots)
        in_flight = workers * slots
    else:
        chosen, in_flight = executor.InProcessExecutor(), concurrency
    cache = CallCache(folder / f"{tag}-cache.duckdb")
    model, judge = executor.build_models(request, cache=cache)
    with ResultStore(folder / f"{tag}.duckdb") as store:
        started = time.perf_counter()
        summary = await executor.run_task(task, request, model=model, store=store, judge=judge, executor=chosen)
        wall = time.perf_counter() - started
    cache.close()
    if summary.ok != cases:
        raise SystemExit(f"{kind} at concurrency {concurrency}: {summary.ok} of {cases} cases ok ({summary.errors})")
    return {"wall": wall, "in_flight": in_flight,
            "startup": (backend.ready_at - started) if backend is not None and backend.ready_at else None}


async def measure(args: argparse.Namespace, spec: str, levels: list[int], kinds: list[str]) -> None:
    """Everything in one event loop (model clients belong to the loop that made them)."""
    direct = await direct_calls(spec)
    with tempfile.TemporaryDirectory() as tmp:
        await one_run("in-process", 2, 4, spec, Path(tmp))  # warm-up (imports, the server's tokenizer): not shown
    print(f"{args.cases} one-call cases per run, test server latency {args.latency * 1000:.0f} ms, "
          f"{os.cpu_count()} CPUs; one call from a bare client (no harness): median {direct * 1000:.0f} ms "
          "(latency + HTTP + the server's own work)\n")
    print(f"{'executor':<11} {'C':>3} {'in flight':>9} {'wall_s':>7} {'cases/s':>8} {'ideal_s':>8} "
          f"{'overhead_s':>10} {'ms/case':>8} {'startup_s':>9} {'after_startup cases/s':>21}")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            for c in levels:
                r = await one_run(kind, c, args.cases, spec, Path(tmp))
                ideal = math.ceil(args.cases / r["in_flight"]) * args.latency
                overhead = r["wall"] - ideal
                startup = f"{r['startup']:.2f}" if r["startup"] is not None else "-"
                steady = args.cases / (r["wall"] - (r["startup"] or 0.0))
                print(f"{kind:<11} {c:>3} {r['in_flight']:>9} {r['wall']:>7.2f} {args.cases / r['wall']:>8.2f} "
                      f"{ideal:>8.2f} {overhead:>10.2f} {overhead / args.cases * 1000:>8.1f} {startup:>9} "
                      f"{steady:>21.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.2, help="test server seconds per completion")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--executors", default="in-process,ray")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    kinds = [k.strip() for k in args.executors.split(",")]
    server, spec = start_server(args.latency)
    try:
        if "ray" in kinds:
            import ray

            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            t0 = time.perf_counter()
            ray.init(address="local", num_cpus=max(2, os.cpu_count() or 1), include_dashboard=False, logging_level="ERROR",
                     object_store_memory=256 * 1024 * 1024)
            print(f"ray.init: {time.perf_counter() - t0:.2f} s (once, not in the figures below)")
        asyncio.run(measure(args, spec, levels, kinds))
    finally:
        server.terminate()
        server.wait(timeout=10)
        if "ray" in kinds:
            import ray

            ray.shutdown()


if __name__ == "__main__":
    main()
