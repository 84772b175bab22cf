"""Inputs that once got a 500, a dropped connection or a silence: each now gets a 4xx (or a 408)
with an OpenAI error body, nothing goes upstream, and no 500 row is stored.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest

USER = {"role": "user", "content": "Where is the Lisbon office?"}
ASSISTANT_CALL = {"role": "assistant", "content": None,
                  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}


def _exchange(port: int, raw: bytes, timeout: float = 20.0) -> tuple[int | None, dict[str, Any] | None, float]:
    """Send ``raw`` bytes as they are and read until the server closes: (status, JSON body, seconds)."""
    began = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
                head, sep, body = data.partition(b"\r\n\r\n")
                length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")]
                if sep and length and len(body) >= length[0]:
                    break
        except (TimeoutError, ConnectionResetError):
            pass
    seconds = time.monotonic() - began
    if not data:
        return None, None, seconds
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    try:
        return status, json.loads(body), seconds
    except json.JSONDecodeError:
        return status, None, seconds


def _post(body: bytes, content_type: str = "application/json") -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: " + content_type.encode()
            + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


_UTF16_LONE = ('{"model": "m", "messages": [{"role": "user", "content": "a'.encode("utf-16-le")
               + b"\x00\xd8" + '"}]}'.encode("utf-16-le"))


@pytest.mark.parametrize(("body", "wanted"), [
    (b'{"model": "m", "messages": [{"role": "user", "content": "bad \xed\xa0\x80 bytes"}]}', "not valid UTF-8"),
    (b'{"model": "bad\xed\xa0\x80model", "messages": [{"role": "user", "content": "hi"}]}', "not valid UTF-8"),
    (_UTF16_LONE, "not valid UTF-16"),
    (b'{"model": "m", "max_tokens": ' + b"9" * 5000 + b', "messages": [{"role": "user", "content": "hi"}]}',
     "cannot read"),
    (json.dumps({"model": "m", "messages": [USER, ASSISTANT_CALL, {"role": "tool", "tool_call_id": "c1",
                                                                   "name": {"x": 1}, "content": "r"}]}).encode(),
     "name must be a string"),
], ids=["surrogate-bytes-in-content", "surrogate-bytes-in-model", "utf16-lone-surrogate", "5000-digit-integer",
        "tool-name-an-object"])
def test_bodies_that_got_a_500_get_a_400_and_store_no_500_row(proxy, upstream, body, wanted) -> None:
    server = proxy()
    status, payload, _ = _exchange(server.port, _post(body))
    assert status == 400, (status, payload)
    assert payload is not None and wanted in payload["error"]["message"], payload
    assert upstream.received == []
    calls = server.calls()
    assert (calls["status"] >= 500).sum() == 0 if len(calls) else True
    # The server still serves the next, well-formed request.
    status, payload, _ = _exchange(server.port, _post(json.dumps({"model": "test-model", "messages": [USER]}).encode()))
    assert status == 200, payload


def _chunked(*pieces: bytes) -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + b"".join(pieces))


@pytest.mark.parametrize("size", [b"-5", b"+5", b"0x5", b"1_0"])
def test_a_chunk_size_that_is_not_hex_is_400(proxy, upstream, size) -> None:
    server = proxy()
    status, payload, _ = _exchange(server.port, _chunked(size + b"\r\nhello\r\n0\r\n\r\n"))
    assert status == 400, (status, payload)
    assert payload is not None and "chunk size" in payload["error"]["message"]
    assert upstream.received == []


def test_a_chunked_body_that_never_ends_gets_a_408_at_the_idle_timeout(proxy, upstream) -> None:
    server = proxy(idle_timeout=1.0)
    status, payload, seconds = _exchange(server.port, _chunked(b"5\r\nhello\r\n"))
    assert status == 408, (status, payload)
    assert payload is not None and payload["error"]["code"] == "request_timeout"
    assert seconds < 10
    assert upstream.received == []


@pytest.mark.parametrize("value", [b"Bearer sk-a\rX-Injected-By-Client: yes", b"Bearer sk-a\x00b"])
def test_a_cr_or_nul_inside_a_header_is_400_and_never_forwarded(proxy, upstream, value) -> None:
    server = proxy()  # no --api-key: the client's Authorization is forwarded upstream
    body = json.dumps({"model": "test-model", "messages": [USER]}).encode()
    raw = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nauthorization: "
           + value + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    status, payload, _ = _exchange(server.port, raw)
    assert status == 400, (status, payload)
    assert payload is not None and "CR, LF or NUL" in payload["error"]["message"]
    assert upstream.received == []
