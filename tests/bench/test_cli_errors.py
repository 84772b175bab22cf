"""User mistakes and the context window through ``agentlab.bench.cli.main.main`` with the real HTTP client.

Every mistake ends with exit status 2 and one line ``error: …`` naming the thing and the fix; a
results file that existed before is byte-for-byte unchanged. The model is the real
:class:`~agentlab.model.openai_compat.OpenAICompatModel` talking to a local fake server.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from fake_openai_server import Answer, FakeOpenAIServer, completion  # noqa: E402

from agentlab.bench.store.results import CaseRecord, ResultStore, RunInfo  # noqa: E402

pytestmark = pytest.mark.usefixtures("real_model_env")

VLLM_131K = {"/v1/models": {"object": "list", "data": [{"id": "served", "max_model_len": 131072}]}}


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.fixture
def stored_db(tmp_path: Path) -> Path:
    """A results file holding one finished case, as a user's earlier work would."""
    path = tmp_path / "results.duckdb"
    with ResultStore(path) as store:
        store.start_run(RunInfo("r1", "demo", "long_context", {"x": 1}, "m", None, "sha", "v", "1"))
        store.write_case(CaseRecord("r1", "d01", "ok", prediction="item 1 is red"))
        store.finish_run("r1", "finished")
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------------- window


