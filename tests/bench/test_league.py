"""The league report: one baseline, many arms, one table; on the scripted model and the test server.

The cases are the tiny QMSum meeting of ``test_toy_arm`` (the zebra-budget turn is the evidence),
plus a third question whose answer the scripted model refuses when the evidence is hidden, so a
failed case exists and must be counted. The toy ``keep last 2 events`` arm hides the evidence;
``+recall`` brings it back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import run_cli
from test_toy_arm import TOY, echo, qmsum_selection

import agentlab.bench.league.play as league
from agentlab.bench import analysis
from agentlab.bench.datasets.qmsum import QMSumCase, TextSpan
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import CaseSelection, get_task
from agentlab.bench.usage import UsageError
from agentlab.model.base import ModelError, ModelInfo, ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.policies import arms
from agentlab.testing.openai_server import OpenAITestServer

FAIL_QUESTION = "Which budget did Alice want for the zebra, in euros?"
NO_JUDGE = ("judge.enabled=false",)


@pytest.fixture(autouse=True)
def toy_arm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    arms.register_arm(TOY, replace=True)
    monkeypatch.setenv("AGENTLAB_CACHE_DB", str(tmp_path / "calls.duckdb"))
    yield
    arms.ARMS.pop(TOY.name, None)


def selection() -> CaseSelection:
    """Two cases of the toy meeting and a third, different question on it."""
    base = qmsum_selection()
    meeting = base.cases[0].data.meeting
    third = QMSumCase("Toy001_specific_03", meeting, "specific", FAIL_QUESTION, "Forty euros.", (TextSpan(3, 4),))
    task = get_task("qmsum")
    return CaseSelection([*base.cases, task.case_from(third)], dataset_sha256="toy", loaded=3)  # type: ignore[attr-defined]


def scripted(raise_on: type[BaseException] | None = None, when: str = "hidden") -> ScriptedModel:
    """The echo model; the FAIL_QUESTION case fails (ModelError) when its prompt lacks the evidence."""

    def reply(request: ModelRequest) -> str:
        text = "\n".join(m.content for m in request.messages)
        if raise_on is not None and arms.HIDDEN_RECALL_HEADER in text:
            raise raise_on()
        if request.messages[-1].content == FAIL_QUESTION and "zebra budget should" not in text:
            raise ModelError("the scripted model refuses a question whose evidence it was not shown")
        return echo(request)

    return ScriptedModel(info=ModelInfo("scripted", 32_000), default_reply=reply)  # type: ignore[arg-type]


def run(db: Path, model: ScriptedModel, arm_names: str = "toy_keep_last", **kwargs: object) -> league.LeagueResult:
    return league.run_league("qmsum", arms=arm_names, model="scripted", model_object=model, db=db,
                             selection=selection(), overrides=NO_JUDGE, progress=False, **kwargs)  # type: ignore[arg-type]


def row(result: league.LeagueResult, arm: str, metric: str = "rougeL") -> dict[str, object]:
    return next(r for r in result.rows if r["arm"] == arm and r["metric"] == metric)


def test_scripted_league_runs_the_baseline_once_and_counts_a_failed_case(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    model = scripted()
    result = run(db, model, "toy_keep_last", recall=True)
    assert [a.name for a in result.arms] == ["toy_keep_last", "toy_keep_last+recall"]
    assert result.arms[1].partner == "toy_keep_last" and result.arms[1].role == "recovered"
    # The baseline answered each of the 3 cases once: 3 answer calls in one long_context run.
    with ResultStore(db) as store:
        assert store.query("SELECT count(*) FROM runs WHERE mode = 'long_context'") == [(1,)]
        assert store.query("SELECT count(*) FROM calls WHERE run_id = ? AND purpose = 'answer'",
                           [result.baseline_run_id]) == [(3,)]
    assert result.runs[result.baseline_run_id]["calls_sent"] == 3
    assert result.calls_made == len(model.requests)
    lossy, recovered, base = row(result, "toy_keep_last"), row(result, "toy_keep_last+recall"), row(result, "long_context")
    # The toy hid the evidence of the third question: that case failed, is counted, and scores 0.
    assert (lossy["n_ok"], lossy["n_failed"]) == (2, 1)
    assert (recovered["n_ok"], recovered["n_failed"]) == (3, 0)
    assert (base["n_ok"], base["n_failed"], base["delta"], base["prompt_savings"]) == (3, 0, 0.0, 0.0)
    assert lossy["delta"] < 0 < lossy["prompt_savings"]  # type: ignore[operator]
    assert lossy["ci_low"] <= lossy["delta"] <= lossy["ci_high"]  # type: ignore[operator]
    assert recovered["recovery"] is not None and recovered["recovery"] > 0  # type: ignore[operator]
    assert lossy["peak_prompt_tokens_max"] < base["peak_prompt_tokens_max"]  # type: ignore[operator]
    assert "1 failed case(s) are counted" in league.format_league(result)
    # Evidence kept, measured without a model: the whole meeting keeps the zebra turn, the toy hides it.
    assert (base["evidence_kept"], base["evidence_cases"]) == (1.0, 3)
    # The evidence span is turns 3-4; recall preloads turn 3 only, so the unit is still not all there.
    assert lossy["evidence_kept"] == 0.0 and (recovered["evidence_kept"], recovered["evidence_cases"]) == (0.0, 3)
    assert len(analysis.retention_df("qmsum", db=db)) == 9  # 3 arms x 3 cases


def test_second_league_reuses_the_baseline_and_finished_arms(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    first = run(db, scripted(), "toy_keep_last")
    model = scripted()
    second = run(db, model, "toy_keep_last,inspect_trim")
    assert second.baseline_run_id == first.baseline_run_id
    assert second.baseline_source.startswith("reused run")
    toy = second.runs[first.arms[0].run_id]
    # Its failed case is attempted again (failed cases heal on rerun), the ok ones are not.
    assert (toy["cases_run_now"], toy["cases_reused"]) == (1, 2)
    assert second.runs[second.baseline_run_id]["calls_sent"] == 0
    assert second.league_id != first.league_id
    frame = analysis.league_df("qmsum", db=db)
    assert set(frame["league_id"]) == {first.league_id, second.league_id}
    assert set(frame[frame["league_id"] == second.league_id]["arm"]) == {"long_context", "toy_keep_last", "inspect_trim"}


def test_an_interrupted_league_resumes_reusing_the_finished_arms(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    with pytest.raises(KeyboardInterrupt):
        run(db, scripted(raise_on=KeyboardInterrupt), "toy_keep_last", recall=True)
    with ResultStore(db) as store:
        status = dict(store.query("SELECT mode, status FROM runs"))
    assert status == {"long_context": "finished", "toy_keep_last": "finished", "toy_keep_last+recall": "interrupted"}
    model = scripted()
    resumed = run(db, model, "toy_keep_last", recall=True)
    by_mode = {v["mode"]: v for v in resumed.runs.values()}
    assert by_mode["long_context"]["cases_run_now"] == 0 and by_mode["long_context"]["calls_sent"] == 0
    assert by_mode["toy_keep_last"]["cases_reused"] == 2  # only its failed case is attempted again
    assert by_mode["toy_keep_last+recall"]["cases_run_now"] == 3
    assert row(resumed, "toy_keep_last+recall")["n_ok"] == 3


def test_a_lived_league_runs_the_generic_arms_with_their_own_baseline_run(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    forced = run(db, scripted(), "toy_keep_last")
    lived = run(db, scripted(), "toy_keep_last", seeding="lived")
    assert lived.seeding == "lived" and lived.baseline_run_id != forced.baseline_run_id
    assert lived.arms[0].run_id != forced.arms[0].run_id
    with ResultStore(db) as store:
        config = store.query("SELECT config FROM runs WHERE run_id = ?", [lived.arms[0].run_id])[0][0]
    assert json.loads(config)["seeding"] == "lived"
    assert row(lived, "toy_keep_last")["n_failed"] == 1  # the hidden evidence fails the third case here too


def test_a_baseline_that_cannot_fit_the_window_is_an_error_naming_the_fix(tmp_path: Path) -> None:
    small = ScriptedModel(info=ModelInfo("scripted", 120), default_reply=echo)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="over the model scripted's 120-token window.*--fitting"):
        run(tmp_path / "r.duckdb", small)
    assert not (tmp_path / "r.duckdb").exists() or not ResultStore(tmp_path / "r.duckdb").query(
        "SELECT * FROM cases")


def test_pareto_flag_on_a_constructed_example() -> None:
    def point(arm: str, savings: float | None, delta: float | None) -> dict[str, object]:
        return {"arm": arm, "metric": "m", "prompt_savings": savings, "delta": delta}

    rows = [point("baseline", 0.0, 0.0), point("a", 0.5, -0.1), point("a_tie", 0.5, -0.1),
            point("dominated", 0.4, -0.2), point("best_saver", 0.9, -0.3), point("no_delta", 0.95, None),
            point("loses_nothing_saves_some", 0.2, 0.0)]
    league.mark_pareto(rows)  # type: ignore[arg-type]
    on = {r["arm"] for r in rows if r["pareto"]}
    # Baseline is dominated by the arm that saves 20 % at no loss; equal points are both on the front.
    assert on == {"a", "a_tie", "best_saver", "loses_nothing_saves_some"}


# ------------------------------------------------------------------------------ the command, test server


@pytest.fixture
def toy_qmsum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type(get_task("qmsum")), "load_cases", lambda self, settings: selection())


def test_cli_league_on_the_test_server_json(tmp_path: Path, toy_qmsum: None) -> None:
    db = tmp_path / "r.duckdb"
    with OpenAITestServer(context_window=32_768) as server:
        code, out, err = run_cli("league", "qmsum", "--arms", "toy_keep_last,summary,recall", "--recall",
                                 "--model", server.model_spec, "--db", str(db), "--json", "--no-progress",
                                 "--set", "judge.enabled=false", "--context-budget", "4096")
        assert code == 0, err
        payload = json.loads(out)
        again_code, again, _ = run_cli("league", "qmsum", "--arms", "toy_keep_last,summary,recall", "--recall",
                                       "--model", server.model_spec, "--db", str(db), "--no-progress",
                                       "--set", "judge.enabled=false", "--context-budget", "4096")
        # The plain run command with the same flags names the same runs and finds their cases stored.
        plain_code, plain, plain_err = run_cli("qmsum", "--arm", "toy_keep_last+recall", "--model", server.model_spec,
                                               "--db", str(db), "--json", "--no-progress", "--set",
                                               "judge.enabled=false", "--context-budget", "4096")
    assert again_code == 0 and plain_code == 0, plain_err
    ids = {a["arm"]: a["run_id"] for a in payload["arms"]} | {"long_context": payload["baseline_run_id"]}
    plain_runs = json.loads(plain)["runs"]
    assert {r["mode"]: r["run_id"] for r in plain_runs} == {m: ids[m] for m in
                                                            ("long_context", "toy_keep_last", "toy_keep_last+recall")}
    assert all(r["already_done"] == 3 and r["attempted"] == 0 for r in plain_runs)
    assert [a["arm"] for a in payload["arms"]] == ["toy_keep_last", "toy_keep_last+recall", "summary", "recall"]
    assert payload["context_budget"] == 4096 and payload["n_cases"] == 3 and payload["baseline"] == "long_context"
    assert payload["baseline_source"].startswith("run now") and payload["primary_metric"] == "rougeL"
    stable = {"league_id", "benchmark", "arm", "role", "partner", "n_ok", "n_failed", "prompt_savings",
              "peak_prompt_tokens_mean", "peak_prompt_tokens_max", "summary_calls", "summary_tokens", "metric",
              "delta", "ci_low", "ci_high", "p_value", "recovery", "pareto", "evidence_kept"}
    assert all(stable <= set(r) for r in payload["rows"])
    rouge = {r["arm"]: r for r in payload["rows"] if r["metric"] == "rougeL"}
    assert set(rouge) == {"long_context", "toy_keep_last", "toy_keep_last+recall", "summary", "recall"}
    # QMSum's summary is made once per meeting (3 cases share it): one call, a third per case.
    assert rouge["summary"]["summary_calls"] == pytest.approx(1 / 3) and rouge["toy_keep_last"]["summary_calls"] == 0
    assert rouge["recall"]["partner"] == "summary"
    assert all(r["ci_low"] is not None for a, r in rouge.items() if a != "long_context")
    # The rerun replays everything: the baseline is reused and no call reaches the server.
    assert f"baseline reused run {payload['baseline_run_id']}" in again and "0 model calls sent this time" in again
    # The answer calls' reported prompt cache per arm; test-model has no price: tokens only, said once.
    assert all(r["cached_tokens"] is not None and r["net_cost_usd"] is None for r in payload["rows"])
    assert "prompt cache (answer calls, provider-reported cached tokens" in again
    assert again.count("no price for test-model in data/prices.toml: cost columns omitted") == 1
    frame = analysis.league_df(league_id=payload["league_id"], db=db)
    assert list(frame.columns[:20]) == list(league.COLUMN_NAMES[:20])
    assert len(frame) == len(payload["rows"])


@pytest.mark.parametrize(("argv", "needles"), [
    (["--arms", "nope"], ["unknown mode 'nope'", "toy_keep_last"]),
    (["--arms", "toy_keep_last", "--context-budget", "999999"], ["--context-budget 999999 is above", "32768"]),
    (["--arms", "summary", "--seeding", "lived"], ["seeds its own way"]),
    (["--arms", "toy_keep_last", "--seeding", "sometimes"], ["--seeding 'sometimes'"]),
    (["--arms", "toy_keep_last", "--metric", "nonsense"], ["--metric 'nonsense'", "rougeL"]),
])
def test_bad_flags_are_one_error_line(argv: list[str], needles: list[str], tmp_path: Path, toy_qmsum: None) -> None:
    with OpenAITestServer(context_window=32_768) as server:
        code, out, err = run_cli("league", "qmsum", *argv, "--model", server.model_spec, "--db",
                                 str(tmp_path / "r.duckdb"), "--no-progress", "--set", "judge.enabled=false")
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ") and all(n in lines[-1] for n in needles), err


def test_all_names_every_lossy_generic_arm_and_the_task_modes() -> None:
    task = get_task("qmsum")
    names, skipped, rule = league.choose_arms(task, "all", recall=True)
    generic = [n for n, a in arms.ARMS.items() if a.role == "lossy"]
    assert names[: 2 * len(generic)][::2] == generic and names[-2:] == ["summary", "recall"]
    assert all(n + "+recall" in names for n in generic) and not skipped and "+recall" in rule
    lived, skipped_lived, _ = league.choose_arms(task, "all", seeding="lived")
    assert "summary" not in lived and set(skipped_lived) == {"summary", "recall"}


def test_recovery_is_only_over_a_loss() -> None:
    """A lossy arm above the baseline lost nothing: its recovered partner's ratio would be noise (n/a, why)."""
    rec, why = league.recovery_of([0.5, 0.5, 0.5], [0.2, 0.3, 0.1], [0.4, 0.4, 0.3], "x")
    assert why is None and rec.estimate == pytest.approx((1.1 / 3 - 0.6 / 3) / (1.5 / 3 - 0.6 / 3))
    above, why = league.recovery_of([0.10, 0.10], [0.12, 0.12], [0.11, 0.11], "x")
    assert above is None and "x scores 0.02 above the baseline" in (why or "")
    tiny, why = league.recovery_of([0.5, 0.5], [0.499, 0.499], [0.5, 0.5], "x")
    assert tiny is None and "within 1%" in (why or "")
    assert league.recovery_of([], [], [], "x") == (None, None)


def test_cli_league_takes_a_judge_model_as_run_does(tmp_path: Path, toy_qmsum: None) -> None:
    db = tmp_path / "r.duckdb"
    with OpenAITestServer(context_window=32_768) as server, OpenAITestServer(context_window=32_768) as judge:
        code, out, err = run_cli("league", "qmsum", "--arms", "toy_keep_last", "--model", server.model_spec,
                                 "--judge-model", judge.model_spec, "--db", str(db), "--json", "--no-progress",
                                 "--context-budget", "4096")
        judged = len(judge.stats.prompt_tokens)
    assert code == 0, err
    assert judged > 0  # every judge call went to the judge's server
    runs = analysis.runs_df("qmsum", db=db)
    assert set(runs["judge_model"]) == {judge.model_spec} and set(runs["model"]) == {server.model_spec}
    assert any(r["metric"] == "llm_score" for r in json.loads(out)["rows"])
