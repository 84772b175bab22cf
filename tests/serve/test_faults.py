"""Bad input (400, nothing stored) and upstream faults (the client gets the error, the ledger the turn)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
from serve_helpers import SEARCH_TOOL, delta_chunk

from agentlab.serve import ServeConfig

SYSTEM = {"role": "system", "content": "You answer questions about the company's offices."}
USER = {"role": "user", "content": "Where is the Lisbon office?"}


def _stored(server: Any) -> tuple[int, int, int]:
    """(call rows, conversations, ledger events) in the server's database."""
    store = server.app.store
    server.settle()
    calls = int(store.query("SELECT count(*) AS n FROM serve_calls")["n"][0])
    conversations = int(store.query("SELECT count(*) AS n FROM serve_conversations")["n"][0])
    events = int(store.query("SELECT count(*) AS n FROM events")["n"][0]) if _has_events(server) else 0
    return calls, conversations, events


def _has_events(server: Any) -> bool:
    tables = server.app.store.query("SELECT table_name FROM information_schema.tables")["table_name"]
    return "events" in set(tables)


@pytest.mark.parametrize(("body", "headers", "wanted"), [
    (b"{not json", {}, "not valid JSON"),
    (b"[1, 2]", {}, "must be a JSON object"),
    (json.dumps({"model": "m", "messages": [SYSTEM, USER], "temperature": "hot"}).encode(), {}, "'temperature'"),
    (json.dumps({"model": "m", "messages": [SYSTEM, USER], "stream": "yes"}).encode(), {}, "'stream'"),
    (json.dumps({"model": "m", "messages": [SYSTEM, USER], "n": 2}).encode(), {}, "n must be 1"),
    (json.dumps({"model": "m", "messages": []}).encode(), {}, "'messages' is required"),
    (json.dumps({"model": "m", "messages": [{"role": "robot", "content": "x"}]}).encode(), {}, "role"),
    (json.dumps({"model": "m", "messages": [{"role": "tool", "content": "x"}]}).encode(), {}, "tool_call_id"),
    (json.dumps({"model": "m", "messages": [SYSTEM, USER]}).encode(),
     {"X-Agentlab-Conversation-Id": "no spaces allowed"}, "x-agentlab-conversation-id"),
    (json.dumps({"model": "m", "messages": [SYSTEM, USER], "metadata": {"agentlab_conversation_id": 7}}).encode(),
     {}, "metadata.agentlab_conversation_id"),
])
def test_bad_input_is_a_400_and_stores_nothing(upstream, proxy, body, headers, wanted) -> None:
    server = proxy("compaction")
    response = httpx.post(server.base_url + "/chat/completions", content=body,
                          headers={"content-type": "application/json", **headers})
    assert response.status_code == 400
    error = response.json()["error"]
    assert wanted in error["message"] and error["type"] == "invalid_request_error"
    assert response.headers["x-should-retry"] == "false"
    assert _stored(server) == (0, 0, 0)
    assert upstream.received == []


def test_the_openai_client_sees_400_as_bad_request(proxy) -> None:
    client = openai.OpenAI(base_url=proxy("passthrough").base_url, api_key="k", max_retries=2)
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        client.chat.completions.create(model="test-model", messages=[SYSTEM, USER], n=3)


def test_unknown_arm_and_open_binding_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"unknown arm 'sumary'; known arms: long_context, summary, summary\+recall, "):
        ServeConfig(upstream="http://127.0.0.1:9/v1", arm="sumary").check()
    with pytest.raises(ValueError, match="requires --api-key"):
        ServeConfig(upstream="http://127.0.0.1:9/v1", host="0.0.0.0").check()
    ServeConfig(upstream="http://127.0.0.1:9/v1", host="0.0.0.0", api_key="secret").check()
    with pytest.raises(ValueError, match="exactly one back end"):
        ServeConfig().check()


def test_api_key_is_required_when_set(upstream, proxy) -> None:
    server = proxy("passthrough", api_key="secret", upstream_api_key="upstream-key")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0).models.list()
    assert httpx.get(server.base_url.removesuffix("/v1") + "/health").json()["status"] == "ok"
    client = openai.OpenAI(base_url=server.base_url, api_key="secret", max_retries=0)
    assert client.chat.completions.create(model="test-model", messages=[SYSTEM, USER]).choices[0].message.content


