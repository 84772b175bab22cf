"""Cases per second and harness overhead of the in-process and Ray executors (prints figures; asserts nothing).

A one-call task (each case sends one short prompt and stores the answer) runs against the local
OpenAI-compatible test server (``agentlab.testing.openai_server``, in its own process) answering
every completion after ``--latency`` seconds (default 0.2). For each executor and each total
concurrency C (default 1, 8, 32) it runs ``--cases`` fresh cases (new results and cache files, so
every call reaches the server) through :func:`agentlab.bench.running.executor.run_task`, which stores
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

``--scenario mtbench101`` measures instead what a real run costs against the bare
``openai`` client: the MT-Bench-101 baseline (``--dialogues`` 400 dialogues of the published
selection, ``--concurrency`` 16, the same test server at ``--latency``) run as the command a user
types, ``python -m agentlab.bench mtbench101 --mode baseline --limit N --concurrency C --no-progress``
in a fresh process with a fresh results file and call cache, timed from the process's spawn to its
exit (so start-up, the dataset load, the window probe and the run summary are in it), against
``mtbench_bare_client.py``: only ``openai.AsyncOpenAI``, sending the same prompts with the same
generation settings in the same dependency structure (each dialogue's turns in order, each
prompt the user turns so far and the server's answers, C dialogues in flight). The bare client's
figure is its calls alone (first request to last answer: no interpreter start, no import), so the
ratio charges every second of the harness, start-up included. Each run's CPU (user + sys of its whole
process, from ``getrusage`` of the children) is printed too: on a loaded machine wall times stretch
with the load, CPU time much less. Per repeat (``--repeats``, default
3) the bare client and each checkout's harness (``--checkouts``, default this one; e.g.
``--checkouts .,../main`` for before/after in the same conditions) run one after the other, the
order rotating between repeats; it prints every run, the medians, the ratio and whether it meets
the goal, overhead <= 5 % start-up included::

    .venv/bin/python benchmarks/perf/bench_executor.py --scenario mtbench101 [--dialogues 400]
        [--concurrency 16] [--latency 0.2] [--repeats 3] [--checkouts .]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentlab.bench.config import Settings
from agentlab.bench.running import executor
from agentlab.bench.store.results import ResultStore
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
    from agentlab.bench.running.distributed import RayBackend, RemoteExecutor

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


# ----------------------------------------------------------- MT-Bench-101 baseline vs the bare client

#: The goal: a run costs at most this much more than the bare client, start-up included.
OVERHEAD_GOAL = 0.05
BARE_CLIENT = Path(__file__).resolve().parent / "mtbench_bare_client.py"


def write_dialogues(path: Path, n: int) -> tuple[int, int]:
    """The first ``n`` dialogues of the published selection, with the ``[answer]`` settings, for the
    bare client; returns (dialogues, turns).
    """
    from agentlab.bench.config import load_settings
    from agentlab.bench.tasks.mtbench101 import MTBench101Task, MTBenchAnswer

    task = MTBench101Task()
    settings = load_settings(task.name, task.default_settings())
    answer = settings.of("answer", MTBenchAnswer)
    if answer.instruction:
        raise SystemExit("the bare client sends no system message; the [answer] instruction is not empty")
    dialogues = [{"id": c.id, "turns": [t.user for t in c.data.turns]}
                 for c in executor.select(task.load_cases(settings), n)]
    path.write_text(json.dumps({"temperature": answer.temperature, "max_tokens": answer.max_tokens,
                                "dialogues": dialogues}), encoding="utf-8")
    return len(dialogues), sum(len(d["turns"]) for d in dialogues)


def bare_run(dialogues: Path, spec: str, concurrency: int) -> dict[str, Any]:
    """One run of the bare client in its own process: its JSON line, plus ``wall_s`` spawn to exit."""
    model, base_url = spec.removeprefix("openai:").split("@", 1)
    cpu = _children_cpu()
    started = time.perf_counter()
    out = subprocess.run([sys.executable, str(BARE_CLIENT), str(dialogues), base_url, model,
                          "--concurrency", str(concurrency)], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"the bare client failed:\n{out.stderr[-2000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "wall_s": wall, "cpu_s": _children_cpu() - cpu}


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children (a subprocess's CPU is the difference)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def harness_run(checkout: Path, spec: str, n: int, concurrency: int, folder: Path, tag: str) -> dict[str, Any]:
    """One ``python -m agentlab.bench mtbench101 --mode baseline`` of ``checkout``'s code, fresh files."""
    import duckdb

    db, cache = folder / f"{tag}.duckdb", folder / f"{tag}-cache.duckdb"
    env = {**os.environ, "PYTHONPATH": str(checkout), "AGENTLAB_CACHE_DB": str(cache)}
    command = [sys.executable, "-m", "agentlab.bench", "mtbench101", "--mode", "baseline", "--limit", str(n),
               "--concurrency", str(concurrency), "--model", spec, "--db", str(db), "--no-progress"]
    cpu = _children_cpu()
    spawned = time.time()
    started = time.perf_counter()
    out = subprocess.run(command, env=env, cwd=folder, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    cpu = _children_cpu() - cpu
    if out.returncode != 0:
        raise SystemExit(f"{checkout}: the run failed ({out.returncode}):\n{out.stderr[-2000:]}")
    con = duckdb.connect(str(db), read_only=True)
    try:
        run_started, run_finished, ok = con.execute(
            "SELECT r.started, r.finished, count(*) FILTER (WHERE c.status = 'ok') FROM runs r "
            "JOIN cases c USING (run_id) GROUP BY ALL").fetchone() or (None, None, 0)
        calls, hits, prompt, completion = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE cache_hit), sum(prompt_tokens), sum(completion_tokens) "
            "FROM calls").fetchone() or (0, 0, 0, 0)
    finally:
        con.close()
    if ok != n:
        raise SystemExit(f"{checkout}: {ok} of {n} dialogues ok")
    # runs.started/finished are local wall-clock times (store._ts): start-up is the spawn until the
    # run row is written (imports, settings, dataset, window probe); the rest is after the run ended.
    startup = run_started.timestamp() - spawned
    teardown = wall - (run_finished.timestamp() - spawned)
    return {"wall_s": wall, "startup_s": startup, "cases_s": wall - startup - teardown, "teardown_s": teardown,
            "calls": calls, "cache_hits": hits, "prompt_tokens": prompt, "completion_tokens": completion,
            "cpu_s": cpu}


