"""Issue 34, "resolve once": each command looks its task up once and each arm once.

``run``, ``--dry-run``, ``league``, ``retention`` and ``sweep`` are run in-process on the toy QMSum
meeting of ``test_toy_arm`` (``load_cases`` replaced) and, where a model is needed, the local
OpenAI-compatible test server. Around each command every entry of
:func:`agentlab.bench.tasks.get_task` (wherever a module imported it) and every arm lookup
(:func:`agentlab.policies.arms.get_arm`, which ``Task.arm`` and the retention registry views call) is
counted: the task must be looked up once, and each arm once per (task, arm name).
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import run_cli
from test_toy_arm import TOY, qmsum_selection

from agentlab.bench import tasks as tasks_mod
from agentlab.bench.config import load_settings
from agentlab.bench.running.identity import RunRequest
from agentlab.bench.running.remote import CaseWorker
from agentlab.bench.tasks import CaseSelection, get_task
from agentlab.policies import arms
from agentlab.testing.openai_server import OpenAITestServer

NO_JUDGE = ("--set", "judge.enabled=false")


class Lookups:
    """Counts of ``get_task(name)`` and ``get_arm(name, task)`` calls while installed."""

    def __init__(self) -> None:
        self.tasks: Counter[str] = Counter()
        self.arms: Counter[tuple[str | None, str]] = Counter()

    def reset(self) -> None:
        self.tasks.clear()
        self.arms.clear()

    def repeated_arms(self) -> dict[tuple[str | None, str], int]:
        return {key: n for key, n in self.arms.items() if n != 1}


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Lookups]:
    """Counting wrappers of ``get_task`` (in every module that bound it) and ``arms.get_arm``; toy data."""
    seen = Lookups()
    original_task, original_arm = tasks_mod.get_task, arms.get_arm

    def counting_task(name: str) -> tasks_mod.Task:
        seen.tasks[name] += 1
        return original_task(name)

    def counting_arm(name: str, task: object = None) -> arms.Arm:
        seen.arms[(getattr(task, "name", None), name)] += 1
        return original_arm(name, task)

    import agentlab.bench.cli.league  # noqa: F401  (loaded before patching, so its imports are patched too)
    import agentlab.bench.cli.retention  # noqa: F401
    import agentlab.bench.league.play  # noqa: F401

    for module in list(sys.modules.values()):
        if module is not None and getattr(module, "__name__", "").startswith("agentlab") \
                and getattr(module, "get_task", None) is original_task:
            monkeypatch.setattr(module, "get_task", counting_task)
    monkeypatch.setattr(arms, "get_arm", counting_arm)
    arms.register_arm(TOY, replace=True)
    monkeypatch.setenv("AGENTLAB_CACHE_DB", str(tmp_path / "calls.duckdb"))
    monkeypatch.setattr(type(original_task("qmsum")), "load_cases",
                        lambda self, settings: CaseSelection(qmsum_selection().cases, "toy", loaded=2))
    yield seen
    arms.ARMS.pop(TOY.name, None)


def test_a_run_with_its_baselines_looks_the_task_and_each_arm_up_once(lookups: Lookups, tmp_path: Path) -> None:
    with OpenAITestServer(context_window=32_768) as server:
        lookups.reset()
        code, out, err = run_cli("qmsum", "--arm", "toy_keep_last+recall", "--model", server.model_spec,
                                 "--db", str(tmp_path / "r.duckdb"), "--json", "--no-progress", *NO_JUDGE)
    assert code == 0, err
    assert [r["mode"] for r in json.loads(out)["runs"]] == ["long_context", "toy_keep_last", "toy_keep_last+recall"]
    assert lookups.tasks == {"qmsum": 1}
    assert set(lookups.arms) == {("qmsum", "long_context"), ("qmsum", "toy_keep_last"),
                                 ("qmsum", "toy_keep_last+recall")}
    assert lookups.repeated_arms() == {}


def test_a_dry_run_looks_the_arm_up_once_not_once_per_case(lookups: Lookups) -> None:
    code, out, err = run_cli("qmsum", "--arm", "toy_keep_last", "--dry-run", "--json", "--context-budget", "4096")
    assert code == 0, err
    assert json.loads(out)["cases"] == 2
    assert lookups.tasks == {"qmsum": 1}
    assert lookups.arms == {("qmsum", "toy_keep_last"): 1}


def test_a_league_looks_the_task_and_each_arm_up_once(lookups: Lookups, tmp_path: Path) -> None:
    with OpenAITestServer(context_window=32_768) as server:
        lookups.reset()
        code, out, err = run_cli("league", "qmsum", "--arms", "toy_keep_last,summary,recall", "--recall",
                                 "--model", server.model_spec, "--db", str(tmp_path / "r.duckdb"), "--json",
                                 "--no-progress", *NO_JUDGE)
    assert code == 0, err
    assert [a["arm"] for a in json.loads(out)["arms"]] == ["toy_keep_last", "toy_keep_last+recall", "summary", "recall"]
    assert lookups.tasks == {"qmsum": 1}
    assert {name for _, name in lookups.arms} >= {"long_context", "toy_keep_last", "toy_keep_last+recall", "summary",
                                                  "recall"}
    assert lookups.repeated_arms() == {}


def test_league_all_looks_each_candidate_arm_up_once(lookups: Lookups, tmp_path: Path) -> None:
    # "all" asks the task about every registered lossy arm; the chosen ones are not looked up again.
    with OpenAITestServer(context_window=32_768) as server:
        lookups.reset()
        code, _, err = run_cli("league", "qmsum", "--arms", "all", "--model", server.model_spec, "--limit", "1",
                               "--db", str(tmp_path / "r.duckdb"), "--json", "--no-progress", "--no-evidence",
                               *NO_JUDGE)
    assert code == 0, err
    assert lookups.tasks == {"qmsum": 1}
    assert len(lookups.arms) > 10 and lookups.repeated_arms() == {}


def test_retention_looks_the_task_and_each_arm_up_once(lookups: Lookups, tmp_path: Path) -> None:
    code, out, err = run_cli("retention", "qmsum", "--arms", "long_context,compaction,toy_keep_last,rolling_summary",
                             "--json", "--no-store", "--db", str(tmp_path / "r.duckdb"))
    assert code == 0, err
    payload = json.loads(out)
    assert [s["arm"] for s in payload["summaries"]] == ["long_context", "compaction", "toy_keep_last"]
    assert list(payload["skipped"]) == ["rolling_summary"]
    assert lookups.tasks == {"qmsum": 1}
    assert lookups.arms[(None, "compaction")] == 1 and lookups.repeated_arms() == {}


def test_a_sweep_looks_the_task_and_the_arm_up_once_for_all_its_points(lookups: Lookups, tmp_path: Path) -> None:
    with OpenAITestServer(context_window=32_768) as server:
        lookups.reset()
        code, out, err = run_cli("sweep", "qmsum", "--mode", "toy_keep_last", "--grid", "answer.max_tokens=64,96",
                                 "--model", server.model_spec, "--db", str(tmp_path / "r.duckdb"), "--no-progress",
                                 *NO_JUDGE)
    assert code == 0, err
    assert out.count("qmsum/toy_keep_last variant") == 2 and "qmsum/long_context" in out
    assert lookups.tasks == {"qmsum": 1}
    assert set(lookups.arms) == {("qmsum", "long_context"), ("qmsum", "toy_keep_last")}
    assert lookups.repeated_arms() == {}


def test_an_unknown_arm_is_still_one_error_line(lookups: Lookups) -> None:
    for argv in (("qmsum", "--arm", "nosuch", "--dry-run"), ("league", "qmsum", "--arms", "nosuch"),
                 ("sweep", "qmsum", "--mode", "nosuch", "--grid", "answer.max_tokens=64")):
        code, _, err = run_cli(*argv)
        assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, (argv, err)
        assert "nosuch" in err and "Traceback" not in err


def test_a_task_instance_looks_an_arm_up_once_and_a_fresh_instance_again(lookups: Lookups) -> None:
    # get_task (what notebooks and the library entry points call) gives a fresh task, so what an
    # instance remembers lasts one command; an unknown name is not remembered.
    task = get_task("qmsum")
    assert task.arm("compaction") is task.arm("compaction") and task.has_arm("compaction")
    assert lookups.arms[("qmsum", "compaction")] == 1
    get_task("qmsum").arm("compaction")
    assert lookups.arms[("qmsum", "compaction")] == 2
    for _ in range(2):
        with pytest.raises(LookupError, match="nosuch"):
            task.arm("nosuch")
    assert lookups.arms[("qmsum", "nosuch")] == 2


def test_a_remote_worker_looks_its_arm_up_once_not_once_per_case(lookups: Lookups, monkeypatch: pytest.MonkeyPatch) -> None:
    # CaseWorker, what each Ray worker runs, driven in-process: each worker gets its own copy of the
    # task (as Ray unpickles one per worker) and runs every case of the toy meeting with its slots.
    asked: Counter[str] = Counter()
    original = tasks_mod.Task.arm

    def counting(self: tasks_mod.Task, name: str) -> arms.Arm:
        asked[name] += 1
        return original(self, name)

    monkeypatch.setattr(tasks_mod.Task, "arm", counting)
    cases = qmsum_selection().cases
    with OpenAITestServer(context_window=32_768) as server:
        task = get_task("qmsum")
        request = RunRequest(benchmark="qmsum", mode="toy_keep_last", model_spec=server.model_spec,
                             settings=load_settings("qmsum", task.default_settings()), progress=False)
        lookups.reset()

        async def run_workers() -> list[str]:
            workers = [CaseWorker(copy.deepcopy(task), request, "run-id", []) for _ in range(2)]
            outcomes = await asyncio.gather(*(w.run(i, c) for w in workers for i, c in enumerate(cases)))
            return [o.record.status for o in outcomes]

        statuses = asyncio.run(run_workers())
    assert len(cases) > 1 and statuses == ["ok"] * (2 * len(cases))
    assert asked == {"toy_keep_last": 2}  # once per worker, not once per case
    assert lookups.arms == {("qmsum", "toy_keep_last"): 2} and lookups.tasks == {}


def test_a_remote_worker_that_cannot_find_its_arm_still_starts_and_fails_each_case(lookups: Lookups) -> None:
    # As before the arm was looked up once per worker: every case is stored failed with the lookup's error.
    cases = qmsum_selection().cases
    with OpenAITestServer(context_window=32_768) as server:
        task = get_task("qmsum")
        request = RunRequest(benchmark="qmsum", mode="nosuch", model_spec=server.model_spec,
                             settings=load_settings("qmsum", task.default_settings()), progress=False)
        worker = CaseWorker(task, request, "run-id", [])
        records = [asyncio.run(worker.run(i, c)).record for i, c in enumerate(cases)]
    assert [r.status for r in records] == ["failed"] * len(cases)
    assert all(r.error_code == "UnknownArm" and "unknown mode 'nosuch'" in (r.error or "") for r in records)
