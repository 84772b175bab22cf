from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import bench_demo_task as demo
import pytest

from agentlab.bench.config import load_settings
from agentlab.bench.running import executor
from agentlab.bench.scoring.judge import Judge
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import RunContext, get_task
from agentlab.model import tokens

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture(autouse=True)
def _reset_demo() -> Iterator[None]:
    demo.reset()
    yield
    demo.reset()


def request(mode: str = "long_context", **kw: object) -> executor.RunRequest:
    task = get_task("demo")
    settings = load_settings("demo", task.default_settings())
    defaults: dict[str, object] = {"benchmark": "demo", "mode": mode, "model_spec": "scripted",
                                   "settings": settings, "judge_spec": "scripted", "concurrency": 2,
                                   "progress": False}
    defaults.update(kw)
    return executor.RunRequest(**defaults)  # type: ignore[arg-type]


async def run(store: ResultStore, mode: str = "long_context", **kw: object) -> executor.RunSummary:
    model = demo.scripted_model()
    return await executor.run_task(get_task("demo"), request(mode, **kw), model=model, store=store,
                                   judge=Judge(model, "scripted"))


def counts(store: ResultStore, run_id: str) -> tuple[int, int, int]:
    (total, distinct, ok), = store.query(
        "SELECT count(*), count(DISTINCT case_id), count(*) FILTER (WHERE status = 'ok') FROM cases WHERE run_id = ?",
        [run_id])
    return total, distinct, ok