def mtbench101_comparison(args: argparse.Namespace, spec: str) -> None:
    """The issue-20 figure: the MT-Bench-101 baseline's wall time over the bare client's, per checkout."""
    concurrency = int(args.concurrency or 16)
    checkouts = [Path(c).resolve() for c in args.checkouts.split(",")]
    arms = ["bare", *[str(c) for c in checkouts]]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        n, turns = write_dialogues(folder / "dialogues.json", args.dialogues)
        print(f"MT-Bench-101 baseline, {n} dialogues ({turns} turns = calls), concurrency {concurrency}, test server "
              f"latency {args.latency * 1000:.0f} ms, {os.cpu_count()} CPUs, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'repeat':>6} {'arm':<28} {'wall_s':>7} {'startup_s':>9} {'cases_s':>8} {'teardown_s':>10} "
              f"{'calls':>5} {'cached':>6} {'prompt_tok':>10} {'cpu_s':>6} {'load':>5}")
        results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
        bare_run(folder / "dialogues.json", spec, concurrency)  # warm-up (page cache, server): not shown
        for r in range(args.repeats):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            for arm in order:
                if arm == "bare":
                    row = bare_run(folder / "dialogues.json", spec, concurrency)
                    row["startup_s"], row["cases_s"] = row["import_s"], row["calls_s"]
                else:
                    row = harness_run(Path(arm), spec, n, concurrency, folder, f"run{r}-{len(results[arm])}-"
                                      f"{abs(hash(arm)) % 10_000}")
                row["load"] = os.getloadavg()[0]
                results[arm].append(row)
                name = "bare openai (calls only)" if arm == "bare" else arm[-28:]
                cached = row.get("cache_hits", "-")
                teardown = f"{row['teardown_s']:.2f}" if "teardown_s" in row else "-"
                shown_wall = row["calls_s"] if arm == "bare" else row["wall_s"]
                print(f"{r:>6} {name:<28} {shown_wall:>7.2f} {row['startup_s']:>9.2f} {row['cases_s']:>8.2f} "
                      f"{teardown:>10} {row['calls']:>5} {cached:>6} {row['prompt_tokens']:>10} {row['cpu_s']:>6.2f} "
                      f"{row['load']:>5.2f}",
                      flush=True)
    bare = statistics.median(r["calls_s"] for r in results["bare"])
    bare_process = statistics.median(r["wall_s"] for r in results["bare"])
    bare_cpu = statistics.median(r["cpu_s"] for r in results["bare"])
    print(f"\nbare openai client: median {bare:.2f} s for the calls ({turns} calls; its own process start and "
          f"import, not counted: median {statistics.median(r['wall_s'] - r['calls_s'] for r in results['bare']):.2f} s); "
          f"CPU of its whole process (user + sys, import included): median {bare_cpu:.2f} s")
    for arm in arms[1:]:
        rows = results[arm]
        wall = statistics.median(r["wall_s"] for r in rows)
        startup = statistics.median(r["startup_s"] for r in rows)
        cases = statistics.median(r["cases_s"] for r in rows)
        teardown = statistics.median(r["teardown_s"] for r in rows)
        overhead = wall / bare - 1
        verdict = "PASS" if overhead <= OVERHEAD_GOAL else "FAIL"
        print(f"{arm}: median wall {wall:.2f} s (start-up {startup:.2f} s, cases {cases:.2f} s, after the run "
              f"{teardown:.2f} s); ratio {wall / bare:.3f} = {overhead:+.1%} overhead incl. start-up "
              f"(cases alone {cases / bare - 1:+.1%}); goal <= {OVERHEAD_GOAL:.0%} overhead incl. start-up: {verdict}")
        print(f"{'':<{len(arm)}}  (against the bare client's whole process, its own start and import included: "
              f"ratio {wall / bare_process:.3f} = {wall / bare_process - 1:+.1%}; not what the goal is judged on)")
        cpu = statistics.median(r["cpu_s"] for r in rows)
        print(f"{'':<{len(arm)}}  CPU (user + sys of the whole process): median {cpu:.2f} s = {cpu / bare_cpu:.2f}x the "
              "bare client's whole process; wall times stretch with the machine's load, CPU much less")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("one-call", "mtbench101"), default="one-call",
                        help="one-call: the executor table; mtbench101: the baseline run vs the bare client")
    parser.add_argument("--cases", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.2, help="test server seconds per completion")
    parser.add_argument("--concurrency", help="one-call: levels, default 1,8,32; mtbench101: one level, default 16")
    parser.add_argument("--executors", default="in-process,ray")
    parser.add_argument("--dialogues", type=int, default=400, help="mtbench101: dialogues per run")
    parser.add_argument("--repeats", type=int, default=3, help="mtbench101: runs of each arm")
    parser.add_argument("--checkouts", default=str(Path(__file__).resolve().parents[2]),
                        help="mtbench101: comma-separated checkouts whose harness runs (PYTHONPATH of each run)")
    args = parser.parse_args()
    levels = [int(x) for x in (args.concurrency or "1,8,32").split(",")]
    kinds = [k.strip() for k in args.executors.split(",")]
    if args.scenario == "mtbench101":
        server, spec = start_server(args.latency)
        try:
            mtbench101_comparison(args, spec)
        finally:
            server.terminate()
            server.wait(timeout=10)
        return
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
