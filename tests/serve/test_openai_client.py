"""The openai client through the proxy: raw stream, the ``.stream()`` helper, non-streaming, models."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from serve_helpers import BIG_RESULT, SEARCH_TOOL

from agentlab.compaction import RECOVERABLE_HEADER
from agentlab.serve.wire import pairing_problem
from agentlab.testing.openai_server import prompt_tokens

SYSTEM = {"role": "system", "content": "You answer questions about the company's offices."}


def _client(server: Any, key: str = "caller-1", **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=kwargs.pop("max_retries", 0), **kwargs)


def _raw_stream_turn(client: openai.OpenAI, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """One streamed turn: the text, the tool calls assembled from deltas, every chunk, the headers."""
    kwargs.setdefault("tools", [SEARCH_TOOL])
    stream = client.chat.completions.create(model="test-model", messages=messages, stream=True, **kwargs)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls: dict[int, dict[str, Any]] = {}
    for c in chunks:
        for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            assert d.index is not None  # every tool-call delta carries its index
            call = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = d.id or call["id"]
            call["name"] = (d.function.name if d.function else None) or call["name"]
            call["arguments"] += (d.function.arguments if d.function else None) or ""
    return {"text": text, "calls": [calls[i] for i in sorted(calls)], "chunks": chunks,
            "headers": stream.response.headers}


def _assistant(turn: dict[str, Any]) -> dict[str, Any]:
    if turn["calls"]:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in turn["calls"]]}
    return {"role": "assistant", "content": turn["text"]}


def test_raw_stream_over_three_turns_with_compaction(upstream, proxy) -> None:
    server = proxy("compaction")
    client = _client(server)
    messages: list[dict[str, Any]] = [SYSTEM]
    results = [BIG_RESULT, "The Lisbon office has 42 people.", "It opened in 1931."]
    questions = ["Where is the Lisbon office?", "How many people work in Lisbon?", "When did Lisbon open?"]
    conversation_ids = set()
    for question, result in zip(questions, results, strict=True):
        messages.append({"role": "user", "content": question})
        turn = _raw_stream_turn(client, messages)
        assert [c["name"] for c in turn["calls"]] == ["search_docs"]  # the test server searches first
        conversation_ids.add(turn["headers"]["x-agentlab-conversation-id"])
        messages += [_assistant(turn), {"role": "tool", "tool_call_id": turn["calls"][0]["id"], "content": result}]
        answer = _raw_stream_turn(client, messages)
        # What the client got is exactly what the upstream produced for what it was sent.
        assert answer["text"] == upstream.reply_message(upstream.received[-1])["content"]
        assert answer["text"] and not answer["calls"]
        messages.append(_assistant(answer))
    assert len(conversation_ids) == 1
    assert len(upstream.received) == 6
    for body in upstream.received:
        assert pairing_problem(body["messages"]) is None
    # By the third question the first question's big result is out of the protected units.
    last = upstream.received[-1]["messages"]
    first_result = next(m for m in last if m["role"] == "tool")
    assert first_result["content"].startswith(RECOVERABLE_HEADER)
    assert first_result["tool_call_id"] == messages[3]["tool_call_id"]
    assert not any(RECOVERABLE_HEADER in str(m.get("content")) for m in messages)  # the client's view is whole
    calls = server.calls()
    assert list(calls["key_source"]) == ["new"] + ["prefix"] * 5
    assert list(calls["status"]) == [200] * 6
    early, final = calls.iloc[1], calls.iloc[-1]
    assert early["upstream_prompt_tokens"] == early["client_prompt_tokens"]
    assert final["upstream_prompt_tokens"] < final["client_prompt_tokens"] - 1500
    assert final["usage_prompt_tokens"] == prompt_tokens(last, upstream.received[-1].get("tools"))
    # The compaction changed the prefix the provider could reuse: the cache loss is measured beside the savings.
    assert final["upstream_prefix_tokens"] < final["client_prefix_tokens"]


def test_usage_chunk_only_when_asked(upstream, proxy) -> None:
    client = _client(proxy("passthrough"))
    plain = _raw_stream_turn(client, [SYSTEM, {"role": "user", "content": "hello"}], tools=openai.omit)
    assert all(c.choices for c in plain["chunks"])  # no empty-choices frame the client did not ask for
    assert all(c.usage is None for c in plain["chunks"])
    assert plain["text"] == upstream.reply_message(upstream.received[-1])["content"]
    asked = _raw_stream_turn(client, [SYSTEM, {"role": "user", "content": "hello again"}],
                             stream_options={"include_usage": True})
    assert [c["name"] for c in asked["calls"]] == ["search_docs"]
    usage_chunks = [c for c in asked["chunks"] if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0] is asked["chunks"][-1] and not usage_chunks[0].choices
    assert usage_chunks[0].usage.prompt_tokens == prompt_tokens(upstream.received[-1]["messages"],
                                                                upstream.received[-1].get("tools"))
    # Upstream always streams usage (for the call log), whatever the client asked.
    assert all(b["stream_options"]["include_usage"] for b in upstream.received)


def test_stream_helper_with_tools_over_three_turns(upstream, proxy) -> None:
    server = proxy("compaction")
    client = _client(server)
    messages: list[Any] = [SYSTEM]
    for question in ("Where is the Lisbon office?", "Who runs it?", "How big is it?"):
        messages.append({"role": "user", "content": question})
        with client.chat.completions.stream(model="test-model", messages=messages, tools=[SEARCH_TOOL]) as stream:
            for _ in stream:
                pass
            first = stream.get_final_completion()
        call = first.choices[0].message.tool_calls[0]
        assert call.function.name == "search_docs" and call.function.parsed_arguments is None
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": BIG_RESULT}]
        with client.chat.completions.stream(model="test-model", messages=messages, tools=[SEARCH_TOOL]) as stream:
            answer = stream.get_final_completion()
        assert answer.choices[0].message.content == upstream.reply_message(upstream.received[-1])["content"]
        messages.append(answer.choices[0].message.model_dump(exclude_none=True))
    calls = server.calls()
    assert calls["conversation_id"].nunique() == 1 and calls["ledger_mode"].eq("append").all()
    assert calls.iloc[-1]["upstream_prompt_tokens"] < calls.iloc[-1]["client_prompt_tokens"]
    ledger = server.ledger(calls.iloc[0]["conversation_id"])
    # Each client message once, each answer once: system + 3 x (user, call, result, answer).
    assert [e.role for e in ledger] == ["system"] + ["user", "assistant", "tool", "assistant"] * 3


def test_non_streaming_and_models_list(upstream, proxy) -> None:
    server = proxy("passthrough")
    client = _client(server)
    messages: list[Any] = [SYSTEM]
    for question in ("Where is the Lisbon office? Lisbon is by the river.", "Is Lisbon by the river?",
                     "What did I ask first?"):
        messages.append({"role": "user", "content": question})
        raw = client.chat.completions.with_raw_response.create(model="test-model", messages=messages)
        completion = raw.parse()
        assert completion.choices[0].message.content == upstream.reply_message(upstream.received[-1])["content"]
        # Passthrough: the upstream got exactly the client's messages.
        assert upstream.received[-1]["messages"] == messages
        messages.append({"role": "assistant", "content": completion.choices[0].message.content})
    assert raw.headers["x-agentlab-key-source"] == "prefix"
    models = client.models.list()
    assert [m.id for m in models.data] == ["test-model"]
    calls = server.calls()
    assert list(calls["stream"]) == [False] * 3
    assert (calls["upstream_prompt_tokens"] == calls["client_prompt_tokens"]).all()
    assert calls["ttft_ms"].isna().all() and (calls["latency_ms"] > 0).all()


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_error_passes_through_and_keeps_the_turn(upstream, proxy, stream) -> None:
    server = proxy("compaction")
    client = _client(server)
    upstream.queue_faults("500")
    messages = [SYSTEM, {"role": "user", "content": "Where is the Lisbon office?"}]
    with pytest.raises(openai.InternalServerError) as caught:
        if stream:
            list(client.chat.completions.create(model="test-model", messages=messages, stream=True))
        else:
            client.chat.completions.create(model="test-model", messages=messages)
    assert caught.value.status_code == 500
    assert "injected" in caught.value.message  # the upstream's own error message, OpenAI-shaped
    conversation = caught.value.response.headers["x-agentlab-conversation-id"]
    assert [e.role for e in server.ledger(conversation)] == ["system", "user"]  # the turn is kept, no answer
    # The same request again (the client's retry) answers and appends only the answer.
    raw = client.chat.completions.with_raw_response.create(
        model="test-model", messages=messages, extra_headers={"X-Agentlab-Conversation-Id": conversation})
    assert raw.parse().choices[0].message.content
    assert [e.role for e in server.ledger(conversation)] == ["system", "user", "assistant"]
    calls = server.calls()
    assert list(calls["status"]) == [500, 200]
    assert list(calls["ledger_mode"]) == ["append", "repeat"] and list(calls["events_appended"]) == [2, 1]


def test_passthrough_forwards_an_unchanged_request_byte_for_byte(upstream, proxy) -> None:
    import httpx

    server = proxy("passthrough")
    # Unusual spacing, key order and escapes: what a client sent, not what json.dumps would write.
    sent = (b'{ "messages" : [ {"content": "Where is the \\u004cisbon office?", "role": "user"} ],'
            b'  "model": "test-model", "temperature": 0.5 }')
    answer = httpx.post(server.base_url + "/chat/completions", content=sent,
                        headers={"authorization": "Bearer k", "content-type": "application/json"})
    assert answer.status_code == 200
    assert upstream.received_raw[-1] == sent
    # A request the proxy must change (a stream gets include_usage) is re-encoded, with the change.
    with httpx.stream("POST", server.base_url + "/chat/completions", headers={"authorization": "Bearer k"},
                      json={"model": "test-model", "stream": True,
                            "messages": [{"role": "user", "content": "And Porto?"}]}) as streamed:
        assert streamed.status_code == 200 and "data: [DONE]" in streamed.read().decode()
    assert upstream.received[-1]["stream_options"] == {"include_usage": True}
    assert upstream.received_raw[-1] != streamed.request.content
