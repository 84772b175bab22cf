"""The context window is resolved, never guessed: explicit → server-stated → known table → error."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from fake_openai_server import Answer, FakeOpenAIServer, completion, error_body

from agentlab.events import Message
from agentlab.model import (
    CachedModel,
    CallCache,
    CallRecord,
    ContextLengthError,
    ContextWindowUnknown,
    EmbeddedModel,
    ModelRequest,
    ServerError,
    get_model,
    observe_calls,
)
from agentlab.model.embedded import EMBEDDED_WINDOW_SOURCE
from agentlab.model.openai_compat import OpenAICompatModel
from agentlab.summary import Summarizer

FAST = {"max_attempts": 4, "backoff_base": 0.001, "backoff_max": 0.005, "timeout": 5.0}


def _model(server: FakeOpenAIServer, name: str = "served-model", **kwargs: Any) -> OpenAICompatModel:
    return OpenAICompatModel(name, base_url=server.base_url, api_key="k", **{**FAST, **kwargs})


def _request() -> ModelRequest:
    return ModelRequest(messages=[Message.user("hi")])


@pytest.mark.parametrize(
    ("routes", "window", "source"),
    [
        ({"/v1/models": {"object": "list", "data": [
            {"id": "other", "max_model_len": 4096},
            {"id": "served-model", "object": "model", "max_model_len": 131072}]}},
         131072, "server:/v1/models max_model_len"),
        ({"/v1/models": {"data": [{"id": "served-model", "context_length": 200000}]}},
         200000, "server:/v1/models context_length"),
        ({"/v1/models": {"data": [{"id": "served-model", "meta": {"n_ctx_train": 32768}}]},
          "/props": {"default_generation_settings": {"n_ctx": 16384}, "total_slots": 2}},
         16384, "server:/props default_generation_settings.n_ctx"),
        ({"/props": {"n_ctx": 65536}}, 65536, "server:/props n_ctx"),
        ({"/api/show": {"model_info": {"general.architecture": "llama", "llama.context_length": 131072}}},
         131072, "server:/api/show model_info llama.context_length"),
        ({"/api/show": {"parameters": "stop <|eot|>\nnum_ctx 8192", "model_info": {"qwen2.context_length": 32768}}},
         8192, "server:/api/show parameters num_ctx"),
        ({"/api/v0/models": {"data": [{"id": "served-model", "max_context_length": 32768,
                                       "loaded_context_length": 4096}]}},
         4096, "server:/api/v0/models loaded_context_length"),
    ],
    ids=["vllm", "openrouter", "llamacpp-slot", "llamacpp-top", "ollama", "ollama-num_ctx", "lmstudio"],
)
def test_window_the_server_states_is_used_with_its_source(routes: dict[str, Any], window: int, source: str) -> None:
    with FakeOpenAIServer([Answer(body=completion("ok"))], routes=routes) as server:
        model = _model(server)
        info = model.info
        assert (info.context_window, info.context_window_source) == (window, source)
        asked = len(server.probes)
        assert model.info.context_window == window and len(server.probes) == asked  # probed once per object
    if "/api/show" in routes:
        assert ("POST", "/api/show", {"model": "served-model"}) in server.probes


def test_explicit_window_wins_and_nothing_is_probed() -> None:
    routes = {"/v1/models": {"data": [{"id": "served-model", "max_model_len": 131072}]}}
    with FakeOpenAIServer([Answer(body=completion("ok"))], routes=routes) as server:
        model = get_model(f"openai:served-model@{server.base_url}", cache=False, context_window=32000)
        assert (model.info.context_window, model.info.context_window_source) == (32000, "--context-window")
    assert server.probes == []


def test_server_window_beats_the_known_table() -> None:
    routes = {"/v1/models": {"data": [{"id": "gpt-4", "max_model_len": 32768}]}}
    with FakeOpenAIServer([Answer(body=completion("ok"))], routes=routes) as server:
        assert _model(server, "gpt-4").info.context_window == 32768  # the table says 8,192


def test_known_table_when_the_server_states_nothing() -> None:
    with FakeOpenAIServer([Answer(body=completion("ok"))]) as server:
        info = _model(server, "gpt-4o-mini").info
    assert (info.context_window, info.context_window_source) == (128_000, "known-model table")


def test_unknown_window_is_an_error_naming_the_flag_every_time_without_reprobing() -> None:
    with FakeOpenAIServer([Answer(body=completion("ok"))]) as server:
        model = _model(server, "my-local-model")
        with pytest.raises(ContextWindowUnknown) as first:
            _ = model.info
        asked = len(server.probes)
        with pytest.raises(ContextWindowUnknown):
            model.resolve_info()
    message = str(first.value)
    assert "--context-window" in message and "my-local-model" in message and "\n" not in message
    assert "/v1/models" in message and "/props" in message and "/api/show" in message
    assert len(server.probes) == asked == 4


def test_unreachable_server_with_unknown_model_says_so() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAICompatModel("local", base_url=f"http://127.0.0.1:{port}/v1", probe_timeout=1.0)
    with pytest.raises(ContextWindowUnknown, match="cannot be reached.*--context-window"):
        _ = model.info
    assert "cannot be reached" in (model.server_problem() or "")


def test_hosted_openai_model_uses_the_table_without_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    model = OpenAICompatModel("gpt-4o-mini", api_key="sk-test")
    assert model.info.context_window == 128_000 and model.probe is None


def test_embedded_model_knows_its_window_without_a_server() -> None:
    model = EmbeddedModel()
    assert (model.info.context_window, model.info.context_window_source) == (8192, EMBEDDED_WINDOW_SOURCE)
    assert model.probe is None and model.server_problem() is None


def test_embedded_model_takes_a_smaller_window_but_refuses_a_larger_one() -> None:
    info = get_model("embedded", cache=False, context_window=4096).info
    assert (info.context_window, info.context_window_source) == (4096, "--context-window")
    with pytest.raises(ValueError, match="at most 8192"):
        get_model("embedded", cache=False, context_window=100_000)


async def test_unknown_window_does_not_block_a_call_that_needs_none() -> None:
    # The cache key needs only the name; sending a request needs no window.
    with FakeOpenAIServer([Answer(body=completion("hello"))]) as server:
        model = CachedModel(_model(server, "my-local-model"), CallCache(None))
        response = await model.generate(_request())
    assert response.message.content == "hello"


def test_resolved_window_reaches_the_summariser() -> None:
    # The summary worker's 8,192 fallback is for models that state no window; a probed one is used.
    routes = {"/v1/models": {"data": [{"id": "served-model", "max_model_len": 131072}]}}
    with FakeOpenAIServer([Answer(body=completion("ok"))], routes=routes) as server:
        summariser = Summarizer(CachedModel(_model(server), CallCache(None)))
        assert summariser.window == 131072
        assert summariser.input_budget == int(131072 * 0.7)


@pytest.mark.parametrize(
    "body",
    [
        error_body("This model's maximum context length is 131072 tokens. However, you requested 140000 tokens "
                   "(139000 in the messages, 1000 in the completion). Please reduce the length of the messages."),
        error_body("request (140000 tokens) exceeds the available context size (131072 tokens), try increasing it",
                   type_="exceed_context_size_error"),
        {"error": "the input length exceeds the context length"},
        error_body("prompt too long", code="context_length_exceeded"),
    ],
    ids=["vllm", "llamacpp", "ollama", "openai-code"],
)
async def test_server_refusing_a_long_prompt_is_context_length_and_not_retried(body: dict[str, Any]) -> None:
    records: list[CallRecord] = []
    with FakeOpenAIServer([Answer(400, body)]) as server, observe_calls(records.append):
        with pytest.raises(ContextLengthError):
            await _model(server, context_window=4096).generate(_request())
    assert len(server.requests) == 1 and records[0].attempts == 1


@pytest.mark.parametrize("garbage", ["", "{not json", '{"id": "x", "choices": []}', '{"object": "chat.completion"}'],
                         ids=["empty", "not-json", "no-choices", "no-choices-key"])
async def test_garbage_200_is_retried_like_a_5xx_and_attempts_are_recorded(garbage: str) -> None:
    answers = [Answer(500, error_body("boom", type_="server_error")), Answer(body=garbage),
               Answer(body=completion("fine"))]
    records: list[CallRecord] = []
    with FakeOpenAIServer(answers) as server, observe_calls(records.append):
        response = await _model(server, context_window=4096).generate(_request())
    assert response.message.content == "fine" and response.attempts == 3
    assert len(server.requests) == 3
    assert [r.attempts for r in records] == [3]


async def test_attempts_survive_the_call_cache_and_a_replay_counts_zero() -> None:
    answers = [Answer(body="garbage"), Answer(body=completion("fine"))]
    records: list[CallRecord] = []
    with FakeOpenAIServer(answers) as server, observe_calls(records.append):
        model = CachedModel(_model(server, context_window=4096), CallCache(None))
        await model.generate(_request())
        replay = await model.generate(_request())
    assert replay.cache_hit and [(r.cache_hit, r.attempts) for r in records] == [(False, 2), (True, 0)]


async def test_bounded_attempts_on_persistent_garbage_end_in_malformed_response() -> None:
    records: list[CallRecord] = []
    with FakeOpenAIServer([Answer(body="<html>proxy error</html>")]) as server, observe_calls(records.append):
        with pytest.raises(Exception) as info:
            await _model(server, context_window=4096, max_attempts=2).generate(_request())
    assert type(info.value).__name__ == "MalformedResponse" and not isinstance(info.value, ServerError)
    assert "twice" in str(info.value) and len(server.requests) == 2 and records[0].attempts == 2
