"""MT-Bench-101 task: baseline then summary on tiny dialogues, with hand-computed scores and tables."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentlab.bench.config import load_settings
from agentlab.bench.datasets.mtbench101 import Dialogue, DialogueTurn, MTBench101Data
from agentlab.bench.running import executor
from agentlab.bench.scoring.judge import Judge
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import CaseError, RunContext, get_task
from agentlab.bench.tasks import mtbench101 as mt
from agentlab.events import Message, Usage
from agentlab.model.base import ModelInfo, ModelRequest
from agentlab.model.cache import CachedModel, CallCache
from agentlab.model.scripted import ScriptedModel

SUMMARY_TEXT = "Earlier the user asked about Paris and Rome."

DIALOGUES = (
    # Three turns: the summary (after turn 2) replaces turns 1-2 in turn 3's request.
    Dialogue("CM", 1, (DialogueTurn("Tell me about Paris.", "Paris is big."),
                       DialogueTurn("And Rome?", "Rome is old."),
                       DialogueTurn("Which did I ask about first?", "Paris."))),
    Dialogue("SA", 2, (DialogueTurn("Is 7 prime?", "Yes."),
                       DialogueTurn("Are you sure?", "Yes, 7 is prime."))),
    Dialogue("AR", 3, (DialogueTurn("Hi", "Hello"),)),
)


@pytest.fixture(autouse=True)
def tiny_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mt, "load_mtbench101", lambda: MTBench101Data(DIALOGUES, "tiny-sha"))


def baseline_reply(request: ModelRequest) -> str:
    """Answers that cite the user's last message; the summary mode gets different ones."""
    if request.purpose == "summary":
        return SUMMARY_TEXT
    if request.purpose == "judge":
        return "Same facts.\nScore: 1.0" if "Paris" in request.messages[-1].content else "Different.\nScore: 0.0"
    last = request.messages[-1].content
    with_summary = any(SUMMARY_TEXT in m.content for m in request.messages if m.role == "system")
    if last.startswith("Which did I ask"):
        return "You asked about Rome." if with_summary else "You asked about Paris on 12 March."
    return f"Answer to: {last}"


def usage(request: ModelRequest, message: Message) -> Usage:
    """100 prompt tokens per message sent, 10 completion tokens: savings are easy to compute by hand."""
    return Usage(prompt_tokens=100 * len(request.messages), completion_tokens=10)


def model_with_cache(cache: CallCache) -> CachedModel:
    inner = ScriptedModel(info=ModelInfo("scripted", 8192), usage_fn=usage,
                          default_reply=baseline_reply)  # type: ignore[arg-type]
    return CachedModel(inner, cache)


async def run(mode: str, store: ResultStore, model: CachedModel) -> executor.RunSummary:
    task = get_task("mtbench101")
    request = executor.RunRequest(benchmark="mtbench101", mode=mode, model_spec="scripted",
                                  settings=load_settings("mtbench101", task.default_settings()),
                                  judge_spec="scripted", progress=False)
    return await executor.run_task(task, request, model=model, store=store, judge=Judge(model, "scripted"))


def scores(store: ResultStore, run_id: str, case_id: str) -> dict[str, tuple[float, str]]:
    rows = store.query("SELECT metric, value, detail FROM scores WHERE run_id = ? AND case_id = ?", [run_id, case_id])
    return {metric: (value, detail) for metric, value, detail in rows}


# ------------------------------------------------------------------------------- units


def test_reference_similarity_and_parsers() -> None:
    assert mt.reference_consistency(1.0) == 1.0
    assert mt.reference_consistency(0.0) == pytest.approx(0.4)  # the trajectory term's floor
    # words A = {paris, is, big}; B = paris is old (3 words, 2 common) -> 2 / (3 + 3 - 2)
    assert mt.word_jaccard("Paris is big", "paris is old") == pytest.approx(0.5)
    assert mt.word_jaccard("", "x") == 0.0 and mt.word_jaccard("same", "same") == 1.0
    assert mt.parse_retention_rate("RETENTION_RATE: 0.75\nMISSING: none") == 0.75
    assert mt.parse_retention_rate("RETENTION_RATE: 1.7") == 1.0
    assert mt.parse_retention_rate("no rate here") is None


