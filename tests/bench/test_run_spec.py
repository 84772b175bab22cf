"""The run specification: one resolution of flags + file + mode, the same run ids as before, the context budget."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli
from run_id_commands import (
    DATA_COMMANDS,
    DEMO_COMMANDS,
    MODEL,
    SCRIPTED_WINDOW,
    run_ids,
    scripted_and_no_cases,
)

from agentlab.bench.spec import RunSpec, load_selection, resolve_run
from agentlab.bench.store.results import ResultStore
from agentlab.bench.usage import UsageError
from agentlab.model.base import ModelInfo

FIXTURE = json.loads((Path(__file__).parent / "data" / "run_ids_main.json").read_text(encoding="utf-8"))
HAS_DATA = all((Path(os.environ.get("AGENTLAB_DATA_DIR", "data/cache")) / d).exists()
               for d in ("qmsum", "locomo", "mt_bench_101"))


@pytest.fixture
def no_cases(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("AGENTLAB_CACHE_DB", str(tmp_path / "cache.duckdb"))
    with scripted_and_no_cases():
        yield


@pytest.mark.parametrize("name", sorted(DEMO_COMMANDS))
def test_the_cli_makes_the_run_ids_main_made(name: str, no_cases: None, tmp_path: Path) -> None:
    assert run_ids(DEMO_COMMANDS[name], tmp_path / "r.duckdb") == FIXTURE[name]["runs"]


@pytest.mark.skipif(not HAS_DATA, reason="needs the QMSum, LoCoMo and MT-Bench-101 data under $AGENTLAB_DATA_DIR")
@pytest.mark.parametrize("name", sorted(DATA_COMMANDS))
def test_the_cli_makes_the_run_ids_main_made_on_the_real_benchmarks(name: str, no_cases: None, tmp_path: Path) -> None:
    assert run_ids(DATA_COMMANDS[name], tmp_path / "r.duckdb") == FIXTURE[name]["runs"]


def _bound(spec: RunSpec, window: int = SCRIPTED_WINDOW, source: str = "scripted") -> RunSpec:
    assert spec.task is not None
    sha = load_selection(spec.task, spec.settings).dataset_sha256
    return spec.bind(ModelInfo(spec.model_spec, window, source), sha)


def _fixture_ids(name: str) -> dict[str, str]:
    return {mode: run_id for mode, run_id, _ in FIXTURE[name]["runs"]}


def test_the_spec_gives_main_s_run_ids_and_variant_names(no_cases: None) -> None:
    spec = resolve_run("demo", mode="recall", limit=2, model=MODEL)
    assert spec.modes == ("long_context", "summary", "recall") and not spec.bound
    with pytest.raises(ValueError, match="bind"):
        spec.run_ids()
    assert _bound(spec).run_ids() == _fixture_ids("demo_recall_with_baselines")
    named = resolve_run("demo", limit=2, model=MODEL, variant="v1")
    assert _bound(named).run_ids() == _fixture_ids("demo_named_variant") and named.variant_label == "v1"
    setting = resolve_run("demo", mode="summary", baselines=False, limit=2, model=MODEL,
                          overrides=["answer.max_tokens=48"])
    assert _bound(setting).run_ids() == _fixture_ids("demo_set_variant")
    assert setting.variant_label == "answer.max_tokens=48"
    window = resolve_run("demo", limit=2, model=MODEL, context_window=4096)
    assert _bound(window, 4096, "--context-window").run_ids() == _fixture_ids("demo_context_window")
    smoke = resolve_run("demo", limit=2)  # the environment's default: embedded, a smoke test
    assert smoke.model_spec == "embedded" and smoke.smoke_test and smoke.limit == 2
    assert _bound(smoke).run_ids() == _fixture_ids("demo_embedded_smoke")


@pytest.mark.skipif(not HAS_DATA, reason="needs the QMSum and LoCoMo data under $AGENTLAB_DATA_DIR")
def test_the_spec_gives_main_s_run_ids_on_the_real_benchmarks(no_cases: None) -> None:
    qmsum = resolve_run("qmsum", mode="recall", limit=1, model=MODEL)
    assert _bound(qmsum).run_ids() == _fixture_ids("qmsum_recall")
    locomo = resolve_run("locomo", mode="memory", baselines=False, limit=1, published_settings=True)
    assert not locomo.smoke_settings and locomo.smoke_test
    assert _bound(locomo).run_ids() == _fixture_ids("locomo_embedded_published")
    assert locomo.variant_label == FIXTURE["locomo_embedded_published"]["runs"][0][2]
    smoked = resolve_run("locomo", mode="memory", baselines=False, limit=1)
    assert smoked.smoke_settings and smoked.smoke_changes["answer.max_tokens"] == (500, 64)
    assert _bound(smoked).run_ids() == _fixture_ids("locomo_embedded")


def test_a_spec_is_frozen_and_complete(no_cases: None) -> None:
    spec = resolve_run("demo", mode="summary", limit=0, model=MODEL, context_budget=1000, concurrency=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.mode = "recall"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.variant_settings["answer.max_tokens"] = 1  # type: ignore[index]
    assert (spec.limit, spec.concurrency, spec.judge_spec, spec.action) == (None, 3, MODEL, "run")
    assert spec.variant_settings == {"context_budget": 1000} and spec.variant_label == "context_budget=1000"
    bound = _bound(spec)
    assert (bound.context_window, bound.context_window_source, bound.mechanism_window) == (SCRIPTED_WINDOW,
                                                                                          "scripted", 1000)
    assert [r.mode for r in bound.requests()] == ["long_context", "summary"]
    assert {r.context_budget for r in bound.requests()} == {1000}
    assert bound.run_config("summary")["context_budget"] == 1000
    assert "context_budget" not in _bound(resolve_run("demo", mode="summary", model=MODEL)).run_config("summary")
    off = resolve_run("demo", model=MODEL, overrides=["judge.enabled=false"])
    assert off.judge_spec is None
    dry = resolve_run("demo", mode="recall", action="dry_run", limit=3)
    assert dry.modes == ("recall",) and not dry.smoke_test and dry.limit == 3


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"context_budget": 0}, "--context-budget must be a positive number of tokens, got 0"),
    ({"context_budget": 5000, "context_window": 4096}, "--context-budget 5000 is above --context-window 4096"),
    ({"mode": "nope"}, "unknown mode 'nope'"),
    ({"variant": "a b"}, "--variant 'a b'"),
])
def test_resolution_refuses_with_one_line(kwargs: dict[str, Any], message: str, no_cases: None) -> None:
    with pytest.raises(UsageError, match=message.replace("[", r"\[")):
        resolve_run("demo", model=MODEL, **kwargs)


def test_a_budget_above_the_model_window_is_refused_when_bound(no_cases: None) -> None:
    spec = resolve_run("demo", model=MODEL, context_budget=SCRIPTED_WINDOW + 1)
    with pytest.raises(UsageError, match=f"above the model's context window of {SCRIPTED_WINDOW} tokens"):
        _bound(spec)
    assert _bound(dataclasses.replace(spec, context_budget=SCRIPTED_WINDOW)).mechanism_window == SCRIPTED_WINDOW


# ------------------------------------------------------------------------- budget via the CLI


def test_the_budget_is_in_the_header_the_id_and_runs_config(no_cases: None, tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    flags = ["demo", "--mode", "summary", "--limit", "2", "--model", MODEL, "--db", str(db), "--no-progress"]
    code, out, _ = run_cli(*flags, "--context-budget", "3000")
    assert code == 0
    assert f"context window {SCRIPTED_WINDOW} tokens (scripted), context budget 3000 tokens" in out
    code, plain, _ = run_cli(*flags)
    assert code == 0 and "context budget" not in plain
    with ResultStore(db) as store:
        rows = {(r[0], json.loads(r[2]).get("context_budget")): (r[1], r[3])
                for r in store.query("SELECT mode, run_id, config, variant FROM runs")}
        store.rebuild_derived()
        partner = dict(store.query("SELECT run_id, baseline_run_id FROM report_runs WHERE role = 'lossy'"))
    main_ids = _fixture_ids("demo_recall_with_baselines")  # no budget: main's ids
    assert rows[("long_context", None)] == (main_ids["long_context"], "default")
    assert rows[("summary", None)] == (main_ids["summary"], "default")
    assert rows[("summary", 3000)][1] == rows[("long_context", 3000)][1] == "context_budget=3000"
    assert rows[("summary", 3000)][0] not in main_ids.values()
    # Each summary run is compared with the baseline run made under the same budget.
    assert partner == {rows[("summary", 3000)][0]: rows[("long_context", 3000)][0],
                       rows[("summary", None)][0]: rows[("long_context", None)][0]}


def test_a_budget_above_the_window_is_an_error_line_and_writes_nothing(no_cases: None, tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    code, out, err = run_cli("demo", "--model", MODEL, "--db", str(db), "--context-budget", str(SCRIPTED_WINDOW * 2))
    assert code == 2 and out == ""
    assert err == (f"error: --context-budget {SCRIPTED_WINDOW * 2} is above the model's context window of "
                   f"{SCRIPTED_WINDOW} tokens (scripted); give at most {SCRIPTED_WINDOW}\n")
    assert not db.exists()


def _summary_calls(db: Path) -> int:
    with ResultStore(db) as store:
        rows = store.query("SELECT count(*) FROM calls c JOIN runs r USING (run_id) "
                           "WHERE r.mode = 'summary' AND c.purpose = 'summary'")
    return int(rows[0][0])


@pytest.mark.skipif(not HAS_DATA, reason="needs the MT-Bench-101 data under $AGENTLAB_DATA_DIR")
def test_the_summary_trigger_fires_at_the_budget(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """MT-Bench-101's rolling summary on a context-ratio trigger: silent at a 32k window, firing at a 100-token budget."""
    import agentlab.model.registry as registry
    from agentlab.model.scripted import ScriptedModel

    def reply(request: Any) -> str:
        return "A short summary of the dialogue." if request.purpose == "summary" else "A plain answer."

    monkeypatch.setenv("AGENTLAB_CACHE_DB", str(tmp_path / "cache.duckdb"))
    monkeypatch.setattr(registry, "get_model", lambda spec=None, **_: ScriptedModel(
        default_reply=reply, info=ModelInfo("scripted", SCRIPTED_WINDOW, "scripted")))  # type: ignore[arg-type]
    trigger = ["--set", "summary.events_over=none", "--set", "summary.context_ratio=0.5",
               "--set", "summary.context_floor_tokens=20", "--set", "judge.enabled=false"]
    flags = ["mtbench101", "--mode", "summary", "--limit", "3", "--model", MODEL, "--no-progress", *trigger]
    wide, tight = tmp_path / "wide.duckdb", tmp_path / "tight.duckdb"
    assert run_cli(*flags, "--db", str(wide))[0] == 0
    assert run_cli(*flags, "--db", str(tight), "--context-budget", "100")[0] == 0
    assert _summary_calls(wide) == 0  # 0.5 x 32,768 tokens: these dialogues never reach it
    assert _summary_calls(tight) > 0  # 0.5 x 100 = 50 tokens: their turns do