def test_window_stated_by_the_server_is_used_stored_and_printed(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    with FakeOpenAIServer([Answer(body=completion("item 1 is red"))], routes=VLLM_131K) as server:
        code, out, err = run_cli("demo", "--model", f"openai:served@{server.base_url}", "--limit", "2",
                                 "--set", "judge.enabled=false", "--db", str(db), "--no-progress")
    assert code == 0, err
    assert "context window 131072 tokens (server:/v1/models max_model_len)" in out
    assert len(server.requests) == 2
    with ResultStore(db) as store:
        (config,) = store.query("SELECT config FROM runs")[0]
        assert store.query("SELECT count(*) FROM cases WHERE status = 'ok'") == [(2,)]
        assert store.query("SELECT attempts FROM calls") == [(1,), (1,)]
    config = json.loads(config)
    assert (config["context_window"], config["context_window_source"]) == (131072, "server:/v1/models max_model_len")


def test_unknown_window_stops_before_any_case(tmp_path: Path, stored_db: Path) -> None:
    before = digest(stored_db)
    with FakeOpenAIServer([Answer(body=completion("x"))]) as server:
        code, _, err = run_cli("demo", "--model", f"openai:served@{server.base_url}", "--db", str(stored_db),
                               "--no-progress")
    assert_one_line_error(code, err, "--context-window", "'served'", "unknown")
    assert server.requests == [] and digest(stored_db) == before


def test_context_window_flag_runs_and_changes_the_run_id(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    with FakeOpenAIServer([Answer(body=completion("item 1 is red"))], routes=VLLM_131K) as server:
        args = ["demo", "--model", f"openai:served@{server.base_url}", "--limit", "1", "--set", "judge.enabled=false",
                "--db", str(db), "--no-progress", "--json"]
        code, out, err = run_cli(*args, "--context-window", "4096")
        assert code == 0, err
        flagged = json.loads(out)
        code, out, err = run_cli(*args)
        probed = json.loads(out)
    assert (flagged["context_window"], flagged["context_window_source"]) == (4096, "--context-window")
    assert probed["context_window"] == 131072 and probed["run_id"] != flagged["run_id"]


# ------------------------------------------------------------------------------- mistakes


def test_unreachable_server(stored_db: Path) -> None:
    before = digest(stored_db)
    code, _, err = run_cli("demo", "--model", f"openai:served@http://127.0.0.1:{free_port()}/v1",
                           "--context-window", "8192", "--db", str(stored_db))
    assert_one_line_error(code, err, "cannot be reached", "--model", "start it")
    assert digest(stored_db) == before


@pytest.mark.parametrize("spec", ["anthropic:claude", "openai:", "gpt-4o-mini"])
def test_bad_model_spec(spec: str, stored_db: Path) -> None:
    before = digest(stored_db)
    code, _, err = run_cli("demo", "--model", spec, "--db", str(stored_db))
    assert_one_line_error(code, err, "--model", "unknown model spec", "openai:<model>@<base_url>")
    assert digest(stored_db) == before


def test_bad_judge_model_spec(stored_db: Path) -> None:
    with FakeOpenAIServer([Answer(body=completion("x"))], routes=VLLM_131K) as server:
        code, _, err = run_cli("demo", "--model", f"openai:served@{server.base_url}", "--judge-model", "judge-x",
                               "--db", str(stored_db))
    assert_one_line_error(code, err, "--judge-model", "unknown model spec")


def test_missing_api_key(stored_db: Path) -> None:
    before = digest(stored_db)
    code, _, err = run_cli("demo", "--model", "openai:gpt-4o-mini", "--db", str(stored_db))
    assert_one_line_error(code, err, "OPENAI_API_KEY", "export OPENAI_API_KEY")
    assert digest(stored_db) == before


def test_server_refusing_the_key(stored_db: Path) -> None:
    routes = {"/v1/models": Answer(401, {"error": {"message": "Incorrect API key provided"}})}
    with FakeOpenAIServer([Answer(body=completion("x"))], routes=routes) as server:
        for extra in ([], ["--context-window", "65536"]):
            code, _, err = run_cli("demo", "--model", f"openai:deepseek-chat@{server.base_url}",
                                   "--db", str(stored_db), *extra)
            assert_one_line_error(code, err, "refused the API key", "HTTP 401", "OPENAI_API_KEY")
    assert server.requests == []


def test_local_server_needs_no_api_key(tmp_path: Path) -> None:
    with FakeOpenAIServer([Answer(body=completion("item 1 is red"))], routes=VLLM_131K) as server:
        code, _, err = run_cli("demo", "--model", f"openai:served@{server.base_url}", "--limit", "1",
                               "--set", "judge.enabled=false", "--db", str(tmp_path / "r.duckdb"), "--no-progress")
    assert code == 0, err


def test_corrupt_results_file_is_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "notes.duckdb"
    db.write_text("my notes, not a database\n" * 100)
    before = digest(db)
    with FakeOpenAIServer([Answer(body=completion("x"))], routes=VLLM_131K) as server:
        code, _, err = run_cli("demo", "--model", f"openai:served@{server.base_url}", "--db", str(db))
        assert_one_line_error(code, err, str(db), "not a readable DuckDB file", "--db")
        assert server.requests == []
    code, _, err = run_cli("report", "demo", "--db", str(db))
    assert_one_line_error(code, err, "not a readable DuckDB file")
    assert digest(db) == before


@pytest.mark.parametrize("locked", ["results", "cache"])
def test_locked_duckdb_file(locked: str, stored_db: Path, tmp_path: Path) -> None:
    path = stored_db if locked == "results" else tmp_path / "cache.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, duckdb
            conn = duckdb.connect({str(path)!r})
            print("locked", flush=True)
            sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with FakeOpenAIServer([Answer(body=completion("x"))], routes=VLLM_131K) as server:
            code, _, err = run_cli("demo", "--model", f"openai:served@{server.base_url}", "--db", str(stored_db))
        fix = "--db" if locked == "results" else "AGENTLAB_CACHE_DB"
        assert_one_line_error(code, err, str(path), "in use by another process", f"PID {holder.pid}", fix)
        assert server.requests == []
    finally:
        holder.communicate("", timeout=30)
    with ResultStore(stored_db, read_only=True) as store:
        assert store.query("SELECT case_id, prediction FROM cases") == [("d01", "item 1 is red")]


@pytest.mark.parametrize("extra", [[], ["--dry-run"], ["--retrieval-only"]])
def test_negative_limit(extra: list[str], stored_db: Path) -> None:
    before = digest(stored_db)
    code, _, err = run_cli("demo", "--limit", "-1", "--db", str(stored_db), *extra)
    assert_one_line_error(code, err, "--limit must be >= 0", "-1")
    assert digest(stored_db) == before


def test_retrieval_only_without_retrieval(stored_db: Path) -> None:
    code, _, err = run_cli("mtbench101", "--retrieval-only", "--db", str(stored_db))
    assert_one_line_error(code, err, "mtbench101 has no retrieval", "--retrieval-only", "qmsum")


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["qmsum", "--mode", "recall", "--set", "recall.search_top_k=0"],
         ["qmsum [recall]", "RecallPolicy", "search_top_k must be >= 1", "--set"]),
        (["qmsum", "--mode", "recall", "--set", "recall.qa=x"],
         ["qmsum [recall] qa must be one of tool, preload; got 'x'", "--set recall.qa=x"]),
        (["qmsum", "--mode", "recall", "--set", "recall.top_k=3"],
         ["qmsum [recall] has no field 'top_k'", "did you mean 'search_top_k'", "valid fields:", "window_before"]),
        (["qmsum", "--mode", "summary", "--set", "summary.prompt=nine_sections"],
         ["unknown built-in prompt 'nine_sections'", "compact, nine_section", "--set"]),
        (["longmemeval", "--mode", "recall", "--set", "recall.search_mode=fuzzy"], ["RecallPolicy", "fuzzy"]),
        (["mtbench101", "--mode", "summary", "--set", "summary.checks_mode=some"], ["checks_mode", "'some'"]),
        (["locomo", "--mode", "memory", "--set", "memory.update_policy=forget"], ["forget"]),
    ],
    ids=["recall-top-k", "recall-qa", "renamed-field", "prompt-name", "search-mode", "checks-mode", "memory-update-policy"],
)
def test_a_value_a_policy_rejects_stops_before_any_case(argv: list[str], needles: list[str], stored_db: Path) -> None:
    before = digest(stored_db)
    code, _, err = run_cli(*argv, "--model", "openai:m@http://127.0.0.1:9/v1", "--db", str(stored_db))
    assert_one_line_error(code, err, *needles)
    assert digest(stored_db) == before


