"""``python -m agentlab.bench retention``: the LLM-free retention table, stored, resumable, with clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlab.bench import analysis
from agentlab.bench.retention.questions import model_arms, retention_arms
from tests.bench.cli_helpers import run_cli


def _json(*argv: str) -> dict:
    code, out, err = run_cli("retention", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_tool_results_qmsum_every_free_arm_stored_and_skipped_ones_named(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    result = _json("qmsum", "--limit", "3", "--set", "dataset.delivery=tool_results", "--context-budget", "3000",
                   "--db", str(db))
    by_arm = {s["arm"]: s for s in result["summaries"]}
    assert set(by_arm) == set(retention_arms())
    assert set(result["skipped"]) == set(model_arms())
    assert (result["delivery"], result["chunk_turns"], result["context_budget"]) == ("tool_results", 40, 3000)
    assert result["context_budget_source"] == "--context-budget" and result["model"] is None
    assert by_arm["long_context"]["retained"] == 1.0
    # At a 3,000-token budget the tool-clearing peers clear most reads: evidence is lost.
    assert by_arm["langchain_clear_tool_uses"]["retained"] < 1.0
    assert by_arm["langchain_clear_tool_uses"]["mean_peak_prompt_tokens"] < by_arm["long_context"]["mean_peak_prompt_tokens"]
    assert by_arm["compaction_recall"]["recoverable"]["5"] >= by_arm["compaction_recall"]["retained"]
    frame = analysis.retention_df("qmsum", db=db)
    assert len(frame) == 3 * len(retention_arms()) == result["stored_rows"]
    assert set(frame["context_budget"]) == {3000} and set(frame["chunk_turns"]) == {40}
    # The stored per-case rows average to the printed summary.
    stored = frame[frame["arm"] == "langchain_clear_tool_uses"]["retained"].mean()
    assert stored == pytest.approx(by_arm["langchain_clear_tool_uses"]["retained"])


def test_measuring_again_replaces_rows_and_another_budget_sits_beside_them(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    args = ("qmsum", "--limit", "2", "--arms", "long_context,inspect_trim", "--set", "dataset.delivery=tool_results",
            "--db", str(db))
    _json(*args)
    _json(*args)
    assert len(analysis.retention_df(db=db)) == 4
    _json(*args, "--context-budget", "4000")
    counts = analysis.retention_df(db=db).groupby("context_budget").size().to_dict()
    assert counts == {4000: 4, 8192: 4}


def test_turn_delivery_locomo_long_context_keeps_everything_and_the_table_is_printed(tmp_path: Path) -> None:
    code, out, err = run_cli("retention", "locomo", "--limit", "5", "--arms", "long_context,inspect_trim,rolling_summary",
                             "--db", str(tmp_path / "r.duckdb"))
    assert code == 0, err
    assert "5 cases, turns delivery, context budget 8192 tokens (the retention default), no model called" in out
    line = next(x for x in out.splitlines() if x.startswith("long_context"))
    assert line.split()[2] == "1.000"
    assert "skipped (they need a model; this command calls none):" in out and "rolling_summary" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("qmsum", "--arms", "nope"), "unknown arm 'nope'"),
    (("qmsum", "--arms", "rolling_summary"), "every arm named needs a model"),
    (("qmsum", "--set", "dataset.delivery=email"), "qmsum [dataset]"),
    (("qmsum", "--set", "dataset.chunk_turns=many"), "qmsum [dataset]"),
    (("mtbench101",), "benchmarks with retention: locomo, longmemeval, qmsum"),
    (("qmsum", "--limit", "-1"), "--limit must be >= 0"),
    (("qmsum", "--context-budget", "0"), "--context-budget must be >= 1"),
])
def test_bad_input_is_one_error_line_and_nothing_is_written(tmp_path: Path, argv: tuple[str, ...], message: str) -> None:
    db = tmp_path / "r.duckdb"
    code, out, err = run_cli("retention", *argv, "--db", str(db))
    assert code == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not db.exists()


def test_no_store_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    result = _json("qmsum", "--limit", "1", "--arms", "long_context", "--no-store", "--db", str(db))
    assert result["stored_rows"] == 0 and not db.exists()

