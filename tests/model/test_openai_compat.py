import asyncio
import json

import pytest
from fake_openai_server import Answer, FakeOpenAIServer, completion, error_body, stream_chunks

from agentlab.events import Message
from agentlab.model import (
    CallRecord,
    ContextLengthError,
    GenerationConfig,
    MalformedResponse,
    ModelError,
    ModelRequest,
    ModelTimeout,
    ModelUnavailable,
    RateLimitError,
    ServerError,
    observe_calls,
)
from agentlab.model.openai_compat import OpenAICompatModel, known_context_window

USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14,
         "prompt_tokens_details": {"cached_tokens": 4}}


def _model(server: FakeOpenAIServer, **kwargs: object) -> OpenAICompatModel:
    options = {"max_attempts": 4, "backoff_base": 0.001, "backoff_max": 0.005, "timeout": 5.0}
    options.update(kwargs)
    return OpenAICompatModel("fake-model", base_url=server.base_url, api_key="k", **options)  # type: ignore[arg-type]


def _request(**kwargs: object) -> ModelRequest:
    return ModelRequest(messages=[Message.system("be brief"), Message.user("hi")], **kwargs)  # type: ignore[arg-type]


async def test_success_parses_text_usage_and_sends_params() -> None:
    with FakeOpenAIServer([Answer(body=completion("hello", usage=USAGE))]) as server:
        model = _model(server)
        config = GenerationConfig(temperature=0.2, max_tokens=7, stop=("END",), seed=3, response_format="json")
        response = await model.generate(_request(config=config))
    assert response.message == Message.assistant("hello")
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.cached_tokens) == (11, 3, 4)
    assert response.finish_reason == "stop" and response.latency_ms > 0
    sent = server.requests[0]
    assert sent["model"] == "fake-model"
    assert sent["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert (sent["temperature"], sent["max_tokens"], sent["stop"], sent["seed"]) == (0.2, 7, ["END"], 3)
    assert sent["response_format"] == {"type": "json_object"}


async def test_missing_usage_falls_back_to_token_counting() -> None:
    with FakeOpenAIServer([Answer(body=completion("hello world"))]) as server:
        response = await _model(server).generate(_request())
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens == 2


async def test_retries_429_twice_then_succeeds_on_third_attempt() -> None:
    answers = [Answer(429, error_body("slow down", type_="rate_limit")),
               Answer(429, error_body("slow down", type_="rate_limit")),
               Answer(body=completion("finally", usage=USAGE))]
    records: list[CallRecord] = []
    with FakeOpenAIServer(answers) as server, observe_calls(records.append):
        response = await _model(server).generate(_request())
    assert response.message.content == "finally"
    assert len(server.requests) == 3
    assert len(records) == 1 and records[0].error is None and records[0].usage.prompt_tokens == 11


async def test_always_500_gives_server_error_after_max_attempts() -> None:
    records: list[CallRecord] = []
    with FakeOpenAIServer([Answer(500, error_body("kaboom", type_="server_error"))]) as server:
        with observe_calls(records.append), pytest.raises(ServerError) as info:
            await _model(server, max_attempts=3).generate(_request())
    assert len(server.requests) == 3
    message = str(info.value)
    assert server.base_url in message and "answered 500 three times" in message and "kaboom" in message
    assert len(records) == 1 and "ServerError" in (records[0].error or "")


async def test_rate_limit_exhausted_is_rate_limit_error() -> None:
    with FakeOpenAIServer([Answer(429, error_body("slow down"))]) as server:
        with pytest.raises(RateLimitError, match="answered 429 twice"):
            await _model(server, max_attempts=2).generate(_request())


async def test_other_4xx_is_not_retried() -> None:
    with FakeOpenAIServer([Answer(401, error_body("bad key"))]) as server:
        with pytest.raises(ModelUnavailable, match="401.*bad key"):
            await _model(server).generate(_request())
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        "this is not json",
        json.dumps({"id": "x", "object": "chat.completion"}),
        json.dumps({"choices": []}),
        json.dumps({"choices": [{"index": 0, "finish_reason": "stop"}]}),
        json.dumps([1, 2, 3]),
        json.dumps({"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "c"}]}}]}),
    ],
)
async def test_malformed_body_is_retried_then_malformed_response_with_readable_message(body: str) -> None:
    records: list[CallRecord] = []
    with FakeOpenAIServer([Answer(body=body)]) as server, observe_calls(records.append):
        with pytest.raises(MalformedResponse) as info:
            await _model(server, max_attempts=3).generate(_request())
    message = str(info.value)
    assert "\n" not in message and len(message) < 300
    assert "three times" in message
    assert len(server.requests) == 3  # a 200 that is not a completion is a transient fault, like a 5xx
    assert records and records[0].error is not None and records[0].attempts == 3


@pytest.mark.parametrize(
    "body",
    [
        error_body("This model's maximum context length is 8192 tokens. However, your messages resulted "
                   "in 9000 tokens.", code="context_length_exceeded"),
        error_body("the request exceeds the available context size, try increasing it",
                   type_="exceed_context_size_error", n_prompt_tokens=9000, n_ctx=8192),
    ],
)
async def test_context_length_400_is_context_length_error(body: dict) -> None:
    with FakeOpenAIServer([Answer(400, body)]) as server:
        with pytest.raises(ContextLengthError):
            await _model(server).generate(_request())
    assert len(server.requests) == 1


async def test_tool_call_response_is_parsed() -> None:
    tool_calls = [{"id": "call_9", "type": "function",
                   "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    with FakeOpenAIServer([Answer(body=completion(None, tool_calls=tool_calls, finish_reason="tool_calls"))]) as server:
        response = await _model(server).generate(_request(tools=tools))
    (call,) = response.message.tool_calls
    assert (call.id, call.name, call.parsed_arguments()) == ("call_9", "get_weather", {"city": "Paris"})
    assert response.message.content == "" and response.finish_reason == "tool_calls"
    assert server.requests[0]["tools"] == tools


async def test_tool_result_messages_go_out_in_wire_form() -> None:
    from agentlab.model import ScriptedModel

    call_message = ScriptedModel.tool_call("lookup", {"q": 1}, id="call_1")
    messages = [Message.user("q"), call_message, Message.tool("call_1", "lookup", "42")]
    with FakeOpenAIServer([Answer(body=completion("done"))]) as server:
        await _model(server).generate(ModelRequest(messages=messages))
    sent = server.requests[0]["messages"]
    assert sent[1]["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q": 1}'}
    assert sent[2] == {"role": "tool", "content": "42", "tool_call_id": "call_1"}


async def test_stream_yields_deltas_and_final_response_with_usage() -> None:
    usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    records: list[CallRecord] = []
    with FakeOpenAIServer([Answer(stream_chunks=stream_chunks(["Hel", "lo", "!"], usage))]) as server:
        with observe_calls(records.append):
            chunks = [c async for c in _model(server).stream(_request())]
    assert [c.delta for c in chunks[:-1]] == ["Hel", "lo", "!"]
    final = chunks[-1].response
    assert final is not None and final.message.content == "Hello!" and final.finish_reason == "stop"
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (9, 3)
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    assert len(records) == 1 and records[0].error is None


async def test_stream_without_usage_counts_tokens_and_retries_before_first_chunk() -> None:
    answers = [Answer(503, error_body("warming up")), Answer(stream_chunks=stream_chunks(["hello", " world"]))]
    with FakeOpenAIServer(answers) as server:
        chunks = [c async for c in _model(server).stream(_request())]
    final = chunks[-1].response
    assert final is not None and final.message.content == "hello world"
    assert final.usage.completion_tokens == 2 and final.usage.prompt_tokens > 0
    assert len(server.requests) == 2


async def test_unreachable_server_is_unavailable_after_retries() -> None:
    import socket

    with socket.socket() as sock:  # find a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAICompatModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k",
                              max_attempts=2, backoff_base=0.001, backoff_max=0.002)
    with pytest.raises(ModelUnavailable, match="could not be reached"):
        await model.generate(_request())


def test_known_model_table() -> None:
    assert known_context_window("gpt-4o-mini") == 128_000
    assert known_context_window("gpt-4o-mini-2024-07-18") == 128_000
    assert known_context_window("openai/gpt-4.1-mini") == 1_047_576
    assert known_context_window("gpt-4") == 8_192
    assert known_context_window("some-local-model") is None  # never a guessed window
    # A prefix is no match: each of these had another window than the name it starts with.
    assert known_context_window("o1-mini") == 128_000
    assert known_context_window("gpt-3.5-turbo-0613") is None  # 4,096, not gpt-3.5-turbo's 16,385
    assert known_context_window("gpt-4o-mini-audio-preview") is None
    assert known_context_window("gpt-4-0125-preview") == 128_000  # not gpt-4's 8,192


def test_missing_api_key_is_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelUnavailable, match="OPENAI_API_KEY"):
        OpenAICompatModel("gpt-4o-mini")


async def test_slow_server_times_out_and_is_retried() -> None:
    with FakeOpenAIServer([Answer(body=completion("late"), delay=2.0)]) as server:
        with pytest.raises(ModelTimeout, match="timed out twice"):
            await _model(server, timeout=0.4, max_attempts=2).generate(_request())
        # the second attempt may still be in the server's accept queue on a loaded machine
        for _ in range(100):
            if len(server.requests) >= 2:
                break
            await asyncio.sleep(0.02)
        assert len(server.requests) == 2


async def test_malformed_stream_chunk_is_malformed_response() -> None:
    chunks = stream_chunks(["fine"])[:2] + ["{not json"]
    with FakeOpenAIServer([Answer(stream_chunks=chunks)]) as server:
        with pytest.raises(MalformedResponse, match="unreadable stream"):
            [c async for c in _model(server).stream(_request())]


async def test_garbage_stream_chunk_before_any_text_is_streamed_again() -> None:
    # The role chunk carries no text, so nothing reached the caller when the garbage came.
    garbage = stream_chunks(["lost"])[:1] + ["{not json"]
    answers = [Answer(stream_chunks=garbage), Answer(stream_chunks=stream_chunks(["hel", "lo"]))]
    records: list[CallRecord] = []
    with FakeOpenAIServer(answers) as server:
        with observe_calls(records.append):
            chunks = [c async for c in _model(server).stream(_request())]
    assert [c.delta for c in chunks[:-1]] == ["hel", "lo"]  # nothing of the broken stream leaked out
    final = chunks[-1].response
    assert final is not None and final.message.content == "hello" and final.attempts == 2
    assert len(server.requests) == 2
    assert [(r.error, r.attempts) for r in records] == [(None, 2)]


async def test_stream_without_choices_is_streamed_again() -> None:
    empty = [{"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "fake", "choices": []}]
    answers = [Answer(stream_chunks=empty), Answer(stream_chunks=stream_chunks(["ok"]))]
    with FakeOpenAIServer(answers) as server:
        chunks = [c async for c in _model(server).stream(_request())]
    final = chunks[-1].response
    assert final is not None and final.message.content == "ok" and final.attempts == 2


async def test_garbage_stream_every_time_gives_up_after_max_attempts() -> None:
    garbage = stream_chunks([])[:1] + ["{not json"]
    records: list[CallRecord] = []
    with FakeOpenAIServer([Answer(stream_chunks=garbage)]) as server:
        with observe_calls(records.append), pytest.raises(MalformedResponse, match="three times: sent an unreadable stream") as info:
            [c async for c in _model(server, max_attempts=3).stream(_request())]
    assert info.value.attempts == 3 and len(server.requests) == 3
    assert len(records) == 1 and records[0].attempts == 3 and "MalformedResponse" in (records[0].error or "")


async def test_garbage_after_text_reached_the_caller_is_not_retried_and_says_so() -> None:
    broken = stream_chunks(["Hel", "lo"])[:3] + ["{not json"]
    records: list[CallRecord] = []
    seen: list[str] = []
    with FakeOpenAIServer([Answer(stream_chunks=broken), Answer(stream_chunks=stream_chunks(["Hello"]))]) as server:
        with observe_calls(records.append), pytest.raises(MalformedResponse, match="2 text chunk.*reached the caller") as info:
            async for chunk in _model(server).stream(_request()):
                seen.append(chunk.delta)
    assert seen == ["Hel", "lo"]  # a retry would have sent "Hello" again after these
    assert info.value.attempts == 1 and len(server.requests) == 1
    assert len(records) == 1 and records[0].attempts == 1 and records[0].error is not None


async def test_stream_retried_after_garbage_counts_a_failed_open_too() -> None:
    garbage = stream_chunks([])[:1] + ["{not json"]
    answers = [Answer(stream_chunks=garbage), Answer(503, error_body("busy")), Answer(stream_chunks=stream_chunks(["ok"]))]
    with FakeOpenAIServer(answers) as server:
        chunks = [c async for c in _model(server).stream(_request())]
    final = chunks[-1].response
    assert final is not None and final.message.content == "ok" and final.attempts == 3
    assert len(server.requests) == 3


async def test_streamed_tool_call_is_assembled() -> None:
    def piece(delta: dict, finish: str | None = None) -> dict:
        return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "fake",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks: list = [
        piece({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_s", "type": "function",
                                                    "function": {"name": "lookup", "arguments": ""}}]}),
        piece({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": '}}]}),
        piece({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}),
        piece({}, "tool_calls"),
    ]
    with FakeOpenAIServer([Answer(stream_chunks=chunks)]) as server:
        out = [c async for c in _model(server).stream(_request())]
    final = out[-1].response
    assert final is not None and final.finish_reason == "tool_calls"
    (call,) = final.message.tool_calls
    assert (call.id, call.name, call.parsed_arguments()) == ("call_s", "lookup", {"q": "x"})


def test_every_backend_satisfies_the_model_protocol() -> None:
    from agentlab.model import CachedModel, CallCache, EmbeddedModel, Model, ScriptedModel

    scripted = ScriptedModel([])
    for model in (scripted, CachedModel(scripted, CallCache(None)), EmbeddedModel(),
                  OpenAICompatModel("m", base_url="http://127.0.0.1:9/v1", context_window=4096)):
        # (Python < 3.12 reads ``info`` for this check, which resolves the window: give one.)
        assert isinstance(model, Model)


def test_json_schema_is_sent_only_to_backends_that_enforce_it() -> None:
    schema = {"type": "object", "properties": {"correct": {"type": "boolean"}, "reason": {"type": "string"}},
              "required": ["correct", "reason"]}
    config = GenerationConfig(response_format="json", json_schema=GenerationConfig.schema_text(schema))
    request = ModelRequest([Message.user("hi")], config=config)
    plain = OpenAICompatModel("m", base_url="http://127.0.0.1:9/v1")
    assert plain._params(request)["response_format"] == {"type": "json_object"}
    enforcing = OpenAICompatModel("m", base_url="http://127.0.0.1:9/v1")
    enforcing.enforces_json_schema = True
    sent = enforcing._params(request)["response_format"]
    assert sent == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    assert list(sent["json_schema"]["schema"]["properties"]) == ["correct", "reason"]  # order kept
    # Without a schema, JSON mode stays a plain JSON object everywhere.
    bare = ModelRequest([Message.user("hi")], config=GenerationConfig(response_format="json"))
    assert enforcing._params(bare)["response_format"] == {"type": "json_object"}


def test_a_schema_changes_the_cache_key_and_its_absence_does_not() -> None:
    bare = ModelRequest([Message.user("hi")], config=GenerationConfig(response_format="json"))
    assert "json_schema" not in bare.cache_payload("m")["config"]  # keys made before the field existed hold
    with_schema = ModelRequest([Message.user("hi")],
                               config=GenerationConfig(response_format="json", json_schema='{"type":"object"}'))
    assert bare.cache_key("m") != with_schema.cache_key("m")


async def test_test_servers_garbage_body_on_a_stream_is_retried_like_on_a_plain_call() -> None:
    from agentlab.testing.openai_server import OpenAITestServer

    with OpenAITestServer(fault_rate=1.0, faults=("garbage",)) as server:
        model = OpenAICompatModel(server.model, base_url=server.base_url, api_key="k", max_attempts=3,
                                  backoff_base=0.001, backoff_max=0.002)
        with pytest.raises(MalformedResponse) as streamed:
            [c async for c in model.stream(_request())]
        with pytest.raises(MalformedResponse) as plain:
            await model.generate(_request())
    assert streamed.value.attempts == plain.value.attempts == 3
    assert server.stats.faults["garbage"] == 6


async def test_generate_sends_the_bearer_token() -> None:
    # generate() posts the request itself (no chat.completions.create): the key must still go along.
    from agentlab.testing.openai_server import OpenAITestServer

    with OpenAITestServer(api_key="secret") as server:
        good = OpenAICompatModel(server.model, base_url=server.base_url, api_key="secret", max_attempts=1)
        wrong = OpenAICompatModel(server.model, base_url=server.base_url, api_key="wrong", max_attempts=1)
        request = ModelRequest([Message.user("Item 1 is red. What colour is item 1?")])
        assert (await good.generate(request)).message.content
        with pytest.raises(ModelError):
            await wrong.generate(request)
        await good.aclose()
        await wrong.aclose()
