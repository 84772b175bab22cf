"""Which run stands for a (model, mode): one query (bench/scoring/queries.py), the same for the store and every task.

Each benchmark's published-style tables used to carry their own copy of the "current run" query,
and one copy (QMSum's) had drifted to "the newest run". These tests store two runs of every mode —
an older, finished run with more answered cases and a newer partial one — and check that the
store and each task's ``report_tables`` show the same (older, fuller) run, that the tasks rank
runs only through the shared query, and that a report's run/variant selection narrows them.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from agentlab.bench.cli.main import main
from agentlab.bench.scoring.metrics import Score
from agentlab.bench.scoring.queries import CURRENT_RUNS_CTE, RunSelection, current_runs_cte, with_current_runs
from agentlab.bench.store.results import CaseRecord, ResultStore, RunInfo
from agentlab.bench.tasks import get_task
from agentlab.events import Usage
from agentlab.model.base import CallRecord

BENCHMARKS = ("qmsum", "longmemeval", "mtbench101", "locomo")
MODEL = "scripted"

#: Where each task's own tables count the cases of a mode's shown run: (table, mode column, count
#: column, extra row filter).
CASE_COUNT: dict[str, tuple[str, str, dict[str, Any]]] = {
    "qmsum": ("qmsum_recall", "n_cases", {}),
    "longmemeval": ("longmemeval_modes", "n", {}),
    "mtbench101": ("mtbench101_quality", "cases", {"task": "ALL"}),
    "locomo": ("locomo_cost_per_question", "n", {}),
}

# Metadata every task's table builder can read (each reads its own keys).
METADATA = {"task": "CM", "n_turns": 2, "category": 1, "sample_id": "s1", "recall_path": "tool",
            "recall_hits": 1, "recall_turns": 1, "summary_chars": 10}


class SpyStore(ResultStore):
    """A store that records the SQL it is asked to run and whose current runs a task asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.sql: list[str] = []
        self.current_runs_asked: list[str] = []

    def df(self, sql: str, params: Any = None) -> Any:
        self.sql.append(sql)
        return super().df(sql, params)

    def query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        self.sql.append(sql)
        return super().query(sql, params)

    def current_runs_df(self, select_sql: str, benchmark: str) -> Any:
        self.current_runs_asked.append(benchmark)
        return super().current_runs_df(select_sql, benchmark)


def add_run(store: ResultStore, benchmark: str, mode: str, run_id: str, cases: dict[str, str], *,
            started: dt.datetime, status: str = "finished", variant: str = "default",
            variant_settings: dict[str, Any] | None = None) -> None:
    """A run of ``cases`` (case id -> ok/failed), started at ``started`` and ended with ``status``."""
    store.start_run(RunInfo(run_id, benchmark, mode, {"mode": mode, "variant": variant}, MODEL, None, "sha", "v",
                            "1", cases_selected=len(cases), variant=variant,
                            variant_settings=variant_settings or {}))
    for i, (case_id, case_status) in enumerate(cases.items()):
        ok = case_status == "ok"
        store.write_case(CaseRecord(
            run_id, case_id, case_status, ordinal=i, prediction="p" if ok else None, reference="r",
            error=None if ok else "boom", error_code=None if ok else "model_error", metadata=METADATA,
            calls=[CallRecord(MODEL, "answer", Usage(100, 10), 1.0, False)] if ok else [],
            scores=[Score("rougeL", 0.5, "v1")] if ok else []))
    store.finish_run(run_id, status)
    store.conn.execute("UPDATE runs SET started = ? WHERE run_id = ?", [started, run_id])


T0 = dt.datetime(2026, 1, 1, 12, 0)


def two_runs_of_every_mode(store: ResultStore, benchmark: str) -> dict[str, str]:
    """Per mode an older finished run with two ok cases and a newer interrupted one with one.

    Returns the run each mode should show (the older, fuller one).
    """
    expected = {}
    for mode in get_task(benchmark).modes:
        add_run(store, benchmark, mode, f"{benchmark}-{mode}-old", {"c1": "ok", "c2": "ok"}, started=T0)
        add_run(store, benchmark, mode, f"{benchmark}-{mode}-new", {"c1": "ok"}, status="interrupted",
                started=T0 + dt.timedelta(hours=1))
        expected[mode] = f"{benchmark}-{mode}-old"
    return expected


def shown(store: ResultStore, benchmark: str) -> dict[str, str]:
    frame = store.current_runs(benchmark)
    return dict(zip(frame["mode"], frame["run_id"], strict=True))


def case_counts(benchmark: str, tables: dict[str, Any]) -> dict[str, int]:
    """Cases per mode in the task's own table (the shown run's, since each run has a distinct count)."""
    name, column, where = CASE_COUNT[benchmark]
    frame = {f"{benchmark}_{key}": df for key, df in tables.items()}[name]
    for key, value in where.items():
        frame = frame[frame[key] == value]
    mode_column = "mode" if "mode" in frame.columns else None
    if mode_column is None:  # mtbench101's quality table is the summary mode's
        return {"summary": int(frame[column].iloc[0])}
    return {str(m): int(n) for m, n in zip(frame["mode"], frame[column], strict=True)}


# ------------------------------------------------------------------------------ the shared query