async def test_run_stores_cases_calls_scores_and_resumes(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        first = await run(store, "recall")
        assert (first.status, first.selected, first.ok, first.failed) == ("finished", 6, 6, 0)
        assert counts(store, first.run_id) == (6, 6, 6)
        purposes = dict(store.query("SELECT purpose, count(*) FROM calls WHERE run_id = ? GROUP BY purpose",
                                    [first.run_id]))
        # One answer and one judge call per case; the summary is built once per run (ctx.once).
        assert purposes == {"answer": 6, "judge": 6, "summary": 1}
        metrics = {r[0] for r in store.query("SELECT DISTINCT metric FROM scores WHERE run_id = ?", [first.run_id])}
        assert {"rougeL", "f1", "bleu1", "exact_match", "llm_score"} <= metrics
        assert store.query("SELECT count(*) FROM compactions WHERE run_id = ?", [first.run_id]) == [(6,)]
        assert store.run_status(first.run_id) == "finished"
        assert first.prompt_tokens > 0

        again = await run(store, "recall")
        assert again.run_id == first.run_id
        assert (again.already_done, again.attempted) == (6, 0)
        # A different setting is a different run.
        other = await run(store, "recall", limit=2, settings=request().settings.with_values("answer", max_tokens=16))
        assert other.run_id != first.run_id and other.selected == 2


async def test_limit_and_concurrency_do_not_change_the_run_id(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        small = await run(store, limit=2)
        full = await run(store, settings=request().settings.with_values("run", concurrency=7))
        assert small.run_id == full.run_id
        assert (full.already_done, full.attempted) == (2, 4)
        assert counts(store, full.run_id) == (6, 6, 6)


async def test_failed_case_is_stored_counted_and_retried(tmp_path: Path) -> None:
    demo.FAIL_IDS.add("d03")
    with ResultStore(tmp_path / "r.duckdb") as store:
        first = await run(store)
        assert (first.ok, first.failed, first.errors) == (5, 1, {"context_length": 1})
        row = store.query("SELECT status, error_code, error FROM cases WHERE run_id = ? AND case_id = 'd03'",
                          [first.run_id])[0]
        assert row[0] == "failed" and row[1] == "context_length" and "exceeds the window" in row[2]
        # The failed call itself is recorded, with its error.
        assert store.query("SELECT count(*) FROM calls WHERE run_id = ? AND case_id = 'd03' AND error IS NOT NULL",
                           [first.run_id]) == [(1,)]
        assert store.query("SELECT count(*) FROM scores WHERE run_id = ? AND case_id = 'd03'", [first.run_id]) == [(0,)]
        demo.FAIL_IDS.clear()
        second = await run(store)
        assert (second.already_done, second.attempted, second.ok) == (5, 1, 1)
        assert counts(store, first.run_id) == (6, 6, 6)
        assert store.query("SELECT count(*) FROM calls WHERE run_id = ? AND case_id = 'd03'", [first.run_id]) == [(2,)]


def test_keyboard_interrupt_keeps_finished_cases_then_resume_completes(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    demo.INTERRUPT_AFTER = 3
    with ResultStore(db) as store:
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(run(store, concurrency=1))
        (run_id,), = store.query("SELECT run_id FROM runs")
        assert store.run_status(run_id) == "interrupted"
        assert counts(store, run_id) == (3, 3, 3)
        demo.reset()
        resumed = asyncio.run(run(store, concurrency=1))
        assert resumed.run_id == run_id
        assert (resumed.already_done, resumed.attempted) == (3, 3)
        assert counts(store, run_id) == (6, 6, 6)
        assert store.query("SELECT count(*), count(DISTINCT case_id || purpose) FROM calls WHERE run_id = ?",
                           [run_id]) == [(12, 12)]
        assert store.run_status(run_id) == "finished"


async def test_cancellation_marks_run_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_DEMO_SLEEP", "0.05")
    # It cancels once two cases are in the file: every case written as it finishes, as a slow run's are
    # (the write cadence itself is tests/bench/test_group_commit.py's).
    monkeypatch.setattr(executor, "GROUP_COMMIT_SECONDS", 0.0)
    with ResultStore(tmp_path / "r.duckdb") as store:
        job = asyncio.create_task(run(store, concurrency=1))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if store.query("SELECT count(*) FROM cases")[0][0] >= 2:
                break
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        (run_id, status), = store.query("SELECT run_id, status FROM runs")
        stored = counts(store, run_id)[0]
        assert status == "interrupted" and 2 <= stored < 6


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_in_a_subprocess_then_rerun_completes_only_missing(tmp_path: Path, sig: signal.Signals) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    db = tmp_path / "r.duckdb"
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "AGENTLAB_EXTENSIONS": "bench_demo_task", "BENCH_DEMO_SLEEP": "0.25",
           "BENCH_DEMO_MARKERS": str(markers)}
    script = ("import bench_demo_task as d; d.patch_models(); from agentlab.bench.cli.main import main; "
              "raise SystemExit(main())")
    cmd = [sys.executable, "-c", script, "demo", "--mode", "long_context", "--model", "openai:fake",
           "--limit", "0", "--concurrency", "1", "--db", str(db), "--no-progress", "--json"]
    # A shell without job control starts its background commands with SIGINT ignored, and the
    # child would inherit that (a run under `nohup ... &` rightly keeps ignoring ^C): give the
    # child SIGINT's default, as a terminal's foreground command has it.
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    deadline = time.time() + 30
    while len(list(markers.iterdir())) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Rerun the same command" in err
    with ResultStore(db) as store:
        (run_id, status), = store.query("SELECT run_id, status FROM runs")
        first_stored = counts(store, run_id)[0]
    assert status == "interrupted" and 2 <= first_stored < 6

    done = subprocess.run(cmd, cwd=tmp_path, env={**env, "BENCH_DEMO_SLEEP": "0"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["run_id"] == run_id
    assert (result["already_done"], result["attempted"]) == (first_stored, 6 - first_stored)
    with ResultStore(db) as store:
        assert counts(store, run_id) == (6, 6, 6)
        assert store.run_status(run_id) == "finished"


def test_dry_run_counts_every_prompt_without_a_model() -> None:
    task = get_task("demo")
    settings = load_settings("demo", task.default_settings())
    result = executor.dry_run(task, "long_context", settings, limit=3)
    selection = task.load_cases(settings)
    expected = [tokens.count_messages(task.prompts(c, "long_context", settings, "")) for c in selection.cases[:3]]
    assert result["cases"] == 3 and result["loaded"] == 6 and result["prompts"] == 3
    assert result["avg_prompt_tokens"] == pytest.approx(sum(expected) / 3)
    assert result["max_prompt_tokens"] == max(expected)
    with pytest.raises(ValueError, match="unknown mode"):
        executor.dry_run(task, "nope", settings)


async def test_run_context_once_runs_the_factory_once() -> None:
    task = get_task("demo")
    ctx = RunContext(benchmark="demo", mode="summary", model=demo.scripted_model(),
                     settings=load_settings("demo", task.default_settings()))
    calls = 0

    async def factory() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return 42

    assert await asyncio.gather(*(ctx.once("k", factory) for _ in range(5))) == [42] * 5
    assert calls == 1


def test_check_window_fails_before_sending_and_records_the_need() -> None:
    from types import SimpleNamespace

    from agentlab.bench.tasks import CaseError, check_window
    from agentlab.events import Message
    from agentlab.model.base import ModelInfo

    ctx = SimpleNamespace(model=SimpleNamespace(info=ModelInfo(name="tiny", context_window=100)))
    short = [Message.user("What was decided?")]
    assert check_window(short, ctx) == tokens.count_messages(short)
    long = [Message.user("word " * 300)]
    with pytest.raises(CaseError) as info:
        check_window(long, ctx)
    assert info.value.code == "context_length" and "100-token window" in str(info.value)
    assert info.value.metadata == {"prompt_tokens_needed": tokens.count_messages(long)}
    # Within the 10 % slack the real call decides.
    edge = [Message.user("word " * 95)]
    assert 100 < tokens.count_messages(edge) <= 110 and check_window(edge, ctx) == tokens.count_messages(edge)


async def test_a_case_error_stores_its_metadata_with_the_failed_case(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlab.bench.tasks import CaseError

    original = demo.DemoTask.run_case

    async def run_case(self, case, mode, ctx):  # type: ignore[no-untyped-def]
        if case.id == "d02":
            raise CaseError("too long", code="context_length", metadata={"prompt_tokens_needed": 12345})
        return await original(self, case, mode, ctx)

    monkeypatch.setattr(demo.DemoTask, "run_case", run_case)
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run(store)
        [(status, code, metadata)] = store.query(
            "SELECT status, error_code, metadata FROM cases WHERE run_id = ? AND case_id = 'd02'", [summary.run_id])
    assert (status, code) == ("failed", "context_length")
    assert json.loads(metadata)["prompt_tokens_needed"] == 12345


def test_a_refused_prompt_keeps_its_need_however_the_refusal_arrives() -> None:
    from agentlab.bench.tasks import CaseError, context_length_need
    from agentlab.model.base import ContextLengthError

    with pytest.raises(CaseError) as refused:
        with context_length_need(9000):
            raise ContextLengthError("8192 < 9100")
    assert refused.value.code == "context_length" and refused.value.metadata == {"prompt_tokens_needed": 9000}
    with pytest.raises(CaseError) as ended:  # a run that ended in the model's refusal (collect_run)
        with context_length_need(9000):
            raise CaseError("run ended in an error", code="context_length")
    assert ended.value.metadata == {"prompt_tokens_needed": 9000}
    with pytest.raises(CaseError) as other:
        with context_length_need(9000):
            raise CaseError("bad tool", code="tool_error")
    assert other.value.metadata == {}
    with pytest.raises(ContextLengthError):  # no estimate (not a long-context mode): untouched
        with context_length_need(None):
            raise ContextLengthError("x")


def test_run_summary_separates_replayed_server_cached_and_processed_prompt_tokens() -> None:
    from agentlab.bench.running.executor import RunSummary
    from agentlab.events import Usage
    from agentlab.model.base import CallRecord

    summary = RunSummary("r", "running", 1, 0)
    summary.add_calls([
        CallRecord("m", "answer", Usage(7000, 100, 0), 1.0, cache_hit=False),      # first long prompt
        CallRecord("m", "answer", Usage(7010, 100, 6990), 1.0, cache_hit=False),   # same prefix, new question
        CallRecord("m", "judge", Usage(500, 40, 480), 1.0, cache_hit=True),        # replayed: nothing processed
    ])
    assert (summary.prompt_tokens, summary.completion_tokens) == (14510, 240)
    assert (summary.replayed_prompt_tokens, summary.server_cached_prompt_tokens) == (500, 6990)
    assert summary.processed_prompt_tokens == 7020
    assert summary.to_dict()["processed_prompt_tokens"] == 7020


def test_model_prompt_counter_prefers_the_models_own_tokenizer_through_the_call_cache() -> None:
    from agentlab.bench.running.selection import model_prompt_counter
    from agentlab.events import Message
    from agentlab.model.cache import CachedModel, CallCache
    from agentlab.model.scripted import ScriptedModel

    class Counting(ScriptedModel):
        def count_prompt_tokens(self, messages: object) -> int:
            return 42

    counter, how = model_prompt_counter(CachedModel(Counting(), CallCache(None)))
    assert counter([Message.user("hi")]) == 42 and how == "the model's tokenizer"
    counter, how = model_prompt_counter(ScriptedModel())
    assert counter([Message.user("hello there")]) > 0 and "estimate" in how


async def test_a_case_failing_in_scoring_keeps_its_answer_and_metadata(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlab.model import ModelUnavailable

    original = demo.DemoTask.score

    async def score(self, case, result, ctx):  # type: ignore[no-untyped-def]
        if case.id == "d03":
            raise ModelUnavailable("judge server down")
        return await original(self, case, result, ctx)

    monkeypatch.setattr(demo.DemoTask, "score", score)
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run(store)
        [(status, prediction, metadata)] = store.query(
            "SELECT status, prediction, metadata FROM cases WHERE run_id = ? AND case_id = 'd03'", [summary.run_id])
    assert status == "failed" and prediction  # the answer that was given is stored with the failure
    assert "summary_chars" in json.loads(metadata)  # run_case's metadata too
