"""``report serve``'s prompt-cache columns: the estimate beside what the upstream reported, through the openai client."""

from __future__ import annotations

import pytest
from serve_helpers import office_conversation as _conversation

from agentlab.serve import serve_calls_df
from agentlab.serve.__main__ import main
from agentlab.serve.cache_report import cache_savings_df, with_estimates


def test_reported_cached_tokens_beside_the_estimate(proxy, tmp_path, capsys) -> None:
    db = str(tmp_path / "cache.duckdb")
    server = proxy("passthrough", db=db)
    _conversation(server, "alice", turns=4)
    _conversation(server, "bob", turns=4, arm="compaction")
    server.stop()
    calls = with_estimates(serve_calls_df(db))
    # Per call: the estimate is the upstream's shared prefix at OpenAI's minimum and step.
    assert (calls["est_cached_tokens"] % 128 == 0).all()
    assert ((calls["est_cached_tokens"] == 0) | (calls["est_cached_tokens"] >= 1024)).all()
    assert (calls["est_cached_tokens"] <= calls["upstream_prefix_tokens"]).all()
    table, notes = cache_savings_df(db, by=["arm"])
    by_arm = table.set_index("arm")
    passthrough, compaction = by_arm.loc["long_context"], by_arm.loc["compaction"]
    # The upstream (the test server's prefix cache) and the estimate both see the repeated prefix.
    assert passthrough["usage_cached_tokens"] > 0 and passthrough["est_cached_tokens"] > 0
    assert passthrough["cache_busts"] == 0  # the passthrough arm rewrites nothing
    # Two counts of the same prefixes (the server counts whole messages without the 128-token step): close.
    assert abs(passthrough["est_hit_pct"] - passthrough["cache_hit_pct"]) < 5
    # Compaction rewrites old tool results: the estimate counts the calls that broke the client's prefix,
    # and both the reported and the estimated hit rates fall below the passthrough arm's.
    assert compaction["cache_busts"] > 0
    assert compaction["cache_hit_pct"] < passthrough["cache_hit_pct"]
    assert compaction["est_hit_pct"] < passthrough["est_hit_pct"]
    assert (table["passthrough_hit_pct"] == passthrough["cache_hit_pct"]).all()
    # test-model has no price: token columns only, said once.
    assert notes == ["no price for test-model in data/prices.toml: cost columns omitted"]
    assert "net_cost_usd" not in table.columns
    priced, notes = cache_savings_df(db, by=["arm"], price_model="gpt-4.1")
    row = priced.set_index("arm").loc["long_context"]
    assert 0 < row["net_cost_usd"] and 0 < row["est_net_cost_usd"]
    assert notes[0].startswith("costs priced as gpt-4.1")
    assert main(["report", "--db", db, "--by", "arm"]) == 0
    out = capsys.readouterr().out
    assert "est_cached_tokens" in out and "usage_cached_tokens" in out and "passthrough_hit_pct" in out
    assert out.count("no price for test-model in data/prices.toml: cost columns omitted") == 1


def test_the_anthropic_profile_is_refused_with_the_reason(proxy, tmp_path, capsys) -> None:
    db = str(tmp_path / "c.duckdb")
    server = proxy("passthrough", db=db)
    _conversation(server, "carol", turns=1)
    server.stop()
    with pytest.raises(ValueError, match="not the requests"):
        cache_savings_df(db, profile="anthropic")
