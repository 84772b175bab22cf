from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import bench_demo_task as demo
import pytest
from cli_helpers import run_cli

from agentlab.bench.cli import main as cli
from agentlab.bench.cli import run as cli_run
from agentlab.bench.config import (
    Settings,
    SettingsError,
    apply_overrides,
    load_settings,
    parse_value,
)
from agentlab.bench.store.results import ResultStore


@pytest.fixture(autouse=True)
def scripted_models(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import agentlab.model.registry as registry

    demo.reset()
    monkeypatch.setattr(registry, "get_model", lambda spec=None, **_: demo.scripted_model())
    monkeypatch.setattr(registry, "default_spec", lambda: "embedded")
    yield
    demo.reset()


def test_list_and_unknown_benchmark() -> None:
    code, out, _ = run_cli("list")
    assert code == 0 and "demo" in out and "long_context (default)" in out
    code, out, _ = run_cli("list", "--json")
    assert any(b["benchmark"] == "demo" for b in json.loads(out)["benchmarks"])
    code, _, err = run_cli("nosuchbench")
    assert code == 2 and "unknown benchmark 'nosuchbench'" in err and "demo" in err


def test_unknown_mode_and_bad_set_are_one_line_errors(tmp_path: Path) -> None:
    db = str(tmp_path / "r.duckdb")
    code, _, err = run_cli("demo", "--mode", "nope", "--db", db)
    assert code == 2 and "unknown mode 'nope'" in err and "long_context" in err
    code, _, err = run_cli("demo", "--set", "bogus.x=1", "--db", db)
    assert code == 2 and "unknown section [bogus]" in err and "answer" in err
    code, _, err = run_cli("demo", "--set", "answer.nope=1", "--db", db)
    assert code == 2 and "[answer] has no field 'nope'" in err and "max_tokens" in err
    code, _, err = run_cli("demo", "--set", "answer.max_tokens=lots", "--db", db)
    assert code == 2 and "demo [answer] max_tokens must be an integer; got 'lots'" in err
    assert err.count("\n") == 1


def test_embedded_model_defaults_to_five_cases_and_is_a_smoke_test(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    code, out, _ = run_cli("demo", "--db", str(db), "--set", "dataset.n_cases=8", "--no-progress")
    assert code == 0
    assert "DEMO SET, not the published selection" in out and "SMOKE TEST" in out
    with ResultStore(db) as store:
        assert store.query("SELECT count(*) FROM cases") == [(5,)]
        assert store.query("SELECT smoke_test, cases_selected FROM runs") == [(True, 5)]
    code, out, _ = run_cli("demo", "--db", str(db), "--set", "dataset.n_cases=8", "--limit", "0", "--no-progress",
                           "--json")
    result = json.loads(out)
    assert (result["already_done"], result["attempted"], result["selected"]) == (5, 3, 8)
    assert result["smoke_test"] is True
    assert {s["metric"] for s in result["scores"]} >= {"rougeL", "llm_score"}


def test_a_recovered_mode_brings_its_baseline_and_lossy_runs_and_the_tables(tmp_path: Path) -> None:
    db = str(tmp_path / "r.duckdb")
    code, out, _ = run_cli("demo", "--mode", "recall", "--limit", "0", "--db", db, "--no-progress")
    assert code == 0
    for mode in ("long_context", "summary", "recall"):
        assert f"demo/{mode} run " in out
    assert out.index("demo/long_context run") < out.index("demo/summary run") < out.index("demo/recall run")
    for title in ("== token_savings", "== quality_loss", "== recovery"):
        assert title in out
    assert "(no rows" not in out and "SMOKE TEST" in out
    with ResultStore(Path(db)) as store:
        assert store.query("SELECT mode, count(*) FROM cases JOIN runs USING (run_id) GROUP BY mode ORDER BY mode") == [
            ("long_context", 6), ("recall", 6), ("summary", 6)]
    # The baseline run is an ordinary run: running that mode itself reuses every stored case ...
    code, out, _ = run_cli("demo", "--mode", "long_context", "--limit", "0", "--db", db, "--no-progress", "--json")
    assert (json.loads(out)["already_done"], json.loads(out)["attempted"]) == (6, 0)
    # ... and so does the same comparison again, which still ends with the tables (JSON: under "report").
    code, out, _ = run_cli("demo", "--mode", "recall", "--limit", "0", "--db", db, "--no-progress", "--json")
    result = json.loads(out)
    assert [(r["mode"], r["attempted"]) for r in result["runs"]] == [("long_context", 0), ("summary", 0), ("recall", 0)]
    assert {r["metric"] for r in result["report"]["recovery"]} >= {"f1", "rougeL"}


def test_no_baselines_runs_the_one_mode(tmp_path: Path) -> None:
    db = str(tmp_path / "r.duckdb")
    code, out, _ = run_cli("demo", "--mode", "summary", "--limit", "2", "--db", db, "--no-progress", "--no-baselines")
    assert code == 0 and "demo/summary run" in out and "long_context" not in out and "== recovery" not in out
    with ResultStore(Path(db)) as store:
        assert store.query("SELECT mode FROM runs") == [("summary",)]


def test_comparison_modes_follow_the_roles() -> None:
    from agentlab.bench.tasks import get_task

    assert cli.comparison_modes(get_task("demo"), "recall") == ["long_context", "summary", "recall"]
    assert cli.comparison_modes(get_task("demo"), "summary") == ["long_context", "summary"]
    assert cli.comparison_modes(get_task("demo"), "long_context") == ["long_context"]
    assert cli.comparison_modes(get_task("qmsum"), "recall") == ["long_context", "summary", "recall"]
    assert cli.comparison_modes(get_task("mtbench101"), "summary") == ["baseline", "summary"]
    assert cli.comparison_modes(get_task("locomo"), "memory") == ["long_context", "memory"]


def test_embedded_demo_set_keeps_the_cases_that_fit_and_dry_run_keeps_the_published_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agentlab.model.registry as registry
    from agentlab.events import Message
    from agentlab.model.base import ModelInfo

    original = demo.DemoTask.prompts

    def padded(self: demo.DemoTask, case: object, mode: str, settings: Settings, summary: str) -> list[Message]:
        messages = original(self, case, mode, settings, summary)  # type: ignore[arg-type]
        if int(case.data) <= 3:  # type: ignore[attr-defined]
            messages = [messages[0], Message.user("padding " * 400), *messages[1:]]
        return messages

    def small_window_model() -> object:
        model = demo.scripted_model()
        model.info = ModelInfo("scripted-small", 300)
        return model

    # Items 1-3 carry a long padding line, so only items 4-8 fit the 300-token window.
    monkeypatch.setattr(demo.DemoTask, "prompts", padded)
    monkeypatch.setattr(registry, "get_model", lambda spec=None, **_: small_window_model())
    db = tmp_path / "r.duckdb"
    code, out, _ = run_cli("demo", "--mode", "long_context", "--db", str(db), "--set", "dataset.n_cases=8",
                           "--no-progress", "--json")
    assert code == 0 and json.loads(out)["selection"] == "fits_window"
    with ResultStore(db) as store:
        ran = [r[0] for r in store.query("SELECT case_id FROM cases ORDER BY case_id")]
    assert ran == ["d04", "d05", "d06", "d07", "d08"]
    code, out, _ = run_cli("demo", "--mode", "long_context", "--dry-run", "--json", "--set", "dataset.n_cases=8")
    assert json.loads(out)["cases"] == 8  # the published selection
    code, out, _ = run_cli("demo", "--mode", "long_context", "--db", str(db), "--set", "dataset.n_cases=8",
                           "--no-progress")
    assert "DEMO SET" in out and "runs 5 of the 5 cases (of 8 published)" in out
    # Any --limit keeps the published selection: the padded items come first.
    code, out, _ = run_cli("demo", "--mode", "long_context", "--db", str(db), "--set", "dataset.n_cases=8",
                           "--limit", "2", "--no-progress", "--json")
    assert json.loads(out)["selection"] == "published"


def test_non_embedded_model_runs_all_cases(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    code, out, _ = run_cli("demo", "--model", "openai:fake", "--db", str(db), "--no-progress", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["selected"] == 6 and result["smoke_test"] is False and result["judge_model"] == "openai:fake"
    code, out, _ = run_cli("demo", "--model", "openai:fake", "--judge-model", "openai:judge", "--limit", "2",
                           "--db", str(db), "--no-progress", "--json", "--set", "judge.enabled=false")
    result = json.loads(out)
    assert result["judge_model"] is None and "llm_score" not in {s["metric"] for s in result["scores"]}


def test_dry_run_json(tmp_path: Path) -> None:
    code, out, _ = run_cli("demo", "--mode", "long_context", "--dry-run", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["cases"] == 6 and result["avg_prompt_tokens"] > 0 and result["prompts"] == 6
    code, out, _ = run_cli("demo", "--dry-run")
    assert "dry run (no model called): 6 cases of 6 loaded" in out


def test_retrieval_only_json() -> None:
    code, out, _ = run_cli("demo", "--mode", "recall", "--retrieval-only", "--json", "--limit", "3")
    assert code == 0
    assert json.loads(out) == {"benchmark": "demo", "mode": "recall", "cases": 3, "recall@1": 1.0}


def test_report_prints_three_tables_and_smoke_label(tmp_path: Path) -> None:
    db = str(tmp_path / "r.duckdb")
    for mode in ("long_context", "summary", "recall"):
        assert run_cli("demo", "--mode", mode, "--limit", "0", "--db", db, "--no-progress")[0] == 0
    code, out, _ = run_cli("report", "demo", "--db", db)
    assert code == 0
    assert "SMOKE TEST" in out
    for title in ("== token_savings", "== quality_loss", "== recovery", "== scores by mode", "== prompt_cache"):
        assert title in out
    # The scripted model has no price: token columns only, said once per model.
    assert sum(line.startswith("no price for ") for line in out.splitlines()) == 1
    code, out, _ = run_cli("report", "demo", "--db", db, "--json")
    report = json.loads(out)
    assert report["smoke_test"] is True
    recovery = {r["metric"]: r for r in report["recovery"]}
    # Summary answers "grey" for every item; recall sees the evidence line again: full recovery.
    assert recovery["f1"]["lossy_mode"] == "summary" and recovery["f1"]["recovered_mode"] == "recall"
    assert recovery["f1"]["recovery"] == pytest.approx(1.0)
    assert recovery["f1"]["wins"] == 6
    savings = {r["mode"]: r for r in report["token_savings"]}
    assert savings["summary"]["prompt_savings"] > 0.5 and savings["summary"]["n_cases"] == 6
    with ResultStore(Path(db)) as store:
        for table in ("token_savings", "quality_loss", "recovery", "mode_roles"):
            assert store.has_table(table)


def test_report_says_in_one_line_when_its_runs_come_from_different_code_versions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "r.duckdb")
    for mode, version in (("long_context", "0.1.0"), ("summary", "0.1.0"), ("recall", "0.2.0")):
        monkeypatch.setattr(cli_run, "code_version", lambda version=version: version)
        assert run_cli("demo", "--mode", mode, "--limit", "0", "--db", db, "--no-progress", "--no-baselines")[0] == 0
    with ResultStore(Path(db)) as store:
        ids = dict(store.query("SELECT mode, run_id FROM runs"))
    code, out, _ = run_cli("report", "demo", "--db", db)
    assert code == 0
    lines = [line for line in out.splitlines() if "code versions" in line]
    assert len(lines) == 1, out
    line = lines[0]
    assert "2 code versions" in line and "CHANGELOG.md" in line
    # Each version is named with the runs (mode and run id) it made.
    old, new = line.index("0.1.0: "), line.index("0.2.0: ")
    assert old < line.index(f"long_context {ids['long_context'][:12]}") < new
    assert old < line.index(f"summary {ids['summary'][:12]}") < new
    assert new < line.index(f"recall {ids['recall'][:12]}")
    code, out, _ = run_cli("report", "demo", "--db", db, "--json")
    assert json.loads(out)["code_versions"] == {
        "0.1.0": [f"long_context {ids['long_context'][:12]}", f"summary {ids['summary'][:12]}"],
        "0.2.0": [f"recall {ids['recall'][:12]}"]}
    # Narrowed to runs of one version, the report has nothing to say about versions.
    code, out, _ = run_cli("report", "demo", "--db", db, "--run", ids["summary"])
    assert code == 0 and "code versions" not in out


def test_report_of_runs_from_one_code_version_says_nothing_about_versions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "r.duckdb")
    monkeypatch.setattr(cli_run, "code_version", lambda: "0.2.0")
    assert run_cli("demo", "--mode", "recall", "--limit", "0", "--db", db, "--no-progress")[0] == 0
    code, out, _ = run_cli("report", "demo", "--db", db)
    assert code == 0 and "== recovery" in out and "code versions" not in out


def test_report_without_db_or_runs(tmp_path: Path) -> None:
    code, _, err = run_cli("report", "demo", "--db", str(tmp_path / "none.duckdb"))
    assert code == 2 and "no results database" in err
    db = tmp_path / "empty.duckdb"
    ResultStore(db).close()
    code, _, err = run_cli("report", "demo", "--db", str(db))
    assert code == 2 and "no runs of 'demo'" in err


# --------------------------------------------------------------------------------- settings


def test_parse_value() -> None:
    assert parse_value("3") == 3 and parse_value("0.5") == 0.5 and parse_value("True") is True
    assert parse_value("openai:gpt-4o-mini") == "openai:gpt-4o-mini"


def test_overrides_are_type_checked() -> None:
    base = Settings({"a": {"n": 1, "x": 0.5, "flag": False, "name": "s", "tasks": ["CC", "CM"]}})
    new = apply_overrides(base, ["a.n=4", "a.x=2", "a.flag=true", "a.name=42", "a.tasks=SI,PI"])
    assert new["a"] == {"n": 4, "x": 2.0, "flag": True, "name": "42", "tasks": ["SI", "PI"]}
    assert base["a"]["n"] == 1  # the original is untouched
    for bad, message in [("a.n=1.5", "n must be an integer"), ("a.flag=yes", "flag must be true or false"),
                         ("a.x=abc", "x must be a number"), ("a=1", "section.field"), ("a.n", "section.field=value"),
                         ("published.x=1", "cannot be set")]:
        with pytest.raises(SettingsError, match=message):
            apply_overrides(base, [bad])


def test_qmsum_toml_holds_the_published_settings() -> None:
    settings = load_settings("qmsum")
    assert settings["answer"]["temperature"] == 0.0 and settings["answer"]["max_tokens"] == 384
    assert settings["agent"]["max_tool_iterations"] == 6
    assert settings["dataset"]["min_distance_from_end"] == 80
    assert settings["recall"]["scope"] == "current_hidden"
    assert settings.published["cases"] == 189 and settings.published["long_context_avg_prompt_tokens"] == 18985.56
    assert "published" not in settings.sections()


# ------------------------------------------------------------------------------ smoke settings


def test_smoke_settings_come_from_the_settings_file_and_set_wins() -> None:
    from agentlab.bench.tasks import get_task

    task = get_task("qmsum")
    published = cli_run.load_task_settings(task, [])
    assert published.get("answer", "max_tokens") == 384 and published.get("summary", "max_output_tokens") == 1024
    out = io.StringIO()
    smoke = cli_run.load_task_settings(task, [], smoke=True, out=out)
    assert smoke.get("answer", "max_tokens") == 128 and smoke.get("summary", "max_output_tokens") == 256
    assert "answer.max_tokens 384 -> 128" in out.getvalue() and "--published-settings" in out.getvalue()
    mine = cli_run.load_task_settings(task, ["answer.max_tokens=200"], smoke=True)
    assert mine.get("answer", "max_tokens") == 200 and mine.get("summary", "max_output_tokens") == 256
    # The caps change the settings, so a smoke run and a published-settings run have different ids.
    assert smoke.identity() != published.identity()


def test_every_benchmark_has_valid_smoke_settings() -> None:
    from agentlab.bench.config import apply_smoke
    from agentlab.bench.tasks import get_task

    for name in ("qmsum", "mtbench101", "longmemeval", "locomo"):
        settings = load_settings(name, get_task(name).default_settings())
        capped, changed = apply_smoke(settings)
        assert changed, name
        for key, (old, new) in changed.items():
            section, field = key.split(".")
            assert settings.get(section, field) == old and capped.get(section, field) == new
            assert old is None or type(old) is type(new)


def test_bad_smoke_keys_are_errors(tmp_path: Path) -> None:
    defaults = {"answer": {"max_tokens": 384}}
    for body, message in (('"answer.nope" = 1', r"x \[answer\] has no field 'nope' .*\[smoke\]"),
                          ("answer = 1", "must be"),
                          ('"nosuch.x" = 1', r"no section \[nosuch\]"),
                          ('"answer.max_tokens" = "many"', r"max_tokens must be an integer; got 'many'")):
        (tmp_path / "x.toml").write_text(f"[smoke]\n{body}\n")
        with pytest.raises(SettingsError, match=message):  # checked when the file is read
            load_settings("x", defaults, directory=tmp_path)
    with pytest.raises(SettingsError, match=r"\[smoke\] settings live in the settings file"):
        apply_overrides(Settings(defaults), ["smoke.answer=1"])


def test_cli_applies_smoke_settings_only_to_embedded_model_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "demo.toml").write_text('[smoke]\n"answer.max_tokens" = 8\n')
    monkeypatch.setattr(cli_run, "load_settings", lambda name, defaults: load_settings(name, defaults, directory=tmp_path))
    db = tmp_path / "r.duckdb"

    def stored_answer_caps() -> list[int]:
        with ResultStore(db) as store:
            rows = store.query("SELECT config FROM runs ORDER BY started")
        return [json.loads(r[0])["settings"]["answer"]["max_tokens"] for r in rows]

    code, out, _ = run_cli("demo", "--limit", "1", "--db", str(db), "--no-progress")
    assert code == 0 and "answer.max_tokens 32 -> 8" in out
    code, out, _ = run_cli("demo", "--limit", "1", "--db", str(db), "--no-progress", "--published-settings")
    assert code == 0 and "smoke settings" not in out
    code, out, _ = run_cli("demo", "--model", "openai:fake", "--limit", "1", "--db", str(db), "--no-progress")
    assert code == 0 and "smoke settings" not in out
    assert sorted(stored_answer_caps()) == [8, 32, 32]


def test_fixture_command_writes_a_loadable_longmemeval_file(tmp_path: Path) -> None:
    from agentlab.bench.datasets.longmemeval import parse_file

    path = tmp_path / "lme" / "fixture.json"
    code, out, _ = run_cli("fixture", "longmemeval", str(path), "--questions", "3",
                           "--question-type", "single-session-user")
    assert code == 0 and "GENERATED" in out and f"dataset.path={path}" in out
    data = parse_file(path)
    assert [q.question_type for q in data.questions] == ["single-session-user"] * 3
    code, _, err = run_cli("fixture", "longmemeval", str(path), "--turns", "0")
    assert code == 2 and "--turns must be >= 1" in err


def test_report_prints_and_stores_a_benchmarks_own_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas as pd

    def report_tables(self, store):  # type: ignore[no-untyped-def]
        n = store.query("SELECT count(*) FROM cases")[0][0]
        return {"per_group": pd.DataFrame([{"group": "all", "cases": n}])}

    monkeypatch.setattr(demo.DemoTask, "report_tables", report_tables)  # a declared Task method
    db = str(tmp_path / "r.duckdb")
    assert run_cli("demo", "--mode", "long_context", "--limit", "2", "--db", db, "--no-progress")[0] == 0
    code, out, _ = run_cli("report", "demo", "--db", db)
    assert code == 0 and "== demo_per_group (demo's own report table) ==" in out
    code, out, _ = run_cli("report", "demo", "--db", db, "--json")
    assert json.loads(out)["benchmark_tables"]["demo_per_group"] == [{"group": "all", "cases": 2}]
    with ResultStore(Path(db)) as store:
        assert store.query("SELECT \"group\", cases FROM demo_per_group") == [("all", 2)]
        with pytest.raises(ValueError, match="store's own tables"):
            store.write_frame("cases", pd.DataFrame([{"x": 1}]))


def test_a_task_without_own_tables_reports_none(tmp_path: Path) -> None:
    from agentlab.bench.tasks import Task, get_task

    task = get_task("demo")
    assert type(task).report_tables is Task.report_tables  # the declared default, not overridden
    db = str(tmp_path / "r.duckdb")
    assert run_cli("demo", "--mode", "long_context", "--limit", "1", "--db", db, "--no-progress")[0] == 0
    with ResultStore(Path(db)) as store:
        assert task.report_tables(store) == {}
    code, out, _ = run_cli("report", "demo", "--db", db)
    assert code == 0 and "own report table" not in out
    code, out, _ = run_cli("report", "demo", "--db", db, "--json")
    assert code == 0 and json.loads(out)["benchmark_tables"] == {}


def test_smoke_runs_are_the_default_variant_and_published_settings_a_named_one(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "demo.toml").write_text('[smoke]\n"answer.max_tokens" = 8\n')
    monkeypatch.setattr(cli_run, "load_settings", lambda name, defaults: load_settings(name, defaults, directory=tmp_path))
    db = str(tmp_path / "r.duckdb")
    variants = []
    for extra in ([], ["--published-settings"], ["--set", "answer.max_tokens=16"], ["--variant", "mine"]):
        code, out, _ = run_cli("demo", "--limit", "1", "--db", db, "--no-progress", "--json", *extra)
        assert code == 0
        variants.append(json.loads(out)["variant"])
    assert variants == ["default", "answer.max_tokens=32", "answer.max_tokens=16", "mine"]
    code, out, _ = run_cli("demo", "--model", "openai:fake", "--limit", "1", "--db", db, "--no-progress", "--json")
    assert json.loads(out)["variant"] == "default"  # no [smoke] for other models: the file is the reference
    code, _, err = run_cli("demo", "--variant", "has space", "--db", db)
    assert code == 2 and err.startswith("error: --variant")


def test_sweep_runs_the_grid_resumably_and_report_compares_every_variant(tmp_path: Path) -> None:
    db = str(tmp_path / "r.duckdb")
    sweep = ["sweep", "demo", "--mode", "summary", "--grid", "answer.max_tokens=16,24", "--limit", "3",
             "--model", "openai:fake", "--db", db, "--no-progress"]
    code, out, _ = run_cli(*sweep, "--json")
    assert code == 0
    runs = json.loads(out)["runs"]
    assert [(r["mode"], r["variant"], r["ok"]) for r in runs] == [
        ("long_context", "default", 3), ("summary", "answer.max_tokens=16", 3), ("summary", "answer.max_tokens=24", 3)]
    # Rerun: nothing left to do; a larger --limit only adds the missing cases to the same runs.
    code, out, _ = run_cli(*sweep, "--json")
    assert [r["already_done"] for r in json.loads(out)["runs"]] == [3, 3, 3]
    code, out, _ = run_cli(*sweep[:-5], "--limit", "4", "--model", "openai:fake", "--db", db, "--no-progress", "--json")
    again = json.loads(out)["runs"]
    assert [(r["already_done"], r["ok"]) for r in again] == [(3, 1), (3, 1), (3, 1)]
    assert [r["run_id"] for r in again] == [r["run_id"] for r in runs]

    code, out, _ = run_cli("report", "demo", "--db", db, "--json")
    assert code == 0
    report = json.loads(out)
    loss = [r for r in report["quality_loss"] if r["metric"] == "f1"]
    assert sorted(r["variant"] for r in loss) == ["answer.max_tokens=16", "answer.max_tokens=24"]
    for row in loss:
        assert {"ci_low", "ci_high", "p_value", "n_pairs", "stats_method", "stats_seed"} <= set(row)
        assert row["n_pairs"] == 4 and row["ci_low"] <= row["delta"] <= row["ci_high"]
    assert report["pareto"] and {"on_frontier", "token_savings", "quality_loss"} <= set(report["pareto"][0])
    assert "--limit is not part of the id" in report["rules"]

    one = loss[0]["run_id"]
    code, out, _ = run_cli("report", "demo", "--db", db, "--json", "--run", one)
    narrowed = json.loads(out)
    assert {r["run_id"] for r in narrowed["quality_loss"]} == {one}
    assert {r["mode"] for r in narrowed["runs"]} == {"long_context", "summary"}  # the run and its baseline
    code, out, _ = run_cli("report", "demo", "--db", db, "--json", "--variant", "answer.max_tokens=24")
    assert {r["variant"] for r in json.loads(out)["quality_loss"]} == {"answer.max_tokens=24"}
    code, out, _ = run_cli("report", "demo", "--db", db, "--between", "answer.max_tokens=16", "answer.max_tokens=24")
    assert code == 0 and "between variants" in out and "how runs are compared" in out
    for bad in (["--run", "nope"], ["--variant", "nope"]):
        code, _, err = run_cli("report", "demo", "--db", db, *bad)
        assert code == 2 and err.startswith("error: ") and "nope" in err


def test_sweep_grid_errors_are_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "r.duckdb")
    for grid, message in ((["--grid", "answer.max_tokens"], "expected section.field=v1,v2"),
                          (["--grid", "answer.max_tokens=1,1"], "listed twice"),
                          (["--grid", "answer.max_tokens=1,2", "--set", "answer.max_tokens=3"], "given twice"),
                          (["--grid", "answer.max_tokens=1,x"], "max_tokens must be an integer")):
        code, _, err = run_cli("sweep", "demo", "--mode", "summary", *grid, "--db", db)
        assert code == 2 and message in err and err.count("\n") == 1, err
    assert not Path(db).exists()  # checked before anything ran


def test_steps_inside_a_case_show_on_the_bar_unless_no_progress(tmp_path: Path) -> None:
    db = str(tmp_path / "r.duckdb")
    code, _, err = run_cli("demo", "--mode", "summary", "--model", "openai:fake", "--limit", "2", "--db", db)
    assert code == 0
    # the demo's summary build reports three steps; the bar shows them beside the case that runs it
    assert "summary step 1/3, 400/1,200 tokens" in err and "summary step 3/3, 1,200/1,200 tokens" in err
    code, _, err = run_cli("demo", "--mode", "recall", "--model", "openai:fake", "--limit", "2", "--db", db,
                           "--no-progress")
    assert code == 0 and err == ""


def test_run_summary_means_count_failed_cases_as_zero(tmp_path: Path) -> None:
    demo.FAIL_IDS.add("d02")
    code, out, _ = run_cli("demo", "--model", "openai:fake", "--limit", "2", "--db", str(tmp_path / "r.duckdb"),
                           "--no-progress", "--json", "--set", "judge.enabled=false")
    assert code == 0
    result = json.loads(out)
    assert (result["ok"], result["failed"]) == (1, 1)
    exact = next(s for s in result["scores"] if s["metric"] == "exact_match")
    # d01 answered exactly (1), d02 failed and counts 0: the mean is over both cases
    with ResultStore(tmp_path / "r.duckdb") as store:
        (d01,), = store.query("SELECT value FROM scores WHERE case_id = 'd01' AND metric = 'exact_match'")
    assert d01 == 1.0  # long context holds the evidence line
    assert (exact["n_cases"], exact["n_failed"]) == (2, 1)
    assert exact["mean"] == pytest.approx(0.5)


async def test_http_clients_are_closed_through_wrappers_in_the_loop_that_opened_them() -> None:
    from agentlab.bench.running.models import close_clients

    closed: list[str] = []

    class Client:
        def __init__(self, name: str) -> None:
            self.name = name

        async def aclose(self) -> None:
            closed.append(self.name)

    class Wrapper:  # like CachedModel: no client of its own, the model it wraps in ``inner``
        def __init__(self, inner: object) -> None:
            self.inner = inner

    shared = Client("answer")
    await close_clients(Wrapper(shared), shared, Wrapper(Wrapper(Client("judge"))), None)
    assert closed == ["answer", "judge"]  # a model shared by answer and judge is closed once
    looped = Wrapper(None)
    looped.inner = looped  # a cycle ends instead of spinning
    await close_clients(looped)


def test_run_means_print_and_serialise_without_pandas() -> None:
    from agentlab.bench.cli.common import frame_records
    from agentlab.bench.cli.run import RunMeans

    means = RunMeans([("rougeL", 0.25, 3, 1, 0), ("word_jaccard", None, 3, 0, 3)])
    assert len(means) == 2 and len(RunMeans([])) == 0
    assert frame_records(means) == [
        {"metric": "rougeL", "mean": 0.25, "n_cases": 3, "n_failed": 1, "n_unscored": 0},
        {"metric": "word_jaccard", "mean": None, "n_cases": 3, "n_failed": 0, "n_unscored": 3}]
    lines = means.to_string(index=False).splitlines()
    assert lines[0].split() == ["metric", "mean", "n_cases", "n_failed", "n_unscored"]
    assert lines[1].split() == ["rougeL", "0.250000", "3", "1", "0"]
    assert len({len(line) for line in lines}) == 1  # right-aligned columns