@pytest.mark.parametrize(("fault", "status", "error"), [
    ("429", 429, openai.RateLimitError), ("503", 503, openai.InternalServerError),
    ("garbage", 502, openai.InternalServerError), ("empty", 502, openai.InternalServerError),
    ("hang", 504, openai.InternalServerError),
])
def test_upstream_faults_reach_the_client_and_the_turn_is_kept(upstream, proxy, fault, status, error) -> None:
    upstream.hang_seconds = 3.0
    server = proxy("compaction", timeout=0.5)
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    upstream.queue_faults(fault)
    with pytest.raises(error) as caught:
        client.chat.completions.create(model="test-model", messages=[SYSTEM, USER])
    assert caught.value.status_code == status
    assert caught.value.body and caught.value.message
    if fault == "429":
        assert caught.value.response.headers["retry-after"] == "0"
    conversation = caught.value.response.headers["x-agentlab-conversation-id"]
    assert [e.role for e in server.ledger(conversation)] == ["system", "user"]
    calls = server.calls()
    assert list(calls["status"]) == [status] and calls.iloc[0]["events_appended"] == 2
    assert calls.iloc[0]["outcome"] == {"429": "upstream_error", "503": "upstream_error", "garbage": "bad_upstream",
                                        "empty": "bad_upstream", "hang": "timeout"}[fault]


