"""The proxy as an attacker meets it: no path walk with the upstream key, no 500 for client input,
bounded requests and connections, one tenant per key.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any
from urllib.parse import unquote

import openai
import pytest

from agentlab.serve import savings_df

USER = {"role": "user", "content": "Where is the Lisbon office?"}


def _raw(port: int, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None,
         timeout: float = 30.0) -> tuple[int, dict[str, Any] | None]:
    """Send one request with the target exactly as given; (status, JSON body or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        sent = {"content-type": "application/json", "content-length": str(len(body)), **(headers or {})}
        for name, value in sent.items():
            conn.putheader(name, value)
        conn.endheaders(body or None)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw)
        except json.JSONDecodeError:
            return resp.status, None
    finally:
        conn.close()


@pytest.mark.parametrize("target", [
    "/v1/models/../../internal/keys",
    "/v1/models/%2e%2e/%2e%2e/internal/keys",
    "/v1/models/..%2F..%2Finternal%2Fkeys",
    "/v1/models/a/../../../internal",
    "/v1/models/%252e%252e%252finternal",
    "/v1/models/./x",
    "/v1/models/x?y=../../z",
])
def test_a_model_id_cannot_walk_the_upstream_key_to_another_path(recording, proxy, target) -> None:
    server = proxy(upstream=recording.base_url, upstream_api_key="sk-upstream-secret")
    status, body = _raw(server.port, "GET", target)
    for _, path, _ in recording.seen:
        # Whatever reached the upstream (with its key) is one model: one segment, not a dot segment.
        rest = path.removeprefix("/v1/models/")
        assert path.startswith("/v1/models/") and "/" not in rest and unquote(rest) not in (".", ".."), path
        assert "internal" not in unquote(unquote(path)), path
    if status != 200:
        assert status == 400 and body is not None and body["error"]["message"], (status, body)


def test_a_model_id_with_a_slash_goes_upstream_as_one_encoded_segment(recording, proxy) -> None:
    server = proxy(upstream=recording.base_url, upstream_api_key="sk-upstream-secret")
    status, body = _raw(server.port, "GET", "/v1/models/meta-llama/Llama-3-8B")
    assert status == 200 and body is not None
    assert recording.seen == [("GET", "/v1/models/meta-llama%2FLlama-3-8B", "Bearer sk-upstream-secret")]


def _chat_body(messages: list[dict[str, Any]]) -> bytes:
    return json.dumps({"model": "test-model", "messages": messages}).encode()


@pytest.mark.parametrize(("body", "wanted"), [
    (b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests JSON too deeply"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}', "lone UTF-16 surrogate"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "ok"}], "user": "\\udfff"}', "lone UTF-16 surrogate"),
])
def test_malformed_bodies_are_400_with_an_openai_error_never_500(proxy, upstream, body, wanted) -> None:
    server = proxy()
    status, payload = _raw(server.port, "POST", "/v1/chat/completions", body)
    assert status == 400, (status, payload)
    assert payload is not None and wanted in payload["error"]["message"]
    assert upstream.received == []


def test_a_surrogate_pair_is_a_character_and_goes_through(proxy, upstream) -> None:
    server = proxy()
    status, payload = _raw(server.port, "POST", "/v1/chat/completions",
                           b'{"model": "test-model", "messages": [{"role": "user", "content": "hi \\ud83d\\ude00"}]}')
    assert status == 200, payload
    assert upstream.received[-1]["messages"][-1]["content"] == "hi \U0001f600"


def test_a_body_over_the_cap_is_413_with_an_openai_error(proxy, upstream) -> None:
    server = proxy(max_body_bytes=2_000)
    status, payload = _raw(server.port, "POST", "/v1/chat/completions",
                           _chat_body([{"role": "user", "content": "x" * 5_000}]))
    assert status == 413 and payload is not None
    assert payload["error"]["code"] == "request_too_large" and "2000 bytes" in payload["error"]["message"]
    status, payload = _raw(server.port, "POST", "/v1/chat/completions", b"{}", {"content-length": "ten"})
    assert status == 400 and payload is not None and "Content-Length" in payload["error"]["message"]
    assert upstream.received == []


def test_too_many_messages_or_too_big_a_message_is_413_and_nothing_is_stored(proxy, upstream) -> None:
    server = proxy(max_messages=5, max_message_bytes=1_000)
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError) as many:
        client.chat.completions.create(model="test-model", messages=[USER] * 6)  # type: ignore[list-item]
    assert many.value.status_code == 413 and "--max-messages" in str(many.value)
    with pytest.raises(openai.APIStatusError) as big:
        client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "é" * 600}])
    assert big.value.status_code == 413 and "messages[0]" in str(big.value)
    assert upstream.received == []
    server.settle()
    assert int(server.app.store.query("SELECT count(*) AS n FROM serve_conversations")["n"][0]) == 0


