"""The report's and league's prompt-cache columns from stored calls (agentlab/bench/scoring/call_costs.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from agentlab.bench.scoring.call_costs import run_costs, with_run_costs
from agentlab.bench.store.results import ResultStore

ROWS = [  # run_id, case_id, seq, purpose, model, prompt, completion, cached, error
    ("a", "c1", 0, "answer", "gpt-4.1", 4000, 100, 3072, None),
    ("a", "c1", 1, "answer", "gpt-4.1", 5000, 100, 3968, None),
    ("a", "c2", 0, "answer", "gpt-4.1", 2000, 50, 0, None),
    ("a", "c2", 1, "summary", "gpt-4.1", 9000, 500, 0, None),  # not an answer call: left out
    ("a", "c2", 2, "answer", "gpt-4.1", 7000, 0, 0, "timeout"),  # failed: left out
    ("b", "c1", 0, "answer", "local-model", 1000, 10, 0, None),
]


def _store(tmp_path: Path) -> ResultStore:
    store = ResultStore(tmp_path / "r.duckdb")
    for row in ROWS:
        store.query("INSERT INTO calls (run_id, case_id, seq, purpose, model, prompt_tokens, completion_tokens, "
                    "cached_tokens, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", list(row))
    return store


def test_costs_from_reported_cached_tokens_at_the_price_file(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        costs, notes = run_costs(store.query, ["a", "b"])
    a = costs["a"]
    assert a["prompt_tokens"] == pytest.approx((4000 + 5000 + 2000) / 2)
    assert a["cached_tokens"] == pytest.approx((3072 + 3968) / 2)
    assert a["uncached_tokens"] == pytest.approx((11000 - 7040) / 2)
    assert a["cache_hit_pct"] == pytest.approx(64.0)
    # gpt-4.1 in data/prices.toml: 2.00 input, 0.50 cached input, 8.00 output per million tokens.
    assert a["net_cost_usd"] == pytest.approx((3960 * 2.0 + 7040 * 0.5 + 250 * 8.0) / 2 / 1e6)
    assert a["raw_cost_usd"] == pytest.approx((11000 * 2.0 + 250 * 8.0) / 2 / 1e6)
    assert costs["b"]["net_cost_usd"] is None and costs["b"]["cache_hit_pct"] == 0.0
    assert notes == ["no price for local-model in data/prices.toml: cost columns omitted"]


def test_price_model_overrides_and_frames_gain_the_columns(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        frame, notes = with_run_costs(pd.DataFrame({"run_id": ["b", "a", None]}), store.query,
                                      price_model="gpt-4.1")
    assert notes == []
    assert frame.loc[0, "net_cost_usd"] == pytest.approx((1000 * 2.0 + 10 * 8.0) / 1e6)
    assert frame.loc[1, "cached_tokens"] == pytest.approx(3520)
    assert pd.isna(frame.loc[2, "net_cost_usd"])  # a row without a run has no cost