def test_selection_is_the_published_nine_tasks_by_default() -> None:
    task = get_task("mtbench101")
    settings = load_settings("mtbench101", task.default_settings())
    assert [c.id for c in task.load_cases(settings).cases] == ["CM_0001", "SA_0002"]
    from agentlab.bench.config import apply_overrides

    other = apply_overrides(settings, ["dataset.tasks=AR"])
    assert [c.id for c in task.load_cases(other).cases] == ["AR_0003"]
    everything = apply_overrides(settings, ["dataset.tasks=ALL"])
    assert len(task.load_cases(everything).cases) == 3


def test_suitability_rule_is_applied_literally() -> None:
    rule = get_task("mtbench101").default_settings()["suitability"]
    assert mt.suitability(4.16, 4273, rule) == "enable"
    assert mt.suitability(3.99, 4404, rule) == "conditional"  # CM: just under 4 turns
    assert mt.suitability(2.0, 395, rule) == "disable"
    assert mt.suitability(3.0, 1912, rule) == "conditional"


# ---------------------------------------------------------------------------- pipeline


async def test_summary_before_baseline_fails_with_a_clear_error(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("summary", store, model_with_cache(CallCache(None)))
        rows = store.query("SELECT error_code, error FROM cases WHERE run_id = ?", [summary.run_id])
    assert summary.failed == 2
    assert {code for code, _ in rows} == {"baseline_missing"}
    assert all("--mode baseline" in error for _, error in rows)


async def test_baseline_then_summary_scores_and_tables(tmp_path: Path) -> None:
    cache = CallCache(None)
    with ResultStore(tmp_path / "r.duckdb") as store:
        base = await run("baseline", store, model_with_cache(cache))
        assert (base.ok, base.failed) == (2, 0)
        model = model_with_cache(cache)
        summ = await run("summary", store, model)
        assert (summ.ok, summ.failed) == (2, 0)

        meta = json.loads(store.query("SELECT metadata FROM cases WHERE run_id = ? AND case_id = 'CM_0001'",
                                      [summ.run_id])[0][0])
        # The executor hands the task its store, so the baseline's stored answers are found first.
        assert meta["baseline_source"] == "store"
        assert meta["baseline_answers"][-1] == "You asked about Paris on 12 March."
        assert meta["turn_answers"][-1] == "You asked about Rome."
        assert meta["turn_summary_chars"] == [0, len(SUMMARY_TEXT), len(SUMMARY_TEXT)]
        # Turn 3 of the summary mode: system (summary) + question only; 2 turns were summarised away.
        turn3 = [r for r in model.inner.requests if r.purpose == "answer"
                 and r.messages[-1].content.startswith("Which did I ask")][-1]
        assert [m.role for m in turn3.messages] == ["system", "user"]
        assert meta["turn_prompt_tokens"] == [100, 300, 200]

        got = scores(store, summ.run_id, "CM_0001")
        # Judge: turns 1 and 3 mention Paris (1.0), turn 2 does not (0.0) -> mean 2/3.
        assert got["consistency_judge"][0] == pytest.approx(2 / 3)
        assert got["consistency"][0] == pytest.approx(0.4 + 0.6 * 2 / 3)
        assert got["pass1"][0] == 1.0  # 0.8 >= 0.7
        assert json.loads(got["consistency_judge"][1].split("=", 1)[1]) == [1.0, 0.0, 1.0]
        # Retention: baseline turn 3 yields "12", "You", "Paris", "March"; the summary answer keeps "You".
        # Turns 1-2 are identical in both modes: "Answer", "Tell", "Paris" / "Answer", "And Rome"
        # (a run of capitalised words is one item).
        assert got["retention"][0] == pytest.approx((3 + 2 + 1) / (3 + 2 + 4))
        sa = scores(store, summ.run_id, "SA_0002")
        assert sa["consistency"][0] == pytest.approx(0.4) and sa["pass1"][0] == 0.0

        tables = get_task("mtbench101").report_tables(store)

    eff = tables["token_efficiency"].set_index("task")
    # CM: baseline prompts 100 + 300 + 500 = 900; summary 100 + 300 + 200 = 600; completions 3 x 10 both.
    assert eff.loc["CM", "prompt_savings"] == pytest.approx(300 / 900)
    assert eff.loc["CM", "token_savings"] == pytest.approx(300 / 930)
    # SA: two turns (100 + 300 prompt, 2 x 10 completion = 420) and no summary before turn 2, so no
    # savings; the summary made after turn 2 (a 2-message prompt: 200 + 10) is pure cost.
    assert eff.loc["SA", "token_savings"] == pytest.approx(0.0)
    assert eff.loc["SA", "token_savings_with_summary"] == pytest.approx((420 - 420 - 210) / 420)
    assert eff.loc["SA", "prompt_savings_with_summary"] == pytest.approx((400 - 400 - 200) / 400)
    assert eff.loc["ALL", "cases"] == 2
    assert eff.loc["ALL", "negative_rate"] == 0.0
    quality = tables["quality"].set_index("task")
    assert quality.loc["ALL", "consistency"] == pytest.approx((0.8 + 0.4) / 2)
    assert quality.loc["ALL", "pass1"] == 0.5
    turns = tables["turns"].set_index("task")
    assert turns.loc["CM", "3-turn"] == 1.0 and turns.loc["ALL", "avg_turns"] == 2.5


async def test_baseline_answers_come_from_the_store_when_the_harness_exposes_it(tmp_path: Path) -> None:
    cache = CallCache(None)
    task = get_task("mtbench101")
    with ResultStore(tmp_path / "r.duckdb") as store:
        await run("baseline", store, model_with_cache(cache))
        settings = load_settings("mtbench101", task.default_settings())
        case = task.load_cases(settings).cases[1]
        # A model without a cache: only the store can answer.
        ctx = RunContext(benchmark="mtbench101", mode="summary", model=ScriptedModel(), settings=settings,
                         model_spec="scripted")
        with pytest.raises(CaseError) as missing:
            await task.baseline_answers(case, ctx)
        assert missing.value.code == "baseline_missing"
        ctx.store = store
        answers, source = await task.baseline_answers(case, ctx)
    assert source == "store" and answers == ["Answer to: Is 7 prime?", "Answer to: Are you sure?"]


async def test_through_the_executor_a_model_without_the_cache_finds_the_baseline_in_the_store(
        tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        await run("baseline", store, model_with_cache(CallCache(None)))
        # A new, empty call cache: the baseline answers can only come from the store.
        summ = await run("summary", store, model_with_cache(CallCache(None)))
        assert (summ.ok, summ.failed) == (2, 0)
        sources = {json.loads(m)["baseline_source"] for (m,) in store.query(
            "SELECT metadata FROM cases WHERE run_id = ?", [summ.run_id])}
    assert sources == {"store"}


@pytest.mark.skipif(not os.environ.get("AGENTLAB_DATA_DIR"), reason="needs the shared MT-Bench-101 file")
def test_published_selection_has_917_dialogues(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlab.bench.datasets.mtbench101 import load_mtbench101

    monkeypatch.setattr(mt, "load_mtbench101", load_mtbench101)
    task = get_task("mtbench101")
    out = executor.dry_run(task, "baseline", load_settings("mtbench101", task.default_settings()))
    assert out["cases"] == 917 and out["prompts"] == 2838  # 3.09 turns per dialogue, as published


def test_quality_table_counts_a_failed_summary_case_as_zero(tmp_path: Path) -> None:
    """Per-task quality by hand: CM ok (consistency 0.8, retention 0.6), SA failed -> 0 everywhere."""
    from agentlab.bench.scoring.metrics import Score
    from agentlab.bench.store.results import CaseRecord, RunInfo
    from agentlab.model.base import CallRecord

    def answer_call() -> CallRecord:
        return CallRecord("scripted", "answer", Usage(100, 10), 1.0, False)

    meta = {"CM_0001": {"task": "CM", "n_turns": 3}, "SA_0002": {"task": "SA", "n_turns": 2}}
    with ResultStore(tmp_path / "r.duckdb") as store:
        for mode in ("baseline", "summary"):
            run_id = f"run-{mode}"
            store.start_run(RunInfo(run_id, "mtbench101", mode, {}, "scripted", "scripted", "sha", "v", "1"))
            for i, case_id in enumerate(meta):
                if mode == "summary" and case_id == "SA_0002":
                    store.write_case(CaseRecord(run_id, case_id, "failed", ordinal=i, error="judge down",
                                                error_code="model_error", metadata=meta[case_id]))
                    continue
                scores = [Score("consistency", 0.8, "j"), Score("pass1", 1.0, "j"), Score("retention", 0.6, "r"),
                          Score("word_jaccard", 0.5, "w")] if mode == "summary" else []
                store.write_case(CaseRecord(run_id, case_id, "ok", ordinal=i, metadata=meta[case_id],
                                            calls=[answer_call()], scores=scores))
        quality = get_task("mtbench101").report_tables(store)["quality"].set_index("task")
    assert quality.loc["CM", "consistency"] == pytest.approx(0.8) and quality.loc["CM", "failed"] == 0
    assert (quality.loc["SA", "cases"], quality.loc["SA", "failed"]) == (1, 1)
    assert quality.loc["SA", "consistency"] == 0.0 and quality.loc["SA", "retention"] == 0.0
    assert quality.loc["ALL", "consistency"] == pytest.approx(0.4)
    assert quality.loc["ALL", "pass1"] == pytest.approx(0.5)
    assert quality.loc["ALL", "retention"] == pytest.approx(0.3)


# ------------------------------------------------------------- a second lossy policy and its recall


def test_a_generic_lossy_arm_and_its_recall_get_a_recovery_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``mtbench101 --arm inspect_trim+recall``: baseline, inspect_trim, then its recall; the report pairs them.

    The baseline is scored against itself (the rule-based metrics, no judge call), so each of them
    has the baseline value a recovery triple needs.
    """
    from cli_helpers import run_cli

    import agentlab.model.registry as registry

    model = ScriptedModel(info=ModelInfo("scripted", 8192), usage_fn=usage,
                          default_reply=baseline_reply)  # type: ignore[arg-type]
    monkeypatch.setattr(registry, "get_model", lambda spec=None, **_: model)
    monkeypatch.setenv("AGENTLAB_CACHE_DB", str(tmp_path / "calls.duckdb"))
    db = str(tmp_path / "r.duckdb")
    code, _, err = run_cli("mtbench101", "--arm", "inspect_trim+recall", "--limit", "2", "--db", db, "--no-progress")
    assert code == 0, err
    code, out, err = run_cli("report", "mtbench101", "--db", db, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert {r["mode"] for r in report["runs"]} == {"baseline", "inspect_trim", "inspect_trim+recall"}
    rows = {(r["lossy_mode"], r["recovered_mode"], r["metric"]): r for r in report["recovery"]}
    assert set(rows) == {("inspect_trim", "inspect_trim+recall", m) for m in ("retention", "word_jaccard")}
    assert all(r["n_cases"] == 2 and r["baseline_mean"] == 1.0 for r in rows.values())
    with ResultStore(db) as store:
        judged = store.query("SELECT count(*) FROM calls k JOIN runs r USING (run_id) "
                             "WHERE r.mode = 'baseline' AND k.purpose = 'judge'")
    assert judged == [(0,)]  # the baseline's self-comparison costs no judge call
