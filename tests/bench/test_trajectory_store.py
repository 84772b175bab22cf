"""``retention trajectories`` stores its rows (``trajectory_retention``), and both retention measures their
prompt-cache figures (``prompt_cache``): what is stored is what was printed, re-measuring replaces it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentlab.bench import analysis
from agentlab.bench.retention.trajectories import TRAJECTORY_RETENTION_VERSION
from agentlab.bench.store.cache import COLUMNS as CACHE_COLUMNS
from agentlab.bench.store.results import ResultStore
from agentlab.bench.store.trajectories import COLUMNS as TRAJECTORY_COLUMNS
from tests.bench.cli_helpers import run_cli

DATA = Path(os.environ.get("AGENTLAB_DATA_DIR", "/nonexistent")) / "agent_trajectories"
needs_trajectories = pytest.mark.skipif(not DATA.is_dir(), reason="needs $AGENTLAB_DATA_DIR/agent_trajectories")
#: Two tau-bench trajectories (one without supports) under the baseline and a trimming arm, which hides
#: supports at 2,048 tokens.
TAU = ("trajectories", "--arms", "long_context,inspect_trim", "--limit", "2", "--context-budget", "2048",
       "--set", "dataset.datasets=tau_bench")


def _json(*argv: str) -> dict:
    code, out, err = run_cli("retention", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@needs_trajectories
def test_stored_trajectory_rows_average_to_the_json_summaries(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    result = _json(*TAU, "--db", str(db))
    frame = analysis.trajectory_retention_df(db=db)
    assert len(frame) == 2 * 2 == result["stored_rows"] and result["stored_cache_rows"] == 0
    assert set(frame["context_budget"]) == {2048} and set(frame["dataset"]) == {"tau_bench"}
    assert set(frame["retention_version"]) == {TRAJECTORY_RETENTION_VERSION}
    for s in result["summaries"]:
        mine = frame[frame["arm"] == s["arm"]]
        assert len(mine) == s["n_trajectories"]
        assert mine["supported"].mean() == pytest.approx(s["supported"]["mean"])
        assert mine["refetch_tokens"].mean() == pytest.approx(s["mean_refetch_tokens"])
        assert mine["total_prompt_tokens"].mean() == pytest.approx(s["mean_total_prompt_tokens"])
        assert mine["peak_prompt_tokens"].max() == s["max_peak_prompt_tokens"]
        assert mine["recorded_reward"].mean() == pytest.approx(s["recorded_reward"])
    assert frame["supported"].isna().sum() == 2  # a trajectory without supports: NULL, not 0, for both arms
    masked = frame[frame["arm"] == "inspect_trim"]
    assert masked["n_hidden"].sum() > 0  # the trimming hid supports: the hidden lists are not all empty
    assert [len(json.loads(h)) for h in masked["hidden"]] == masked["n_hidden"].tolist()
    assert frame[frame["arm"] == "long_context"]["n_hidden"].sum() == 0
    assert analysis.prompt_cache_df(db=db).empty  # no cache profile: no cache rows
    assert len(analysis.trajectory_retention_df(arm="long_context", db=db)) == 2


@needs_trajectories
def test_measuring_again_replaces_rows_and_another_budget_sits_beside_them(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    _json(*TAU, "--db", str(db))
    first = analysis.trajectory_retention_df(db=db)["measured_at"].max()
    _json(*TAU, "--db", str(db))
    again = analysis.trajectory_retention_df(db=db)
    assert len(again) == 4 and again["measured_at"].min() > first
    _json(*TAU, "--db", str(db), "--context-budget", "4096")
    counts = analysis.trajectory_retention_df(db=db).groupby("context_budget").size().to_dict()
    assert counts == {2048: 4, 4096: 4}


@needs_trajectories
def test_no_store_writes_nothing_and_the_last_line_says_what_was_stored(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    assert _json(*TAU, "--no-store", "--db", str(db))["stored_rows"] == 0
    code, out, err = run_cli("retention", *TAU, "--no-store", "--db", str(db))
    assert code == 0, err
    assert out.splitlines()[-1].endswith("; nothing stored") and not db.exists()
    code, out, err = run_cli("retention", *TAU, "--db", str(db), "--cache-profile", "openai")
    assert code == 0, err
    assert out.splitlines()[-1].endswith(f"; 4 rows stored in {db} (table trajectory_retention) "
                                         "and 4 in table prompt_cache")


@needs_trajectories
def test_trajectory_cache_rows_sum_to_the_json_means(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    result = _json(*TAU, "--db", str(db), "--cache-profile", "openai")
    assert result["stored_cache_rows"] == 4 and result["price_model"] == "gpt-4.1"
    cache = analysis.prompt_cache_df("trajectories", db=db)
    assert len(cache) == 4 and set(cache["cache_profile"]) == {"openai"} and set(cache["delivery"]) == {"recorded"}
    assert cache["chunk_turns"].isna().all() and set(cache["price_model"]) == {"gpt-4.1"}
    for s in result["summaries"]:
        mine, extra, n = cache[cache["arm"] == s["arm"]], s["extra"], s["n_trajectories"]
        assert mine["cached_tokens"].sum() == pytest.approx(extra["cached_tokens"] * n)
        assert mine["prompt_tokens"].sum() == pytest.approx(extra["raw_tokens"] * n)
        assert mine["n_busts"].sum() == pytest.approx(extra["cache_busts"] * n)
        assert mine["net_cost_usd"].mean() == pytest.approx(extra["net_cost_usd"])
        assert mine["raw_cost_usd"].mean() == pytest.approx(extra["raw_cost_usd"])
    assert (cache["cached_tokens"] > 0).any()
    assert analysis.prompt_cache_df("retention", db=db).empty


def test_qa_retention_cache_rows_beside_the_retention_rows_one_per_profile(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    qa = ("qmsum", "--limit", "2", "--arms", "long_context,anthropic_clear_tool_uses",
          "--set", "dataset.delivery=tool_results", "--db", str(db))
    result = _json(*qa, "--cache-profile", "openai")
    assert result["stored_rows"] == 4 == result["stored_cache_rows"]
    assert len(analysis.retention_df(db=db)) == 4
    cache = analysis.prompt_cache_df("retention", db=db)
    assert len(cache) == 4 and set(cache["chunk_turns"]) == {40} and set(cache["benchmark"]) == {"qmsum"}
    for s in result["summaries"]:
        mine, extra, n = cache[cache["arm"] == s["arm"]], s["extra"], s["n_cases"]
        assert mine["cached_tokens"].sum() == pytest.approx(extra["cached_tokens"] * n)
        assert mine["uncached_tokens"].sum() == pytest.approx(extra["uncached_tokens"] * n)
        assert mine["net_cost_usd"].mean() == pytest.approx(extra["net_cost_usd"])
    assert cache[cache["arm"] == "anthropic_clear_tool_uses"]["n_busts"].sum() > 0
    # Another profile (here with no price) adds its rows beside the first's; the costs are missing.
    again = _json(*qa, "--cache-profile", "anthropic", "--price-model", "no-such-model")
    assert again["stored_cache_rows"] == 4
    cache = analysis.prompt_cache_df(db=db)
    assert cache.groupby("cache_profile").size().to_dict() == {"anthropic": 4, "openai": 4}
    anthropic = cache[cache["cache_profile"] == "anthropic"]
    assert anthropic["net_cost_usd"].isna().all() and anthropic["raw_cost_usd"].isna().all()
    assert set(anthropic["price_model"]) == {"no-such-model"}
    assert len(analysis.prompt_cache_df(arm="long_context", db=db)) == 4
    assert len(analysis.retention_df(db=db)) == 4  # the retention rows were replaced, not doubled


def test_qa_retention_without_a_cache_profile_stores_no_cache_rows(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    code, out, err = run_cli("retention", "qmsum", "--limit", "1", "--arms", "long_context", "--db", str(db))
    assert code == 0, err
    assert out.splitlines()[-1].endswith(f"; 1 rows stored in {db} (table retention)")
    assert analysis.prompt_cache_df(db=db).empty


def test_readers_give_the_columns_on_a_file_without_the_tables(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    ResultStore(db).close()
    trajectories = analysis.trajectory_retention_df(db=db)
    cache = analysis.prompt_cache_df("trajectories", db=db)
    assert trajectories.empty and list(trajectories.columns) == [name for name, _ in TRAJECTORY_COLUMNS]
    assert cache.empty and list(cache.columns) == [name for name, _ in CACHE_COLUMNS]
    assert {"supported", "hidden", "n_hidden", "code_version"} <= set(trajectories.columns)
    assert {"cached_tokens", "hit_rate", "net_cost_usd", "cache_profile"} <= set(cache.columns)


def test_bounds_are_stored_and_a_file_made_before_them_gets_the_columns(tmp_path: Path) -> None:
    import duckdb

    from agentlab.bench.retention.trajectories import TrajectoryRow
    from agentlab.bench.store.retention import replace_rows
    from agentlab.bench.store.trajectories import TRAJECTORY_RETENTION, trajectory_records

    db = tmp_path / "old.duckdb"
    old = [c for c in TRAJECTORY_COLUMNS if c[0] not in {"supported_lo", "supported_hi", "summary_tokens",
                                                           "summary_calls", "summary_input_tokens",
                                                           "summary_output_tokens"}]
    assert len(old) == len(TRAJECTORY_COLUMNS) - 6
    con = duckdb.connect(str(db))
    con.execute(f"CREATE TABLE trajectory_retention ({', '.join(f'{n} {k}' for n, k in old)}, "
                "PRIMARY KEY (dataset, context_budget, arm, traj_id))")
    key = {"dataset": "d", "context_budget": 1, "arm": "old_arm", "traj_id": "t0"}
    con.execute(f"INSERT INTO trajectory_retention VALUES ({', '.join('?' for _ in old)})",
                [key.get(n) for n, _ in old])
    con.close()
    row = TrajectoryRow("t1", "d", "summ", 3, 1, 2, 0.5, None, 1, 10, 1, 10, 5, 0.0, supported_lo=0.5,
                        supported_hi=1.0, summary_tokens=40, summary_calls=1, summary_input_tokens=30,
                        summary_output_tokens=40)
    assert replace_rows(db, [(TRAJECTORY_RETENTION, trajectory_records([row], context_budget=1,
                                                                       code_version="x"))]) == [1]
    frame = analysis.trajectory_retention_df(db=db)
    assert list(frame.columns) == [n for n, _ in TRAJECTORY_COLUMNS]
    new = frame[frame["arm"] == "summ"].iloc[0]
    assert (new["supported_lo"], new["supported_hi"], new["summary_tokens"], new["summary_calls"],
            new["summary_input_tokens"], new["summary_output_tokens"]) == (0.5, 1.0, 40, 1, 30, 40)
    assert frame[frame["arm"] == "old_arm"]["supported_hi"].isna().all()