def test_a_100k_message_request_does_not_hold_up_a_one_message_request(proxy) -> None:
    server = proxy()
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    client.chat.completions.create(model="test-model", messages=[USER])  # warm: the connection and the model
    big = _chat_body([{"role": "user", "content": f"message number {i}"} for i in range(100_000)])
    # The first large body starts the parsing worker process (a few hundred ms, off the loop but
    # competing for the two cores): the measured one is the next.
    assert _raw(server.port, "POST", "/v1/chat/completions", big, timeout=60)[0] == 413
    outcome: dict[str, Any] = {}

    def send_big() -> None:
        outcome["big"] = _raw(server.port, "POST", "/v1/chat/completions", big, timeout=60)

    sender = threading.Thread(target=send_big)
    sender.start()
    latencies = []
    deadline = time.monotonic() + 20
    while sender.is_alive() and time.monotonic() < deadline:
        began = time.perf_counter()
        client.chat.completions.create(model="test-model", messages=[USER])
        latencies.append((time.perf_counter() - began) * 1000)
    sender.join(60)
    status, payload = outcome["big"]
    assert status == 413 and payload is not None and "--max-messages" in payload["error"]["message"]
    assert latencies, "the big request was answered before a small one could be sent"
    assert max(latencies) < 100, latencies


def test_half_open_connections_are_closed_after_the_head_timeout(proxy) -> None:
    server = proxy(head_timeout=0.5, idle_timeout=1.0)
    half = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # half a head, never finished
        half.append(sock)
    idle = socket.create_connection(("127.0.0.1", server.port))  # connects and sends nothing
    began = time.monotonic()
    try:
        for sock in [*half, idle]:
            sock.settimeout(5)
            received = b""
            while piece := sock.recv(1024):
                received += piece
            # Closed by the server, not left open: a half-sent request after a 408, an idle one silently.
            assert received.startswith(b"HTTP/1.1 408 ") if sock is not idle else received == b"", received
        assert time.monotonic() - began < 4
    finally:
        for sock in [*half, idle]:
            sock.close()


def test_two_callers_with_two_keys_are_two_tenants(proxy, upstream) -> None:
    server = proxy(api_keys=("key-alice", "key-bob"))
    alice = openai.OpenAI(base_url=server.base_url, api_key="key-alice", max_retries=0)
    bob = openai.OpenAI(base_url=server.base_url, api_key="key-bob", max_retries=0)
    stranger = openai.OpenAI(base_url=server.base_url, api_key="key-eve", max_retries=0)
    same = {"X-Agentlab-Conversation-Id": "shared-name"}
    history = [{"role": "user", "content": "Alice's secret plan: move to Lisbon."}]
    answer = alice.chat.completions.create(model="test-model", messages=history, extra_headers=same)  # type: ignore[arg-type]
    history.append({"role": "assistant", "content": answer.choices[0].message.content or ""})
    alice.chat.completions.create(model="test-model", messages=[*history, USER], extra_headers=same)  # type: ignore[list-item]
    bob.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "Hello?"}],
                                extra_headers=same)
    with pytest.raises(openai.AuthenticationError):
        stranger.chat.completions.create(model="test-model", messages=[USER])  # type: ignore[list-item]
    # Bob's request went upstream alone: nothing of Alice's conversation joined it.
    assert upstream.received[-1]["messages"] == [{"role": "user", "content": "Hello?"}]
    server.settle()
    rows = server.app.store.query("SELECT tenant, session_id FROM serve_conversations "
                                  "WHERE conversation_id = 'shared-name'")
    assert len(set(rows["tenant"])) == 2
    report = savings_df(server)
    shared = report[report["conversation_id"] == "shared-name"]
    assert sorted(shared["calls"]) == [1, 2]  # one row per tenant, not their sum


def test_keys_come_from_repeated_flags_and_a_key_file(tmp_path) -> None:
    from agentlab.serve import ServeConfig

    keys = tmp_path / "keys.txt"
    keys.write_text("# one key a line\nkey-carol\n\nkey-dave\nkey-alice\n", encoding="utf-8")
    config = ServeConfig(upstream="http://127.0.0.1:9/v1", api_key="key-alice", api_keys=("key-bob",),
                         api_key_file=str(keys))
    assert config.keys() == ("key-alice", "key-bob", "key-carol", "key-dave")
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no key"):
        ServeConfig(upstream="http://127.0.0.1:9/v1", api_key_file=str(empty)).check()
    with pytest.raises(ValueError, match="--api-key-file"):
        ServeConfig(upstream="http://127.0.0.1:9/v1", api_key_file=str(tmp_path / "missing.txt")).check()
    with pytest.raises(ValueError, match="requires --api-key"):
        ServeConfig(upstream="http://127.0.0.1:9/v1", host="0.0.0.0").check()
    ServeConfig(upstream="http://127.0.0.1:9/v1", host="0.0.0.0", api_key_file=str(keys)).check()


def test_oversized_headers_and_a_bad_chunk_are_refused_with_an_openai_error(proxy) -> None:
    server = proxy()
    status, payload = _raw(server.port, "POST", "/v1/chat/completions", b"{}", {"x-padding": "p" * 70_000})
    assert status == 413 and payload is not None and "header" in payload["error"]["message"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        answer = sock.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and "chunk" in json.loads(body)["error"]["message"]