def test_the_older_fuller_run_stands_for_the_mode_not_the_newer_partial_one(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        expected = two_runs_of_every_mode(store, "qmsum")
        assert shown(store, "qmsum") == expected


def test_a_newer_run_replaces_an_older_one_in_which_every_case_failed(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        add_run(store, "qmsum", "recall", "old-failed", {"c1": "failed", "c2": "failed"}, started=T0)
        add_run(store, "qmsum", "recall", "new", {"c1": "ok"}, status="interrupted", started=T0 + dt.timedelta(1))
        assert shown(store, "qmsum") == {"recall": "new"}


def test_the_default_variant_stands_for_the_mode_before_a_fuller_variant(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        add_run(store, "qmsum", "summary", "default", {"c1": "ok"}, started=T0)
        add_run(store, "qmsum", "summary", "wide", {"c1": "ok", "c2": "ok", "c3": "ok"}, variant="wide",
                variant_settings={"summary.x": 1}, started=T0 + dt.timedelta(1))
        assert shown(store, "qmsum") == {"summary": "default"}


def test_a_query_over_the_current_runs_is_prefixed_with_the_shared_cte() -> None:
    sql, params = with_current_runs("SELECT * FROM current_runs", "qmsum")
    assert sql.startswith("WITH " + CURRENT_RUNS_CTE) and params == ["qmsum"]


# ---------------------------------------------------------------------------- every task's tables


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_each_task_shows_the_run_the_store_shows(tmp_path: Path, benchmark: str) -> None:
    with SpyStore(tmp_path / "r.duckdb") as store:
        expected = two_runs_of_every_mode(store, benchmark)
        assert shown(store, benchmark) == expected
        store.sql.clear()
        tables = get_task(benchmark).report_tables(store)
    assert store.current_runs_asked and set(store.current_runs_asked) == {benchmark}
    # The runs are ranked only by the shared query: no SQL of the task ranks or picks runs itself.
    shared = "WITH " + current_runs_cte(benchmark)[0]
    for sql in store.sql:
        if "current_runs" in sql or "row_number" in sql.lower():
            assert sql.startswith(shared), sql
    counts = case_counts(benchmark, tables)
    assert counts and all(n == 2 for n in counts.values()), counts  # the old run's 2 cases, not the new run's 1


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_a_report_selection_narrows_each_tasks_tables_to_the_selected_runs_and_their_partners(
        tmp_path: Path, benchmark: str) -> None:
    task = get_task(benchmark)
    roles = task.roles()
    assert roles is not None
    with ResultStore(tmp_path / "r.duckdb") as store:
        two_runs_of_every_mode(store, benchmark)
        # A variant of every non-baseline mode, with three cases: it never stands for its mode unless selected.
        for mode in task.modes:
            if mode != roles.baseline:
                add_run(store, benchmark, mode, f"{benchmark}-{mode}-wide", {"c1": "ok", "c2": "ok", "c3": "ok"},
                        variant="wide", variant_settings={"answer.x": 1}, started=T0 + dt.timedelta(hours=2))
        store.rebuild_derived()
        default = case_counts(benchmark, task.report_tables(store))
        store.select_runs(variants=["wide"])
        picked = shown(store, benchmark)
        narrowed = case_counts(benchmark, task.report_tables(store))
        store.select_runs()
        again = shown(store, benchmark)
    assert set(default.values()) == {2}
    # The selected variant's runs, and the baseline run they are compared with (the default, fuller one).
    assert picked == {mode: f"{benchmark}-{mode}-wide" if mode != roles.baseline else f"{benchmark}-{mode}-old"
                      for mode in task.modes}
    assert narrowed == {mode: 3 if mode != roles.baseline else 2 for mode in default}
    assert again == {mode: f"{benchmark}-{mode}-old" for mode in task.modes}


def test_a_run_selection_keeps_only_that_run_and_its_partners(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        two_runs_of_every_mode(store, "qmsum")
        store.rebuild_derived()
        store.select_runs(run_ids=["qmsum-summary-new"])
        # The summary run asked for, and its baseline (long_context) partner; recall is not involved.
        assert shown(store, "qmsum") == {"summary": "qmsum-summary-new", "long_context": "qmsum-long_context-old"}
        assert not RunSelection.of() and RunSelection.of(variants=["x"])


def test_report_variant_narrows_the_tasks_own_tables_through_the_cli(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    with ResultStore(db) as store:
        two_runs_of_every_mode(store, "qmsum")
        for mode in ("summary", "recall"):
            add_run(store, "qmsum", mode, f"qmsum-{mode}-wide", {"c1": "ok", "c2": "ok", "c3": "ok"},
                    variant="wide", variant_settings={"answer.x": 1}, started=T0 + dt.timedelta(hours=2))

    def own_tables(*flags: str) -> dict[str, Any]:
        out = io.StringIO()
        assert main(["report", "qmsum", "--db", str(db), "--json", *flags], out=out) == 0
        tables = json.loads(out.getvalue())["benchmark_tables"]
        return {name.removeprefix("qmsum_"): pd.DataFrame(rows) for name, rows in tables.items()}

    assert case_counts("qmsum", own_tables()) == {"recall": 2}  # qmsum's own table is the recall mode's
    assert case_counts("qmsum", own_tables("--variant", "wide")) == {"recall": 3}
    assert case_counts("qmsum", own_tables("--run", "qmsum-recall-new")) == {"recall": 1}