def test_a_retried_answer_after_a_fault(upstream, proxy) -> None:
    server = proxy("compaction")
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=3)
    upstream.queue_faults("500", "garbage")
    stream = client.chat.completions.create(model="test-model", messages=[SYSTEM, USER], stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == upstream.reply_message(upstream.received[-1])["content"]
    calls = server.calls()
    assert list(calls["status"]) == [500, 502, 200] and calls["conversation_id"].nunique() == 1
    assert [e.role for e in server.ledger(calls.iloc[0]["conversation_id"])] == ["system", "user", "assistant"]


def test_mid_stream_failure_is_an_error_event(scripted, proxy) -> None:
    upstream = scripted([[delta_chunk({"role": "assistant", "content": ""}), delta_chunk({"content": "Lis"}),
                          "<drop>"]])
    server = proxy("compaction", upstream=upstream.base_url, context_window=32_000)
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    received = []
    with pytest.raises(openai.APIError, match="upstream stream"):
        for c in client.chat.completions.create(model="test-model", messages=[SYSTEM, USER], stream=True):
            received.append(c.choices[0].delta.content)
    assert received == ["", "Lis"]
    calls = server.calls()
    assert calls.iloc[0]["outcome"] == "stream_error"
    assert [e.role for e in server.ledger(calls.iloc[0]["conversation_id"])] == ["system", "user"]


def test_tool_call_deltas_without_index_are_given_one(scripted, proxy) -> None:
    # An upstream like tRPC-Agent-Go's server: tool-call deltas with no index, arguments split over deltas.
    first = {"id": "call_a", "type": "function", "function": {"name": "search_docs", "arguments": '{"qu'}}
    rest = {"function": {"arguments": 'ery": "Lisbon"}'}}
    second = {"id": "call_b", "type": "function", "function": {"name": "search_docs", "arguments": '{"query": "x"}'}}
    script = [delta_chunk({"role": "assistant", "content": None}), delta_chunk({"tool_calls": [first]}),
              delta_chunk({"tool_calls": [rest]}), delta_chunk({"tool_calls": [second]}),
              delta_chunk({}, "tool_calls")]
    upstream = scripted([script])
    server = proxy("passthrough", upstream=upstream.base_url)
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    with client.chat.completions.stream(model="test-model", messages=[SYSTEM, USER], tools=[SEARCH_TOOL]) as s:
        final = s.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert [(c.id, c.function.arguments) for c in calls] == [("call_a", '{"query": "Lisbon"}'),
                                                             ("call_b", '{"query": "x"}')]


def test_a_client_leaving_mid_stream_frees_its_conversation(scripted, proxy) -> None:
    slow = [delta_chunk({"role": "assistant", "content": ""}), delta_chunk({"content": "Lis"}), "<sleep>",
            delta_chunk({"content": "bon"}), delta_chunk({}, "stop")]
    upstream = scripted([slow, [delta_chunk({"role": "assistant", "content": "ok"}), delta_chunk({}, "stop")]])
    server = proxy("passthrough", upstream=upstream.base_url)
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    headers = {"X-Agentlab-Conversation-Id": "leaver"}
    stream = client.chat.completions.create(model="test-model", messages=[SYSTEM, USER], stream=True,
                                            extra_headers=headers)
    assert next(iter(stream)).choices[0].delta.role == "assistant"
    stream.close()  # gone before the answer ended
    again = client.chat.completions.create(model="test-model", messages=[SYSTEM, USER], stream=True,
                                           extra_headers=headers)
    assert "".join(c.choices[0].delta.content or "" for c in again if c.choices) == "ok"
    calls = server.calls()
    assert list(calls["outcome"]) == ["client_disconnected", "ok"]
    assert [e.role for e in server.ledger("leaver")] == ["system", "user", "assistant"]  # one answer: the second


def test_routes(proxy) -> None:
    server = proxy("passthrough")
    root = server.base_url.removesuffix("/v1")
    assert httpx.get(root + "/healthz").json() == {"status": "ok", "backend": "proxy", "arm": "passthrough"}
    wrong_method = httpx.get(server.base_url + "/chat/completions")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert httpx.get(root + "/v2/nothing").status_code == 404
    # /v1/models/{id} goes to the upstream; this one has no such route, and its 404 comes back OpenAI-shaped.
    missing = httpx.get(server.base_url + "/models/test-model")
    assert missing.status_code == 404 and "no route" in missing.json()["error"]["message"]
    listed = httpx.get(server.base_url + "/models").json()
    assert [m["id"] for m in listed["data"]] == ["test-model"] and listed["data"][0]["max_model_len"] == 131_072


@pytest.mark.parametrize("wait_for_ledger", [False, True])
def test_an_answer_waits_for_its_turns_commit_only_when_asked(upstream, proxy, wait_for_ledger) -> None:
    import time

    server = proxy("passthrough", wait_for_ledger=wait_for_ledger)
    sessions = server.app.sessions
    append = sessions.append_events

    async def slow_append(session: Any, events: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.6)  # a slow disk
        return await append(session, events, **kwargs)

    sessions.append_events = slow_append
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    began = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(
        model="test-model", messages=[{"role": "user", "content": "Where is the Lisbon office?"}])
    took = time.perf_counter() - began
    assert (took >= 0.6) == wait_for_ledger
    # Either way the turn and the answer end up in the ledger, and the call row after them.
    ledger = server.ledger(raw.headers["x-agentlab-conversation-id"])
    assert [e.role for e in ledger] == ["user", "assistant"]
    assert list(server.calls()["outcome"]) == ["ok"]


def test_a_turn_the_ledger_could_not_store_after_the_answer_is_in_the_call_row(upstream, proxy) -> None:
    server = proxy("passthrough")

    async def broken_append(session: Any, events: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    server.app.sessions.append_events = broken_append
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="test-model", messages=[{"role": "user", "content": "Where is the Lisbon office?"}])
    assert raw.http_response.status_code == 200  # the answer did not wait for the commit
    row = server.calls().iloc[0]
    assert row["outcome"] == "ledger_error" and "disk full" in row["error"] and row["status"] == 200
    assert server.ledger(raw.headers["x-agentlab-conversation-id"]) == []  # no answer after a missing turn


@pytest.mark.parametrize("stream", [False, True])
def test_with_wait_for_ledger_the_answer_is_committed_before_the_response_ends(upstream, proxy, stream) -> None:
    import time

    server = proxy("passthrough", wait_for_ledger=True)
    sessions = server.app.sessions
    append = sessions.append_events
    committed: list[tuple[float, list[str]]] = []

    async def timed_append(session: Any, events: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.2)  # a slow disk
        await append(session, events, **kwargs)
        committed.append((time.perf_counter(), [e.role for e in events]))

    sessions.append_events = timed_append
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    created = client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": "Where is the Lisbon office?"}], stream=stream)
    if stream:
        assert [c for c in created]  # the whole stream, [DONE] included
    ended = time.perf_counter()
    assert [roles for _, roles in committed] == [["user"], ["assistant"]]
    assert committed[-1][0] <= ended  # the answer was on disk before the client had all of it
