"""Large request bodies: admitted by their bytes, read without a copy, and their parsed form handed
back from the parsing process in pieces that rebuild exactly what ``json.loads`` makes.

How long the event loop is held, and the RSS over 20 requests of 60 MB, are measured by
``benchmarks/perf/bench_serve.py --large 20`` (see ``docs/serve_durability.md``).
"""

from __future__ import annotations

import asyncio
import json
import pickle
import socket
import threading
import time
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import pytest

from agentlab.serve import handoff
from agentlab.serve.http import ADMIT_OVER, HTTPRequest, HTTPResponse, HTTPServer, json_response
from agentlab.serve.memory import ByteBudget


def _through_pieces(raw: bytes) -> dict[str, Any]:
    """``raw`` parsed as the worker process does, then rebuilt as the proxy does."""
    block = SharedMemory(create=True, size=len(raw))
    try:
        assert block.buf is not None
        block.buf[:len(raw)] = raw
        made, error = handoff.parse_to_pieces(block.name, len(raw))
    finally:
        block.close()
        block.unlink()
    assert made is not None, error
    return handoff.rebuild(made)


def test_the_pieces_rebuild_what_json_loads_makes() -> None:
    # Multi-byte characters straddle the decode pieces; large strings sit in messages, in content
    # parts and in tools; many small messages make several pickled groups.
    long = "é😀x" * (handoff.DECODE_PIECE // 3)
    body = {"model": "m", "temperature": 0.5, "stream": False,
            "tools": [{"type": "function", "function": {"name": "f", "description": "d" * handoff.LARGE_STRING}}],
            "messages": [{"role": "system", "content": long},
                         {"role": "user", "content": [{"type": "text", "text": "t" * (handoff.LARGE_STRING + 1)},
                                                      {"type": "text", "text": "short"}]},
                         *({"role": "user" if i % 2 else "assistant", "content": f"turn {i} " + "w " * 300}
                           for i in range(6000))],
            "n": 1}
    raw = json.dumps(body).encode()
    rebuilt = _through_pieces(raw)
    expected = json.loads(raw)
    assert rebuilt == expected
    assert list(rebuilt) == list(expected)  # the keys keep the client's order ("messages" among them)


def test_no_piece_is_the_whole_body() -> None:
    messages = [{"role": "user", "content": f"{i} " + "word " * 800_000} for i in range(3)]
    messages += [{"role": "assistant", "content": "w " * 200} for _ in range(20_000)]
    pieces, made = handoff.pack({"model": "m", "messages": messages})
    # The 4 MB texts go over as UTF-8 (decoded DECODE_PIECE bytes at a time), not in a pickle.
    assert [length for _, _, length in made.strings] == [len(m["content"]) for m in messages[:3]]
    assert len(made.groups) > 1
    for start, length in made.groups:
        group = pickle.loads(b"".join(pieces)[start:start + length])
        assert length <= handoff.PICKLE_PIECE or len(group) == 1
    text = ("ab😀" * 700_000).encode()
    decoded = list(handoff._decode(memoryview(text)))
    assert len(decoded) > 1 and "".join(decoded) == text.decode()
    assert all(len(piece.encode()) <= handoff.DECODE_PIECE for piece in decoded)


def test_a_second_large_body_waits_until_the_first_is_let_go() -> None:
    async def scenario() -> None:
        budget = ByteBudget(100)
        first = await budget.acquire(60)
        keep = first.extend()  # a second holder (the proxy, until its ledger write is done)
        second = asyncio.ensure_future(budget.acquire(60))
        small = asyncio.ensure_future(budget.acquire(30))  # fits, but waits its turn behind the second
        await asyncio.sleep(0.01)
        assert not second.done() and not small.done()
        first.release()
        await asyncio.sleep(0.01)
        assert not second.done() and budget.held == 60
        keep()
        keep()  # once only
        await asyncio.sleep(0.01)
        assert second.done() and small.done() and budget.held == 90
        (await second).release()
        (await small).release()
        assert budget.held == 0
        huge = await budget.acquire(500)  # over the whole budget: admitted alone
        waiting = asyncio.ensure_future(budget.acquire(1))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        waiting.cancel()
        await asyncio.sleep(0)
        huge.release()
        assert budget.held == 0
        assert all(turn.done() for _, turn in budget._waiting)  # the one given up holds nothing

    asyncio.run(scenario())


def _post(port: int, body: bytes, chunked: bool = False) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        if chunked:
            head = b"POST /x HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            sock.sendall(head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        else:
            sock.sendall(b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
                         + body)
        answer = b""
        while piece := sock.recv(65536):
            answer += piece
    return answer


def test_the_server_admits_large_bodies_by_bytes_and_does_not_copy_them() -> None:
    seen: list[tuple[int, type, int]] = []
    entered = threading.Semaphore(0)
    loop = asyncio.new_event_loop()
    let_first_go = asyncio.Event()

    async def handler(request: HTTPRequest) -> HTTPResponse:
        seen.append((len(request.body), type(request.body), request.body.count(b"a")))
        entered.release()
        if len(request.body) > ADMIT_OVER and len(seen) == 1:
            assert request.hold is not None
            keep = request.hold.extend()  # held past the answer, as the proxy does until its ledger write

            async def later() -> None:
                await let_first_go.wait()
                keep()

            loop.create_task(later())
        return json_response(200, {"ok": True})

    server = HTTPServer(handler, large_body_budget=3 * ADMIT_OVER)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        big = b"a" * (2 * ADMIT_OVER)
        assert b" 200 " in _post(server.port, big)  # answered; its bytes still held
        assert entered.acquire(timeout=10)
        second = threading.Thread(target=_post, args=(server.port, big, True))
        second.start()
        assert b" 200 " in _post(server.port, b'{"small": 1}')  # a small body never waits
        assert entered.acquire(timeout=10)
        assert not entered.acquire(timeout=0.5)  # the second large body waits for the first
        assert server.budget.held == 2 * ADMIT_OVER
        loop.call_soon_threadsafe(let_first_go.set)
        assert entered.acquire(timeout=10)
        second.join(10)
        assert server.budget.held == 0
        # A large body is the bytearray it was read into (no bytes() copy), chunked or not.
        assert seen == [(len(big), bytearray, len(big)), (12, bytes, 1), (len(big), bytearray, len(big))]
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_a_large_body_that_waits_too_long_gets_a_503_and_small_ones_still_pass() -> None:
    loop = asyncio.new_event_loop()
    kept: list[Any] = []

    async def handler(request: HTTPRequest) -> HTTPResponse:
        if request.hold is not None:
            kept.append(request.hold.extend())  # never let go: the budget stays full
        return json_response(200, {"ok": True})

    server = HTTPServer(handler, large_body_budget=2 * ADMIT_OVER, idle_timeout=0.5)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        big = b"a" * (2 * ADMIT_OVER)
        assert b" 200 " in _post(server.port, big)
        began = time.perf_counter()
        answer = _post(server.port, b"b" * (ADMIT_OVER + 1))
        assert answer.startswith(b"HTTP/1.1 503 ") and b"server_busy" in answer and b"server_error" in answer
        assert 0.4 < time.perf_counter() - began < 10
        assert b" 200 " in _post(server.port, b'{"small": 1}')
        assert server.budget.held == len(big) and len(kept) == 1
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_the_proxy_holds_a_large_body_until_its_ledger_write_is_done(proxy, recording) -> None:
    import httpx

    server = proxy("passthrough", upstream=recording.base_url)
    app = server.app
    gate: asyncio.Event = server.run(_make_event())
    append = app.sessions.append_events

    appends: list[int] = []

    async def slow_append(*args: Any, **kwargs: Any) -> Any:
        appends.append(1)
        if len(appends) > 1:  # the request's messages (awaited before the answer) go in; the answer waits
            await gate.wait()
        return await append(*args, **kwargs)

    app.sessions.append_events = slow_append  # type: ignore[method-assign]
    text = "word " * 300_000
    body = {"model": "test-model", "messages": [{"role": "user", "content": text}]}
    raw = json.dumps(body).encode()
    assert len(raw) > ADMIT_OVER
    response = httpx.post(server.base_url + "/chat/completions", content=raw,
                          headers={"content-type": "application/json"}, timeout=120)
    assert response.status_code == 200, response.text
    for _ in range(500):  # the answer is appended once the response is out
        if len(appends) == 2:
            break
        time.sleep(0.01)
    assert len(appends) == 2 and not gate.is_set()
    assert app.http.budget.held == len(raw)  # answered, its ledger write not done: still held
    server.run(_set(gate))
    server.settle()
    assert app.http.budget.held == 0


async def _make_event() -> asyncio.Event:
    return asyncio.Event()


async def _set(event: asyncio.Event) -> None:
    event.set()


def test_the_budget_refuses_a_nonpositive_limit() -> None:
    with pytest.raises(ValueError, match="byte budget"):
        ByteBudget(0)
