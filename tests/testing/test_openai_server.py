"""The local OpenAI-compatible test server behaves like the server families it imitates."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest

from agentlab.events import Message
from agentlab.model import ContextLengthError, GenerationConfig, ModelRequest, observe_calls
from agentlab.model.openai_compat import OpenAICompatModel
from agentlab.testing.openai_server import OpenAITestServer, extractive_answer, prompt_tokens


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            raw = r.read()
            return r.status, json.loads(raw)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _model(server: OpenAITestServer, **kwargs: Any) -> OpenAICompatModel:
    options: dict[str, Any] = {"max_attempts": 4, "backoff_base": 0.001, "backoff_max": 0.002, "timeout": 5.0}
    options.update(kwargs)
    return OpenAICompatModel(server.model, base_url=server.base_url, api_key="k", **options)


def test_each_style_states_its_window_where_that_server_family_keeps_it() -> None:
    with OpenAITestServer(context_window=131_072, window_style="vllm") as s:
        assert _get(f"{s.base_url}/models")[1]["data"][0]["max_model_len"] == 131_072
        assert _get(f"{s.root_url}/props")[0] == 404
    with OpenAITestServer(context_window=32_768, window_style="openrouter") as s:
        entry = _get(f"{s.base_url}/models")[1]["data"][0]
        assert entry["context_length"] == 32_768 and "max_model_len" not in entry
    with OpenAITestServer(context_window=4_096, window_style="llamacpp") as s:
        assert _get(f"{s.root_url}/props")[1]["default_generation_settings"]["n_ctx"] == 4_096
        assert "max_model_len" not in _get(f"{s.base_url}/models")[1]["data"][0]
    with OpenAITestServer(context_window=8_192, window_style="ollama") as s:
        status, body = _post(f"{s.root_url}/api/show", {"model": s.model})
        assert status == 200 and body["model_info"]["llama.context_length"] == 8_192
    with OpenAITestServer(context_window=2_000, window_style="none") as s:
        entry = _get(f"{s.base_url}/models")[1]["data"][0]
        assert set(entry) == {"id", "object", "created", "owned_by"}
        assert _get(f"{s.root_url}/props")[0] == 404


@pytest.mark.parametrize("style", ["vllm", "llamacpp", "ollama", "openrouter", "none"])
async def test_an_overlong_prompt_is_refused_with_400_and_read_as_context_length(style: str) -> None:
    with OpenAITestServer(context_window=300, window_style=style) as server:
        long_text = "word " * 400
        with pytest.raises(ContextLengthError):
            await _model(server).generate(ModelRequest(messages=[Message.user(long_text)]))
        assert server.stats.answers["context_length"] == 1  # refused once, never retried
        # The requested completion counts against the window too, as on vLLM.
        short = [{"role": "user", "content": "hello there"}]
        assert prompt_tokens(short) < 300
        status, _ = _post(f"{server.base_url}/chat/completions", {"messages": short, "max_tokens": 299})
        assert status == 400


async def test_injected_faults_are_retried_by_the_client_and_counted() -> None:
    with OpenAITestServer(fault_rate=0.5, faults=("429", "500", "503"), seed=3) as server:
        model = _model(server, max_attempts=10)
        calls: list = []
        with observe_calls(calls.append):
            for i in range(6):
                response = await model.generate(ModelRequest(messages=[Message.user(f"question {i} about apples")]))
                assert response.message.content
        assert sum(server.stats.faults.values()) > 0
        assert server.stats.answers["stop"] == 6
        assert len(calls) == 6


def test_garbage_and_empty_faults_answer_200_with_a_body_that_is_no_completion() -> None:
    with OpenAITestServer(fault_rate=1.0, faults=("garbage",)) as server:
        req = urllib.request.Request(f"{server.base_url}/chat/completions",
                                     data=json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode())
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200
            with pytest.raises(json.JSONDecodeError):
                json.loads(r.read())
    with OpenAITestServer(fault_rate=1.0, faults=("empty",)) as server:
        status, body = _post(f"{server.base_url}/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
        assert status == 200 and body["choices"] == []


def test_the_extractive_answer_prefers_the_sentences_that_hold_the_evidence() -> None:
    messages = [
        {"role": "system", "content": "The budget meeting was long. The remote control costs twelve euros. "
                                      "Marketing wanted a yellow case."},
        {"role": "user", "content": "How much does the remote control cost?"},
    ]
    answer = extractive_answer(messages, max_words=8)
    assert "twelve euros" in answer
    assert "yellow" not in answer
    assert extractive_answer([{"role": "user", "content": "anything?"}]) == "I cannot find that in the conversation."


async def test_json_requests_get_judge_verdicts_and_extraction_gets_operations() -> None:
    with OpenAITestServer() as server:
        model = _model(server)
        config = GenerationConfig(response_format="json")
        verdict = json.loads((await model.generate(
            ModelRequest(messages=[Message.user("Gold answer: 4\nGenerated answer: 4")], config=config))).message.content)
        assert verdict["label"] in {"CORRECT", "WRONG"} and verdict["correct"] == (verdict["label"] == "CORRECT")
        again = json.loads((await model.generate(
            ModelRequest(messages=[Message.user("Gold answer: 4\nGenerated answer: 4")], config=config))).message.content)
        assert again == verdict  # deterministic per prompt
        ops = json.loads((await model.generate(ModelRequest(
            messages=[Message.system('Reply {"operations": [...]}'),
                      Message.user("I adopted a grey cat called Pixel last spring.")], config=config))).message.content)
        assert ops["operations"][0]["op"] == "add" and "Pixel" in ops["operations"][0]["text"]


async def test_a_search_tool_is_called_once_then_the_result_is_used() -> None:
    tools = [{"type": "function", "function": {
        "name": "session_search", "description": "search",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]
    with OpenAITestServer() as server:
        model = _model(server)
        first = await model.generate(ModelRequest(messages=[Message.user("Where did Ann travel?")], tools=tools))
        assert [c.name for c in first.message.tool_calls] == ["session_search"]
        assert json.loads(first.message.tool_calls[0].arguments) == {"query": "Where did Ann travel?"}
        call = first.message.tool_calls[0]
        second = await model.generate(ModelRequest(messages=[
            Message.user("Where did Ann travel?"), first.message,
            Message.tool(call.id, "session_search", "Ann travelled to Lisbon in May.")], tools=tools))
        assert not second.message.tool_calls and "Lisbon" in second.message.content
    with OpenAITestServer(tool_calls=False) as server:
        plain = await _model(server).generate(ModelRequest(messages=[Message.user("Where?")], tools=tools))
        assert not plain.message.tool_calls


async def test_streaming_answers_match_the_plain_answer_and_carry_usage() -> None:
    with OpenAITestServer() as server:
        model = _model(server)
        request = ModelRequest(messages=[Message.system("Cats purr. Dogs bark loudly at night."),
                                         Message.user("Which animals bark?")])
        plain = await model.generate(request)
        pieces = [c async for c in model.stream(request)]
        text = "".join(c.delta for c in pieces if getattr(c, "delta", None))
        assert text == plain.message.content
        assert plain.usage is not None and plain.usage.prompt_tokens == prompt_tokens(
            [{"role": "system", "content": "Cats purr. Dogs bark loudly at night."},
             {"role": "user", "content": "Which animals bark?"}])


def test_the_command_line_serves_states_the_spec_and_stops_by_itself() -> None:
    proc = subprocess.run([sys.executable, "-m", "agentlab.testing.openai_server", "--exit-after", "0.5",
                           "--window-style", "llamacpp", "--context-window", "4096"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    first, last = proc.stdout.strip().splitlines()[0], proc.stdout.strip().splitlines()[-1]
    assert "window 4096 stated the llamacpp way" in first and "--model openai:test-model@http://127.0.0.1:" in first
    assert json.loads(last)["completions"] == 0
    bad = subprocess.run([sys.executable, "-m", "agentlab.testing.openai_server", "--faults", "teapot"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown fault kinds")


def test_a_burst_of_new_connections_waits_in_the_listen_backlog() -> None:
    # Every request arrives on a new HTTP/1.0 connection; 16 dialogues in flight open 16 at once.
    # With socketserver's backlog of 5 the kernel dropped the rest while the server was busy, and
    # clients saw resets (a fault nobody injected). Not started here, so nothing is accepted: only
    # the backlog holds the connections.
    import socket

    server = OpenAITestServer()
    opened: list[socket.socket] = []
    try:
        for _ in range(32):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            opened.append(sock)
            sock.settimeout(1.0)
            sock.connect(("127.0.0.1", server.port))
    finally:
        for sock in opened:
            sock.close()
        server.stop()
    assert len(opened) == 32
