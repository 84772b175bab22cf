"""The CLI against :class:`~agentlab.testing.openai_server.OpenAITestServer`, a server that behaves
like vLLM / llama.cpp / Ollama: the window it states is found and used, a prompt it refuses is a
``context_length`` failure, and transient faults are retried and counted, not scored."""

from __future__ import annotations

import json
import os
from pathlib import Path

import bench_demo_task  # noqa: F401 - registers the "demo" task
import pytest
from cli_helpers import run_cli

from agentlab.bench.store.results import ResultStore
from agentlab.model import ContextWindowUnknown, get_model
from agentlab.testing.openai_server import OpenAITestServer

pytestmark = pytest.mark.usefixtures("real_model_env")


@pytest.mark.parametrize(
    ("style", "source"),
    [("vllm", "server:/v1/models max_model_len"), ("openrouter", "server:/v1/models context_length"),
     ("llamacpp", "server:/props default_generation_settings.n_ctx"),
     ("ollama", "server:/api/show model_info llama.context_length")],
)
def test_each_server_family_window_is_found(style: str, source: str) -> None:
    with OpenAITestServer(context_window=65_536, window_style=style) as server:
        info = get_model(server.model_spec, cache=False).info
    assert (info.context_window, info.context_window_source) == (65_536, source)


def test_a_server_stating_no_window_leaves_an_unknown_model_unresolved() -> None:
    with OpenAITestServer(context_window=65_536, window_style="none") as server:
        with pytest.raises(ContextWindowUnknown, match="--context-window"):
            _ = get_model(server.model_spec, cache=False).info


def test_garbage_and_empty_200s_are_retried_and_the_attempts_stored(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    with OpenAITestServer(fault_rate=0.4, faults=("garbage", "empty", "500"), seed=1) as server:
        code, out, err = run_cli("demo", "--model", server.model_spec, "--limit", "6", "--concurrency", "1",
                                 "--set", "judge.enabled=false", "--db", str(db), "--no-progress", "--json")
        faults = dict(server.stats.faults)
    assert code == 0, err
    result = json.loads(out)
    assert (result["ok"], result["failed"]) == (6, 0)
    assert faults.get("garbage", 0) + faults.get("empty", 0) > 0
    with ResultStore(db, read_only=True) as store:
        attempts = [r[0] for r in store.query("SELECT attempts FROM calls ORDER BY case_id")]
    # Every injected fault is one extra attempt of some call; none of them became a case's answer.
    assert len(attempts) == 6 and sum(attempts) == 6 + sum(faults.values()) and max(attempts) > 1


def _qmsum_available() -> bool:
    data_dir = os.environ.get("AGENTLAB_DATA_DIR")
    return bool(data_dir) and Path(data_dir, "qmsum").is_dir()


needs_qmsum = pytest.mark.skipif(not _qmsum_available(), reason="needs the QMSum data under $AGENTLAB_DATA_DIR")


@needs_qmsum
def test_qmsum_long_context_on_a_128k_server_sends_both_prompts(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    with OpenAITestServer(context_window=131_072, window_style="vllm") as server:
        code, out, err = run_cli("qmsum", "--mode", "long_context", "--limit", "2", "--model", server.model_spec,
                                 "--db", str(db), "--no-progress")
        sent = list(server.stats.prompt_tokens)
    assert code == 0, err
    assert "context window 131072 tokens (server:/v1/models max_model_len)" in out
    assert "2 ok, 0 failed" in out
    answers = [t for t in sent if t > 8192]  # the long-context prompts; judge prompts are short
    assert len(answers) == 2
    with ResultStore(db, read_only=True) as store:
        assert store.query("SELECT count(*) FROM cases WHERE status = 'ok'") == [(2,)]


@needs_qmsum
def test_qmsum_against_a_server_stating_no_window_stops_at_once(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    with OpenAITestServer(context_window=131_072, window_style="none") as server:
        code, _, err = run_cli("qmsum", "--mode", "long_context", "--limit", "2", "--model", server.model_spec,
                               "--db", str(db))
        completions = server.stats.requests.get("POST /v1/chat/completions", 0)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert "--context-window" in err and completions == 0 and not db.exists()


@needs_qmsum
def test_a_prompt_the_server_refuses_is_context_length_and_not_retried(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    # The user claims a larger window than the server has: the server's 400 decides.
    with OpenAITestServer(context_window=8_192, window_style="vllm") as server:
        code, out, err = run_cli("qmsum", "--mode", "long_context", "--limit", "1", "--model", server.model_spec,
                                 "--context-window", "200000", "--db", str(db), "--no-progress", "--json")
        refused = server.stats.answers["context_length"]
    assert code == 0, err
    result = json.loads(out)
    assert result["errors"] == {"context_length": 1} and refused == 1
    with ResultStore(db, read_only=True) as store:
        assert store.query("SELECT error_code FROM cases") == [("context_length",)]
        assert store.query("SELECT purpose, attempts FROM calls") == [("answer", 1)]