def test_toml_list_in_set(tmp_path: Path) -> None:
    from agentlab.bench.config import Settings, SettingsError, apply_overrides

    base = Settings({"dataset": {"categories": [1, 2, 3, 4, 5], "tasks": ["CM", "SI"]}})
    assert apply_overrides(base, ["dataset.categories=[1,4]"])["dataset"]["categories"] == [1, 4]
    assert apply_overrides(base, ["dataset.categories=[ 2, 3 ]"])["dataset"]["categories"] == [2, 3]
    assert apply_overrides(base, ["dataset.categories=1,4"])["dataset"]["categories"] == [1, 4]
    assert apply_overrides(base, ['dataset.tasks=["AR", "TS"]'])["dataset"]["tasks"] == ["AR", "TS"]
    assert apply_overrides(base, ["dataset.tasks=[AR,TS]"])["dataset"]["tasks"] == ["AR", "TS"]
    with pytest.raises(SettingsError, match="categories must be a list of integers; got"):
        apply_overrides(base, ["dataset.categories=[1,x]"])
    with pytest.raises(SettingsError, match="must end with"):
        apply_overrides(base, ["dataset.categories=[1,4"])


def _locomo_available() -> bool:
    data_dir = os.environ.get("AGENTLAB_DATA_DIR")
    return bool(data_dir) and any(Path(data_dir, "locomo").glob("*.json"))


@pytest.mark.skipif(not _locomo_available(), reason="needs the LoCoMo data under $AGENTLAB_DATA_DIR")
def test_toml_list_through_the_cli_selects_categories() -> None:
    code, out, err = run_cli("locomo", "--mode", "long_context", "--dry-run", "--json", "--limit", "0",
                             "--set", "dataset.categories=[1,4]")
    assert code == 0, err
    one = json.loads(run_cli("locomo", "--mode", "long_context", "--dry-run", "--json", "--limit", "0",
                             "--set", "dataset.categories=[1]")[1])
    assert 0 < one["cases"] < json.loads(out)["cases"]
    code, _, err = run_cli("locomo", "--dry-run", "--set", "dataset.categories=[1,9]")
    assert_one_line_error(code, err, "locomo [dataset] categories must be some of 1, 2, 3, 4, 5", "[1, 9]")
