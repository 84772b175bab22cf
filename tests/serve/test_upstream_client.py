"""The proxy's HTTP client against raw sockets: the head in one read, and what a bad server gets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from agentlab.serve.upstream import UpstreamClient, UpstreamError


async def _serve(answer: Callable[[bytes], bytes | None],
                 once: bool = False) -> tuple[asyncio.AbstractServer, int, list[int]]:
    """A server that answers each request with ``answer(head)`` (``None``: close at once; a reply
    without a complete head: write it, then close).
    """
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            reply = answer(head)
            if reply is None:
                break
            writer.write(reply)
            await writer.drain()
            if b"\r\n\r\n" not in reply or once:
                break  # a cut-off head, or a server that closes kept-alive connections: it goes away
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], connections


def _run(answer: Callable[[bytes], bytes | None], requests: int = 1, timeout: float = 5.0,
         once: bool = False) -> tuple[Any, list[int]]:
    async def scenario() -> tuple[Any, list[int]]:
        server, port, connections = await _serve(answer, once)
        client = UpstreamClient(f"http://127.0.0.1:{port}/v1", timeout=timeout)
        try:
            out = []
            for _ in range(requests):
                resp = await client.request("POST", "/chat/completions", {"content-type": "application/json"}, b"{}")
                out.append((resp.status, resp.headers, await resp.read()))
            return out, connections
        finally:
            await client.close()
            server.close()

    return asyncio.run(scenario())


def test_heads_and_bodies_are_read_and_the_connection_reused() -> None:
    body = b'{"ok": true}'
    reply = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Many:  a:b \r\nContent-Length: %d\r\n\r\n%s"
             % (len(body), body))
    out, connections = _run(lambda head: reply, requests=3)
    assert [(s, h["content-type"], h["x-many"], b) for s, h, b in out] == [(200, "application/json", "a:b", body)] * 3
    assert len(connections) == 1  # keep-alive: one connection for the three requests


def test_an_idle_connection_the_server_closed_is_retried_on_a_new_one() -> None:
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    out, connections = _run(lambda head: reply, requests=3, once=True)
    assert [b for _, _, b in out] == [b"ok"] * 3 and len(connections) == 3


def test_chunked_bodies() -> None:
    reply = b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    out, _ = _run(lambda head: reply)
    assert out == [(503, {"transfer-encoding": "chunked"}, b"hello world")]


@pytest.mark.parametrize(("reply", "message"), [
    (None, "closed before answering"),
    (b"HTTP/1.1 200 OK\r\nContent-Le", "incomplete head"),
    (b"SMTP ready\r\n\r\n", "not HTTP"),
])
def test_a_bad_server_is_an_upstream_error(reply: bytes | None, message: str) -> None:
    with pytest.raises(UpstreamError, match=message) as caught:
        _run(lambda head: reply)
    assert not caught.value.timeout


def test_a_silent_server_times_out() -> None:
    async def scenario() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(5)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        client = UpstreamClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", timeout=0.2)
        try:
            await client.request("GET", "/models", {})
        finally:
            server.close()

    with pytest.raises(UpstreamError, match="within 0.2 s") as caught:
        asyncio.run(scenario())
    assert caught.value.timeout


def test_a_header_with_a_line_break_is_never_written_upstream() -> None:
    async def scenario() -> str:
        client = UpstreamClient("http://127.0.0.1:9/v1", timeout=1)
        try:
            await client.request("POST", "/chat/completions", {"authorization": "Bearer a\rX-Injected: yes"}, b"{}")
        except ValueError as exc:
            return str(exc)
        finally:
            await client.close()
        return "sent"

    assert "CR, LF or NUL" in asyncio.run(scenario())
