"""A task's synchronous entry points work inside a running event loop (a Jupyter cell runs in one)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from pathlib import Path

import pytest

from agentlab.bench.config import apply_overrides, load_settings
from agentlab.bench.datasets.longmemeval import write_longmemeval_fixture
from agentlab.bench.running import executor
from agentlab.bench.running.loops import run_sync
from agentlab.bench.tasks import get_task

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")
LOCOMO = (Path(os.environ.get("AGENTLAB_DATA_DIR", "data/cache")) / "locomo").exists()


async def _where() -> tuple[str, str]:
    await asyncio.sleep(0)
    return threading.current_thread().name, MARK.get()


def test_without_a_running_loop_the_coroutine_runs_here() -> None:
    MARK.set("outside")
    assert run_sync(_where()) == (threading.current_thread().name, "outside")


async def test_inside_a_running_loop_it_runs_in_a_worker_thread_with_the_callers_context() -> None:
    MARK.set("inside")
    with pytest.raises(RuntimeError, match="running event loop"):  # what the task methods used to call
        coro = _where()
        try:
            asyncio.run(coro)
        finally:
            coro.close()
    thread, mark = run_sync(_where())
    assert thread.startswith("agentlab-run-sync") and mark == "inside"


async def test_longmemeval_retrieval_only_inside_a_running_loop(tmp_path: Path) -> None:
    path = write_longmemeval_fixture(tmp_path / "lme.json", 4, question_types=["single-session-user"])
    task = get_task("longmemeval")
    settings = apply_overrides(load_settings("longmemeval", task.default_settings()), [f"dataset.path={path}"])
    cases = list(task.load_cases(settings).cases)
    out = task.retrieval_only(cases, "recall", settings)
    assert (out["questions"], out["with_evidence"], out["recall@10"]) == (4, 4, 1.0)


@pytest.mark.skipif(not LOCOMO, reason="needs the LoCoMo data under $AGENTLAB_DATA_DIR")
async def test_locomo_retrieval_only_and_dry_run_inside_a_running_loop() -> None:
    task = get_task("locomo")
    settings = load_settings("locomo", task.default_settings())
    selection = task.load_cases(settings)
    cases = list(selection.cases)[:3]
    out = task.retrieval_only(cases, "session_recall", settings)
    assert out["questions"] == 3
    dry = executor.dry_run(task, "session_recall", settings, limit=3, selection=selection)
    assert dry["cases"] == 3 and dry["min_prompt_tokens"] > 0
