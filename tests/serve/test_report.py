"""The call log read back: savings per arm and conversation, the cache beside them, the CLI."""

from __future__ import annotations

import io

from serve_helpers import office_conversation as _conversation

from agentlab.bench.cli.main import main as bench_main
from agentlab.serve import savings_df, serve_calls_df
from agentlab.serve.__main__ import main


def test_savings_per_arm_and_conversation(proxy, tmp_path, capsys) -> None:
    db = str(tmp_path / "report.duckdb")
    server = proxy("compaction", db=db)
    _conversation(server, "alice")
    _conversation(server, "bob", turns=2)
    live = serve_calls_df(server)
    assert len(live) == 10
    assert (live["saved_tokens"] == live["client_prompt_tokens"] - live["upstream_prompt_tokens"]).all()
    server.stop()
    calls = serve_calls_df(db)  # the file, once the server let it go
    table = savings_df(db)
    assert len(table) == 2 and set(table["arm"]) == {"compaction"}
    alice = table[table["calls"] == 6].iloc[0]
    rows = calls[calls["conversation_id"] == alice["conversation_id"]]
    assert alice["saved_tokens"] == (rows["client_prompt_tokens"] - rows["upstream_prompt_tokens"]).sum() > 1500
    # Compacting the first result broke the prefix a provider had cached: the loss shows beside the saving.
    assert alice["cache_loss_tokens"] > 0
    assert alice["net_saved_uncached"] < alice["saved_tokens"]
    assert alice["usage_cached_tokens"] > 0 and 0 < alice["cache_hit_pct"] < 100
    bob = table[table["calls"] == 4].iloc[0]
    assert bob["saved_tokens"] == 0 and bob["cache_loss_tokens"] == 0  # two turns: nothing old enough yet
    by_arm = savings_df(db, by=["arm"])
    assert by_arm.iloc[0]["calls"] == 10 and by_arm.iloc[0]["saved_tokens"] == alice["saved_tokens"]
    assert main(["report", "--db", db, "--by", "arm"]) == 0
    out = capsys.readouterr().out
    assert "compaction" in out and "saved_tokens" in out and "cache_loss_tokens" in out


def test_cli_errors_are_one_line(tmp_path, capsys) -> None:
    assert main(["--upstream", "http://127.0.0.1:9/v1", "--arm", "bogus"]) == 2
    assert "unknown arm 'bogus'; known arms: long_context, summary" in capsys.readouterr().err
    assert main(["--upstream", "http://127.0.0.1:9/v1", "--host", "0.0.0.0"]) == 2
    assert "requires --api-key" in capsys.readouterr().err
    assert main(["report", "--db", str(tmp_path / "missing.duckdb")]) == 2
    assert "no serve database" in capsys.readouterr().err


def test_the_savings_can_be_read_while_the_proxy_holds_the_database(proxy, tmp_path, capsys) -> None:
    db = str(tmp_path / "live.duckdb")
    server = proxy("compaction", db=db, api_keys=("key-alice", "key-bob"))
    _conversation(server, "key-alice")
    _conversation(server, "key-bob", turns=2)
    server.settle()  # the last rows are written just after their answers went out
    # Through the running server (no second connection to the file): each key reads its own tenant.
    alice = serve_calls_df(url=server.base_url, api_key="key-alice")
    assert len(alice) == 6 and alice["tenant"].nunique() == 1
    assert (alice["saved_tokens"] == alice["client_prompt_tokens"] - alice["upstream_prompt_tokens"]).all()
    assert alice["saved_tokens"].sum() > 0
    live = savings_df(url=server.base_url, api_key="key-bob")
    assert len(live) == 1 and int(live["calls"].iloc[0]) == 4
    assert main(["report", "--url", server.base_url, "--api-key", "key-alice"]) == 0
    out = capsys.readouterr().out
    assert "compaction" in out and "saved_tokens" in out
    assert main(["report", "--url", server.base_url, "--api-key", "wrong"]) == 2
    assert "HTTP 401" in capsys.readouterr().err
    # The benchmark CLI's `report serve` is the same report, read through the same route.
    bench_out = io.StringIO()
    assert bench_main(["report", "serve", "--url", server.base_url, "--api-key", "key-alice"], bench_out) == 0
    assert bench_out.getvalue() == out
    assert bench_main(["report", "serve", "--url", server.base_url, "--api-key", "wrong"], io.StringIO()) == 2
    assert capsys.readouterr().err.startswith(f"error: {server.base_url}: HTTP 401")
    server.stop()
    # What the route gave is what the file holds.
    on_disk = savings_df(db)
    assert sorted(on_disk["calls"]) == [4, 6]


def test_without_a_key_the_start_warns_that_the_call_log_is_open_to_the_machine() -> None:
    from agentlab.serve import ServeConfig

    warnings = ServeConfig(upstream="http://127.0.0.1:9/v1").warnings()
    assert len(warnings) == 1 and "/v1/agentlab/exchanges" in warnings[0] and "--api-key" in warnings[0]
    assert ServeConfig(upstream="http://127.0.0.1:9/v1", api_key="k").warnings() == []


def test_a_database_held_by_a_server_suggests_reading_it_with_url(tmp_path, capsys) -> None:
    import subprocess
    import sys

    db = tmp_path / "held.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); "
        "con.execute('CREATE TABLE serve_calls (x INTEGER)'); print('held', flush=True); time.sleep(60)"), str(db)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert main(["report", "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert "in use by another process" in err and "report --url http://HOST:PORT/v1" in err
    finally:
        holder.kill()
        holder.wait()
