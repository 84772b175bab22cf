"""The three derived tables against hand-computed values on a tiny fixture (3 cases x 3 modes).

Answer-call prompt tokens (completion in brackets):
    long_context  c1 1000 (100)  c2 2000 (100)  c3 4000 (100)
    summary       c1  100 (50)   c2  500 (50)   c3 failed (context length)
    recall        c1  300 (60)   c2 1000 (60)   c3 2000 (60)
Summary-mode and recall-mode cases also spend one summary call of 1000 prompt + 100 completion.
rougeL:  long 0.5 / 0.4 / 0.3   summary 0.2 / 0.2 / (failed -> 0)   recall 0.4 / 0.1 / 0.2
llm_score: long 1 / 1 / 1   summary 0.5 / 0 / -   recall 1 / NULL (judge reply did not parse) / 0.5
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from agentlab.bench import analysis
from agentlab.bench.scoring.metrics import Score
from agentlab.bench.store.results import CaseRecord, CompactionRow, ResultStore, RunInfo
from agentlab.events import Usage
from agentlab.model.base import CallRecord

ANSWER = {"long_context": [1000, 2000, 4000], "summary": [100, 500, None], "recall": [300, 1000, 2000]}
COMPLETION = {"long_context": 100, "summary": 50, "recall": 60}
ROUGE_L = {"long_context": [0.5, 0.4, 0.3], "summary": [0.2, 0.2, None], "recall": [0.4, 0.1, 0.2]}
LLM = {"long_context": [1.0, 1.0, 1.0], "summary": [0.5, 0.0, None], "recall": [1.0, "parse", 0.5]}


def call(purpose: str, prompt: int, completion: int) -> CallRecord:
    return CallRecord(model="scripted", purpose=purpose, usage=Usage(prompt, completion), latency_ms=5.0,
                      cache_hit=False)


def build(store: ResultStore) -> None:
    for mode in ("long_context", "summary", "recall"):
        run_id = f"run-{mode}"
        store.start_run(RunInfo(run_id, "qmsum", mode, {"mode": mode}, "scripted", "judge", "sha", "v", "1",
                                cases_selected=3))
        for i, case_id in enumerate(["c1", "c2", "c3"]):
            prompt = ANSWER[mode][i]
            if prompt is None:
                store.write_case(CaseRecord(run_id, case_id, "failed", ordinal=i, error="prompt too long",
                                            error_code="context_length",
                                            calls=[CallRecord("scripted", "answer", Usage(), 1.0, False,
                                                              error="ContextLengthError")]))
                continue
            calls = [call("answer", prompt, COMPLETION[mode])]
            if mode != "long_context":
                calls.append(call("summary", 1000, 100))
            llm = LLM[mode][i]
            scores = [Score("rougeL", ROUGE_L[mode][i], "v1"),
                      Score("llm_score", None if llm == "parse" else llm, "j1",
                            "parse_error: x" if llm == "parse" else None)]
            store.write_case(CaseRecord(run_id, case_id, "ok", ordinal=i, prediction="p", reference="r",
                                        calls=calls, scores=scores,
                                        compactions=[CompactionRow(1, 500, 100)] if mode == "recall" else ()))
        store.finish_run(run_id, "finished")


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    s = ResultStore(tmp_path / "r.duckdb")
    build(s)
    s.rebuild_derived()
    yield s
    s.close()


def test_token_savings_mean_of_cases_and_ratio_of_totals(store: ResultStore) -> None:
    df = analysis.token_savings_df("qmsum", store=store)
    agg = df[df.level == "aggregate"].set_index("mode")
    # summary: c3 failed, so c1, c2 only. Per case 0.9, 0.75 -> mean 0.825; totals (3000-600)/3000.
    assert agg.loc["summary", "n_cases"] == 2
    assert agg.loc["summary", "prompt_savings"] == pytest.approx(0.825)
    assert agg.loc["summary", "prompt_savings_ratio"] == pytest.approx(0.8)
    # With the summary call's 1000 prompt tokens: c1 (1000-1100)/1000 = -0.1, c2 (2000-1500)/2000 = 0.25.
    assert agg.loc["summary", "prompt_savings_with_summary"] == pytest.approx(0.075)
    assert agg.loc["summary", "prompt_savings_with_summary_ratio"] == pytest.approx(400 / 3000)
    # recall: per case 0.7, 0.5, 0.5 -> mean 0.5667; totals (7000-3300)/7000.
    assert agg.loc["recall", "prompt_savings"] == pytest.approx(1.7 / 3)
    assert agg.loc["recall", "prompt_savings_ratio"] == pytest.approx(3700 / 7000)
    # Total tokens (prompt + completion): c1 (1100-360)/1100 etc.
    assert agg.loc["recall", "total_savings_ratio"] == pytest.approx((7300 - 3480) / 7300)
    assert agg.loc["recall", "mode_prompt_tokens"] == pytest.approx(3300 / 3)
    cases = df[(df.level == "case") & (df["mode"] == "summary")].set_index("case_id")
    assert cases.loc["c1", "prompt_savings"] == pytest.approx(0.9)
    assert cases.loc["c1", "prompt_savings_with_summary"] == pytest.approx(-0.1)
    assert set(df["baseline_mode"]) == {"long_context"}
    pct = analysis.savings_percentiles(df, "prompt_savings").set_index("mode")
    assert pct.loc["recall", "p50"] == pytest.approx(0.5)


def test_quality_loss_counts_failed_cases_as_zero(store: ResultStore) -> None:
    df = analysis.quality_loss_df("qmsum", store=store).set_index(["mode", "metric"])
    row = df.loc[("summary", "rougeL")]
    assert row["n_cases"] == 3 and row["n_failed_mode"] == 1
    assert row["baseline_mean"] == pytest.approx(0.4)
    assert row["mode_mean"] == pytest.approx(0.4 / 3)
    assert row["delta"] == pytest.approx(0.4 / 3 - 0.4)
    assert row["relative_loss"] == pytest.approx(2 / 3)
    # The unparsed judge reply is left out (n_scored 2), not scored as anything.
    judge = df.loc[("recall", "llm_score")]
    assert judge["n_scored"] == 2 and judge["mode_mean"] == pytest.approx(0.75)


def test_recovery_with_wins_losses_ties(store: ResultStore) -> None:
    df = analysis.recovery_df("qmsum", store=store).set_index("metric")
    row = df.loc["rougeL"]
    assert (row["lossy_mode"], row["recovered_mode"]) == ("summary", "recall")
    assert row["n_cases"] == 3
    # (0.2333 - 0.1333) / (0.4 - 0.1333) = 0.375
    assert row["recovery"] == pytest.approx((0.7 / 3 - 0.4 / 3) / (0.4 - 0.4 / 3))
    assert (row["wins"], row["losses"], row["ties"]) == (2, 1, 0)
    # Every baseline case answered: both recoveries are the same number over the same cases.
    assert row["n_baseline_ok"] == 3 and row["recovery_baseline_ok"] == pytest.approx(row["recovery"])
    judge = df.loc["llm_score"]
    # c2 has no recall judge score: c1 (1, 0.5, 1) and c3 (1, 0, 0.5) remain.
    assert judge["n_cases"] == 2
    assert judge["recovery"] == pytest.approx((0.75 - 0.25) / (1.0 - 0.25))
    assert (judge["wins"], judge["losses"], judge["ties"]) == (2, 0, 0)


def test_raw_tables_readable(store: ResultStore) -> None:
    assert len(analysis.runs_df("qmsum", store=store)) == 3
    cases = analysis.cases_df("qmsum", "summary", store=store)
    assert list(cases["status"]) == ["ok", "ok", "failed"]
    assert cases.iloc[2]["error_code"] == "context_length"
    assert len(analysis.scores_df("qmsum", "recall", metric="rougeL", store=store)) == 3
    assert len(analysis.calls_df("qmsum", "recall", store=store)) == 6


def test_rewriting_a_case_replaces_it(store: ResultStore) -> None:
    store.write_case(CaseRecord("run-summary", "c3", "ok", ordinal=2, calls=[call("answer", 10, 1)],
                                scores=[Score("rougeL", 0.3, "v1")]))
    assert store.query("SELECT count(*) FROM cases WHERE run_id = 'run-summary'") == [(3,)]
    assert store.query("SELECT count(*) FROM calls WHERE run_id = 'run-summary' AND case_id = 'c3'") == [(1,)]
    assert store.completed_case_ids("run-summary") == {"c1", "c2", "c3"}


def test_mode_means_count_failed_as_zero(store: ResultStore) -> None:
    df = analysis.mode_means_df("qmsum", store=store).set_index(["mode", "metric"])
    assert df.loc[("summary", "rougeL"), "mean"] == pytest.approx(0.4 / 3)
    assert df.loc[("summary", "rougeL"), "n_failed"] == 1
    assert df.loc[("recall", "llm_score"), "n_unscored"] == 1
    assert df.loc[("recall", "llm_score"), "mean"] == pytest.approx(0.75)


# --------------------------------------------------- a baseline no case of which fits the window
#
# long_context: c1, c2 failed before sending (context_length), needing 10,000 and 20,000 tokens.
# summary: c1 500 (50), c2 1000 (50), each + a 2000 (200) summary call; rougeL 0.2 / 0.4.
# recall:  c1 1000 (60), c2 3000 (60);  rougeL 0.3 / 0.3 and its own evidence_recall@5 1 / 0.


@pytest.fixture
def overflow_store(tmp_path: Path) -> ResultStore:
    s = ResultStore(tmp_path / "o.duckdb")
    need = {"c1": 10_000, "c2": 20_000}
    answer = {"summary": {"c1": 500, "c2": 1000}, "recall": {"c1": 1000, "c2": 3000}}
    rouge = {"summary": {"c1": 0.2, "c2": 0.4}, "recall": {"c1": 0.3, "c2": 0.3}}
    for mode in ("long_context", "summary", "recall"):
        run_id = f"run-{mode}"
        s.start_run(RunInfo(run_id, "qmsum", mode, {"mode": mode}, "embedded", "embedded", "sha", "v", "1",
                            smoke_test=True, cases_selected=2))
        for i, case_id in enumerate(["c1", "c2"]):
            if mode == "long_context":
                s.write_case(CaseRecord(run_id, case_id, "failed", ordinal=i, error="not sent",
                                        error_code="context_length",
                                        metadata={"prompt_tokens_needed": need[case_id]}))
                continue
            calls = [call("answer", answer[mode][case_id], 50 if mode == "summary" else 60), call("summary", 2000, 200)]
            scores = [Score("rougeL", rouge[mode][case_id], "v1")]
            if mode == "recall":
                scores.append(Score("evidence_recall@5", 1.0 if case_id == "c1" else 0.0, "e1"))
            s.write_case(CaseRecord(run_id, case_id, "ok", ordinal=i, prediction="p", reference="r",
                                    calls=calls, scores=scores))
        s.finish_run(run_id, "finished")
    s.rebuild_derived()
    yield s
    s.close()


def test_token_savings_against_what_an_overflowing_baseline_needed(overflow_store: ResultStore) -> None:
    df = analysis.token_savings_df("qmsum", level="aggregate", store=overflow_store).set_index("mode")
    summary = df.loc["summary"]
    assert summary["n_cases"] == 2 and summary["n_baseline_estimated"] == 2
    assert summary["baseline_prompt_tokens"] == pytest.approx(15_000)
    # per case (10000-500)/10000 = 0.95 and (20000-1000)/20000 = 0.95; totals 28500/30000.
    assert summary["prompt_savings"] == pytest.approx(0.95)
    assert summary["prompt_savings_ratio"] == pytest.approx(28_500 / 30_000)
    # with the 2000-token summary call: (10000-2500)/10000 = 0.75, (20000-3000)/20000 = 0.85.
    assert summary["prompt_savings_with_summary"] == pytest.approx(0.80)
    # The baseline spent no completion tokens it could be compared on: totals are not made up.
    assert pd.isna(summary["total_savings"]) and pd.isna(summary["total_savings_ratio"])
    assert pd.isna(summary["baseline_total_tokens"])
    recall = df.loc["recall"]
    assert recall["prompt_savings"] == pytest.approx((0.9 + 0.85) / 2)


def test_quality_tables_keep_an_all_failed_baseline_at_zero(overflow_store: ResultStore) -> None:
    loss = analysis.quality_loss_df("qmsum", store=overflow_store).set_index(["mode", "metric"])
    # The failed baseline takes the metrics both scored runs share (rougeL), not recall's own extra.
    assert set(loss.index) == {("summary", "rougeL"), ("recall", "rougeL")}
    row = loss.loc[("summary", "rougeL")]
    assert row["n_failed_baseline"] == 2 and row["baseline_mean"] == 0.0
    assert row["mode_mean"] == pytest.approx(0.3) and row["delta"] == pytest.approx(0.3)
    recovery = analysis.recovery_df("qmsum", store=overflow_store).set_index("metric")
    assert list(recovery.index) == ["rougeL"]
    # No baseline case answered: there is no loss to recover, so recovery is undefined (NULL);
    # wins and losses of recall over summary still count (c1 a win, c2 a loss).
    assert recovery.loc["rougeL", "n_failed_baseline"] == 2 and pd.isna(recovery.loc["rougeL", "recovery"])
    assert (recovery.loc["rougeL", "wins"], recovery.loc["rougeL", "losses"]) == (1, 1)
    assert recovery.loc["rougeL", "n_baseline_ok"] == 0 and pd.isna(recovery.loc["rougeL", "recovery_baseline_ok"])
    means = analysis.mode_means_df("qmsum", store=overflow_store).set_index(["mode", "metric"])
    assert means.loc[("long_context", "rougeL"), "n_failed"] == 2
    assert ("long_context", "evidence_recall@5") not in means.index


# ------------------------------------------------------------------------------- variants


def add_run(store: ResultStore, run_id: str, mode: str, values: dict[str, float], *, variant: str = "default",
            settings: dict[str, object] | None = None, prompt: int = 100, finish: bool = True) -> None:
    """A run whose cases score ``values`` (case -> rougeL) with ``prompt`` answer prompt tokens each."""
    store.start_run(RunInfo(run_id, "qmsum", mode, {"mode": mode, "variant": variant}, "scripted", "judge", "sha",
                            "v", "1", cases_selected=len(values), variant=variant,
                            variant_settings=settings or {}))
    for i, (case_id, value) in enumerate(values.items()):
        store.write_case(CaseRecord(run_id, case_id, "ok", ordinal=i, prediction="p", reference="r",
                                    calls=[call("answer", prompt, 10)], scores=[Score("rougeL", value, "v1")]))
    if finish:
        store.finish_run(run_id, "finished")


def test_every_variant_is_a_row_and_a_newer_partial_run_replaces_nothing(tmp_path: Path) -> None:
    from agentlab.bench.scoring import stats

    s = ResultStore(tmp_path / "v.duckdb")
    full = {"c1": 0.5, "c2": 0.4, "c3": 0.3, "c4": 0.6}
    add_run(s, "base", "long_context", full, prompt=1000)
    add_run(s, "sum-default", "summary", {"c1": 0.2, "c2": 0.2, "c3": 0.1, "c4": 0.5}, prompt=100)
    add_run(s, "rec-default", "recall", {"c1": 0.4, "c2": 0.3, "c3": 0.2, "c4": 0.6}, prompt=300)
    # Started later: a two-case variant, a 0-case variant and a partial explicitly named baseline.
    add_run(s, "sum-512", "summary", {"c1": 0.3, "c3": 0.3}, variant="summary.max_output_tokens=512",
            settings={"summary.max_output_tokens": 512}, prompt=200)
    add_run(s, "sum-empty", "summary", {}, variant="summary.max_output_tokens=64",
            settings={"summary.max_output_tokens": 64}, finish=False)
    add_run(s, "base-quick", "long_context", {"c1": 0.0}, variant="quick", prompt=5)
    s.rebuild_derived()

    loss = analysis.quality_loss_df("qmsum", store=s).set_index("run_id")
    assert set(loss.index) == {"sum-default", "rec-default", "sum-512"}
    assert set(loss["baseline_run_id"]) == {"base"}  # never the newer, partial 'quick' baseline
    row = loss.loc["sum-default"]
    assert row["variant"] == "default" and row["n_cases"] == 4 and row["n_pairs"] == 4
    assert row["delta"] == pytest.approx((0.2 + 0.2 + 0.1 + 0.5 - 1.8) / 4)
    expected = stats.paired_difference([0.5, 0.4, 0.3, 0.6], [0.2, 0.2, 0.1, 0.5])
    assert (row["ci_low"], row["ci_high"], row["p_value"]) == pytest.approx(
        (expected.ci_low, expected.ci_high, expected.p_value))
    assert row["stats_seed"] == stats.DEFAULT_SEED and "bootstrap" in row["stats_method"]
    # The partial variant is compared on the two cases it shares with the baseline, and says so.
    partial = loss.loc["sum-512"]
    assert partial["n_cases"] == 2 and partial["n_pairs"] == 2 and partial["baseline_variant"] == "default"
    assert partial["delta"] == pytest.approx(((0.3 - 0.5) + (0.3 - 0.3)) / 2)

    savings = analysis.token_savings_df("qmsum", level="aggregate", store=s).set_index("run_id")
    assert set(savings.index) == {"sum-default", "rec-default", "sum-512"}
    assert savings.loc["sum-default", "n_cases"] == 4 and savings.loc["sum-default", "prompt_savings"] == pytest.approx(0.9)
    assert savings.loc["sum-512", "n_pairs"] == 2 and savings.loc["sum-512", "prompt_savings"] == pytest.approx(0.8)

    recovery = analysis.recovery_df("qmsum", store=s).set_index("run_id")
    assert list(recovery.index) == ["rec-default"] and recovery.loc["rec-default", "lossy_run_id"] == "sum-default"
    assert recovery.loc["rec-default", "n_pairs"] == 4
    ratio = stats.recovery_ratio([0.5, 0.4, 0.3, 0.6], [0.2, 0.2, 0.1, 0.5], [0.4, 0.3, 0.2, 0.6])
    assert recovery.loc["rec-default", "recovery"] == pytest.approx(ratio.estimate)
    assert recovery.loc["rec-default", "ci_low"] == pytest.approx(ratio.ci_low)

    means = analysis.mode_means_df("qmsum", store=s).set_index("run_id")
    assert means.loc["base", "n_cases"] == 4 and means.loc["base-quick", "n_cases"] == 1
    assert means.loc["sum-default", "mean"] == pytest.approx(0.25)

    pareto = analysis.pareto_df("qmsum", "rougeL", store=s).set_index("run_id")
    assert set(pareto.index) == {"sum-default", "rec-default", "sum-512"}
    # recall saves 0.7 and loses 0.075; summary saves 0.9 and loses 0.225; the 512 variant saves
    # 0.8 and loses 0.1: each trades one for the other, none dominated.
    assert pareto["on_frontier"].all()
    assert pareto.loc["sum-512", "quality_loss"] == pytest.approx(0.1)
    assert pareto.loc["sum-512", "loss_ci_low"] == pytest.approx(-loss.loc["sum-512", "ci_high"])
    s.close()


def test_pairing_prefers_the_most_specific_baseline_then_the_fullest() -> None:
    from agentlab.bench.config import MODE_ROLES
    from agentlab.bench.store.results import pair_runs

    def run(run_id: str, mode: str, variant: str = "default", settings: dict | None = None, n_ok: int = 4,
            started: int = 0, sha: str = "sha") -> dict:
        return {"run_id": run_id, "benchmark": "qmsum", "mode": mode, "model": "m", "judge_model": "j",
                "dataset_sha256": sha, "task_version": "1", "status": "finished", "started": started,
                "variant": variant, "variant_settings": settings or {}, "n_ok": n_ok}

    runs = [run("base", "long_context", n_ok=4, started=1), run("base-new-partial", "long_context", "x", n_ok=1,
                                                                   started=9),
            run("base-answer", "long_context", "answer.max_tokens=64", {"answer.max_tokens": 64}),
            run("s1", "summary", "answer.max_tokens=64;summary.prompt=nine_section",
                {"answer.max_tokens": 64, "summary.prompt": "nine_section"}),
            run("s2", "summary", "summary.prompt=nine_section", {"summary.prompt": "nine_section"}),
            run("s3", "summary", sha="other"), run("r", "recall", n_ok=2)]
    pairs = {p["run_id"]: p for p in pair_runs(runs, MODE_ROLES)}
    assert pairs["s1"]["baseline_run_id"] == "base-answer"  # shares answer.max_tokens=64
    assert pairs["s2"]["baseline_run_id"] == "base"  # the fuller default, not the newer partial one
    assert pairs["s3"]["baseline_run_id"] is None and "same data" in pairs["s3"]["pairing"]
    assert pairs["r"]["lossy_run_id"] is None  # no default summary on the same data: s2 is a variant
    assert pairs["base"]["role"] == "baseline" and pairs["base"]["baseline_run_id"] is None


def test_pairing_keeps_the_context_window_and_then_takes_the_fullest_default_run() -> None:
    from agentlab.bench.config import MODE_ROLES
    from agentlab.bench.store.results import pair_runs

    def run(run_id: str, mode: str, window: str, n_ok: int, started: int = 0) -> dict:
        return {"run_id": run_id, "benchmark": "qmsum", "mode": mode, "model": "m", "judge_model": "j",
                "dataset_sha256": "sha", "task_version": "1", "status": "finished", "started": started,
                "variant": "default", "variant_settings": {}, "n_ok": n_ok, "context_window": window}

    # --context-window is not a setting: both baselines are variant "default"; only the window differs.
    runs = [run("base-8k", "long_context", "8192", n_ok=9), run("base-128k-full", "long_context", "131072", n_ok=4),
            run("base-128k-partial", "long_context", "131072", n_ok=2, started=9),
            run("sum-128k", "summary", "131072", n_ok=4), run("sum-32k", "summary", "32768", n_ok=4)]
    pairs = {p["run_id"]: p for p in pair_runs(runs, MODE_ROLES)}
    assert pairs["sum-128k"]["baseline_run_id"] == "base-128k-full"  # same window; fuller, though older
    assert pairs["sum-32k"]["baseline_run_id"] is None and "context window" in pairs["sum-32k"]["pairing"]


# ----------------------------------------------- a partly failed baseline and the two recoveries
#
# rougeL    long_context   summary   recall
#   c1          0.5          0.2       0.4
#   c2        failed         0.2       0.4


def test_recovery_over_all_cases_and_over_cases_whose_baseline_answered(tmp_path: Path) -> None:
    values = {"long_context": {"c1": 0.5, "c2": None}, "summary": {"c1": 0.2, "c2": 0.2},
              "recall": {"c1": 0.4, "c2": 0.4}}
    with ResultStore(tmp_path / "p.duckdb") as s:
        for mode, per_case in values.items():
            run_id = f"run-{mode}"
            s.start_run(RunInfo(run_id, "qmsum", mode, {"mode": mode}, "scripted", "judge", "sha", "v", "1"))
            for i, (case_id, value) in enumerate(per_case.items()):
                if value is None:
                    s.write_case(CaseRecord(run_id, case_id, "failed", ordinal=i, error="server hung up",
                                            error_code="model_error"))
                else:
                    s.write_case(CaseRecord(run_id, case_id, "ok", ordinal=i, calls=[call("answer", 100, 10)],
                                            scores=[Score("rougeL", value, "v1")]))
        s.rebuild_derived()
        row = analysis.recovery_df("qmsum", store=s).set_index("metric").loc["rougeL"]
    # All cases, the failed baseline case counting 0: baseline 0.25, lossy 0.2, recovered 0.4
    # -> (0.4 - 0.2) / (0.25 - 0.2) = 4.0, past 100 % only because the baseline failed.
    assert (row["n_cases"], row["n_failed_baseline"]) == (2, 1)
    assert row["recovery"] == pytest.approx(4.0)
    # The cases whose baseline answered (c1 only): (0.4 - 0.2) / (0.5 - 0.2) = 2/3.
    assert row["n_baseline_ok"] == 1
    assert row["recovery_baseline_ok"] == pytest.approx(2 / 3)


# ------------------------------------------------------- the last answer call vs all answer calls
#
# long_context c1: one answer call of 4000 prompt tokens.
# recall       c1: a search round (500), a load round (800), a refused retry (error, 0) and the final
#                  answer (1200): 2500 summed, 1200 by the published rule (the last answer call).


def test_token_savings_keep_the_sum_and_the_last_answer_call(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "t.duckdb") as s:
        s.start_run(RunInfo("run-long", "qmsum", "long_context", {}, "scripted", None, "sha", "v", "1"))
        s.write_case(CaseRecord("run-long", "c1", "ok", calls=[call("answer", 4000, 100)],
                                scores=[Score("rougeL", 0.5, "v1")]))
        s.start_run(RunInfo("run-recall", "qmsum", "recall", {}, "scripted", None, "sha", "v", "1"))
        rounds = [call("summary", 3000, 200), call("answer", 500, 20), call("answer", 800, 20),
                  call("answer", 1200, 60),
                  CallRecord("scripted", "answer", Usage(), 1.0, False, error="RateLimitError")]
        s.write_case(CaseRecord("run-recall", "c1", "ok", calls=rounds, scores=[Score("rougeL", 0.4, "v1")]))
        s.rebuild_derived()
        df = analysis.token_savings_df("qmsum", store=s)
    for level in ("case", "aggregate"):
        row = df[(df["level"] == level) & (df["mode"] == "recall")].iloc[0]
        assert row["mode_prompt_tokens"] == 2500 and row["mode_prompt_tokens_last"] == 1200
        assert row["baseline_prompt_tokens"] == row["baseline_prompt_tokens_last"] == 4000
        assert row["prompt_savings"] == pytest.approx(1500 / 4000)
        assert row["prompt_savings_last"] == pytest.approx(2800 / 4000)
        assert row["prompt_savings_last_ratio"] == pytest.approx(2800 / 4000)
        # QMSum's published table counts the last answer call of a run
        # (docs/sources.md#summary-benchmark-metrics).
        assert row["published_token_rule"] == "last_answer_call"


def test_derived_tables_built_anywhere_use_every_registered_tasks_roles(tmp_path: Path) -> None:
    import bench_demo_task  # noqa: F401 - registers "demo", a task with its own mode roles

    with ResultStore(tmp_path / "r.duckdb") as s:
        s.rebuild_derived()  # as analysis.token_savings_df(rebuild=True) does, with no roles passed
        rows = dict((b, (base, lossy, rec)) for b, base, lossy, rec in
                    s.query("SELECT benchmark, baseline, lossy, recovered FROM mode_roles"))
    assert rows["demo"] == ("long_context", "summary", "recall")
    assert rows["qmsum"] == ("long_context", "summary", "recall")


def test_the_savings_interval_does_not_depend_on_the_order_cases_were_written(tmp_path: Path) -> None:
    """A seeded bootstrap resamples by position: the per-case values go in in case order, whatever the
    order the cases were written (a resumed or parallel run writes them in any order)."""
    import random

    from agentlab.bench.scoring import stats

    case_ids = [f"c{i:02d}" for i in range(40)]
    prompts = {c: 100 + 23 * i % 700 for i, c in enumerate(case_ids)}
    intervals = []
    for n, order in enumerate((case_ids, random.Random(3).sample(case_ids, len(case_ids)))):
        s = ResultStore(tmp_path / f"o{n}.duckdb")
        for run_id, mode in (("base", "long_context"), ("sum", "summary")):
            s.start_run(RunInfo(run_id, "qmsum", mode, {"mode": mode}, "scripted", "judge", "sha", "v", "1",
                                cases_selected=len(order)))
            for i, case_id in enumerate(order):
                prompt = 1000 if mode == "long_context" else prompts[case_id]
                s.write_case(CaseRecord(run_id, case_id, "ok", ordinal=i, prediction="p", reference="r",
                                        calls=[call("answer", prompt, 10)], scores=[Score("rougeL", 0.5, "v1")]))
            s.finish_run(run_id, "finished")
        s.rebuild_derived()
        row = analysis.token_savings_df("qmsum", level="aggregate", store=s).set_index("run_id").loc["sum"]
        intervals.append((row["ci_low"], row["ci_high"]))
        s.close()
    expected = stats.mean_with_ci([1 - prompts[c] / 1000 for c in case_ids])
    assert intervals[0] == intervals[1] == pytest.approx((expected.ci_low, expected.ci_high))


# -------------------------------------------- recovery follows the league's rule


@pytest.mark.parametrize(("lossy", "reason"), [
    # The lossy run above the baseline (LoCoMo bleu1 once gave 0.57 here): nothing lost, nothing to recover.
    ({"c1": 0.6, "c2": 0.5}, "scores 0.15 above the baseline"),
    # Below it by 0.4 % of its mean: within 1 %, a ratio over that gap is noise.
    ({"c1": 0.5, "c2": 0.298}, "within 1% of the baseline's"),
])
def test_recovery_is_na_with_the_reason_when_nothing_was_lost(tmp_path: Path, lossy: dict[str, float],
                                                             reason: str) -> None:
    from cli_helpers import run_cli

    db = tmp_path / "g.duckdb"
    with ResultStore(db) as s:
        add_run(s, "base", "long_context", {"c1": 0.5, "c2": 0.3})
        add_run(s, "sum", "summary", lossy)
        add_run(s, "rec", "recall", {"c1": 0.55, "c2": 0.45})
        s.rebuild_derived()
        row = analysis.recovery_df("qmsum", store=s).set_index("run_id").loc["rec"]
    assert pd.isna(row["recovery"]) and pd.isna(row["recovery_baseline_ok"])
    assert pd.isna(row["ci_low"]) and pd.isna(row["ci_high"])
    assert row["stats_note"].startswith("recovery n/a: ") and reason in row["stats_note"]
    code, out, err = run_cli("report", "qmsum", "--db", str(db))
    assert code == 0, err
    assert f"recall default rougeL: {row['stats_note']}\n" in out  # under the recovery table, per row
