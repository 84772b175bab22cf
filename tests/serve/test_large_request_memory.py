"""What a large request leaves behind: glibc gives freed megabytes back, no cache keeps its texts, and
a body of megabytes reaches the upstream whole though it is copied and written in pieces.

The RSS over 20 requests of 60 MB is measured by ``benchmarks/perf/bench_serve.py --large 20``.
"""

from __future__ import annotations

import ctypes.util
import json

import pytest

from agentlab.serve import memory


@pytest.mark.skipif(ctypes.util.find_library("c") is None or not hasattr(ctypes.CDLL(ctypes.util.find_library("c")),
                                                                           "malloc_trim"), reason="glibc only")
def test_glibc_gives_large_blocks_back() -> None:
    assert memory.hand_back_large_blocks() is True
    assert isinstance(memory.trim(), bool)


def test_a_body_of_megabytes_reaches_the_upstream_whole(upstream, proxy) -> None:
    import httpx

    server = proxy("passthrough")
    text = "word " * 600_000  # 3 MB a message, 6 MB a body: written upstream in 1 MiB pieces
    body = {"model": "test-model", "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": text},
                                                {"role": "user", "content": "and?"}]}
    response = httpx.post(server.base_url + "/chat/completions", content=json.dumps(body).encode(),
                          headers={"content-type": "application/json"}, timeout=120)
    # The test server refuses a prompt past its window, after reading (and recording) the whole body.
    assert response.status_code == 400 and "1200016 tokens" in response.text, response.text
    assert upstream.received[-1]["messages"][0]["content"] == text


def test_counting_a_long_text_keeps_no_copy_of_it_alive() -> None:
    import sys

    from agentlab.model import tokens

    text = "request 7 " + "word " * 4000  # past tokens.LONG_TEXT_CHARS
    before = sys.getrefcount(text)
    first = tokens.count_text(text)
    # Remembered by length and hash: counted once, and the cache holds no reference to the text (an
    # lru_cache of 8,192 texts held every 4 MB message of every large request: 2.8 GB after 20).
    assert tokens.count_text(text) == first == len(tokens.get_encoding().encode_ordinary(text))
    assert sys.getrefcount(text) == before
    special = "x <|endoftext|> naïve " + "word " * 3000  # counted without the list of tokens, the same
    assert tokens.count_text(special) == len(tokens.get_encoding().encode_ordinary(special))
    short = "a short text"
    assert tokens.count_text(short) == tokens.count_text(short) > 0


def test_whitespace_of_a_long_text_is_normalised_in_pieces_to_the_same_text() -> None:
    from agentlab.serve.wire import SPACE_PIECE, canonical, normalise_space

    for text in ["a  b\n c", "word " * SPACE_PIECE, ("x" * (SPACE_PIECE + 3)) + "  y\t\u3000z " + "ab\u00a0 " * 70_000,
                 " " * (SPACE_PIECE * 2 + 1), "lead  " + "z" * (3 * SPACE_PIECE)]:
        assert normalise_space(text) == " ".join(text.split())
    long = {"role": "user", "content": "many   words\n" * 40_000}
    assert canonical(long) == json.dumps(["user", " ".join(long["content"].split()), [], None], ensure_ascii=False,
                                         separators=(",", ":"))


def test_a_large_body_is_parsed_in_the_worker_from_shared_memory(upstream, proxy) -> None:
    import httpx

    from agentlab.serve.proxy import OFF_LOOP_BYTES

    server = proxy("passthrough")
    text = "xxxxxxxxxxxxxxx " * (OFF_LOOP_BYTES // 12)  # over the size parsed off the loop, within the window
    for bad, status in ((b'{"model": "m", "messages": [' + b" " * OFF_LOOP_BYTES + b"]", 400), (None, 200)):
        body = bad or json.dumps({"model": "test-model", "messages": [{"role": "user", "content": text}]}).encode()
        response = httpx.post(server.base_url + "/chat/completions", content=body,
                              headers={"content-type": "application/json"}, timeout=120)
        assert response.status_code == status, response.text
    assert upstream.received[-1]["messages"][0]["content"] == text


def test_the_server_caps_the_allocator_before_it_starts_any_thread(monkeypatch) -> None:
    from agentlab.serve import __main__ as cli
    from agentlab.serve import server

    order: list[str] = []
    monkeypatch.setattr(memory, "hand_back_large_blocks", lambda: order.append("allocator") or True)

    async def serve_forever(config, ready) -> None:  # noqa: ANN001 - stands in for the server
        order.append("serve")

    monkeypatch.setattr(server, "serve_forever", serve_forever)
    assert cli.main(["--upstream", "http://127.0.0.1:9", "--db", ":memory:"]) == 0
    assert order == ["allocator", "serve"]


def test_a_large_event_is_encoded_in_pieces_to_the_same_json(monkeypatch) -> None:
    from agentlab import events
    from agentlab.events import Event, Message
    from agentlab.serve.wire import canonical
    from agentlab.session.duckdb_tables import event_json

    long = "naïve \"quoted\"\n\\ " * 40_000 + "\U0001f600 end"  # past JSON_PIECE, escapes across piece edges
    assert len(long) > 2 * events.JSON_PIECE
    samples = [Event(author="user", choices=[Message(role="user", content=long)], metadata={"chain": "ab", "n": [1, 2.5]}),
               Event(author="user", choices=[Message(role="user", content="short")])]
    wire = {"role": "user", "content": [{"type": "text", "text": long}], "tool_calls": [], "x": {"b": 1, "a": None}}
    expected = [event.to_json() for event in samples] + [
        json.dumps(["user", " ".join(long.split()), [], None], ensure_ascii=False, separators=(",", ":"))]
    calls: list[int] = []
    dumps = json.dumps

    def counting_dumps(value, **kwargs):  # noqa: ANN001, ANN003, ANN202
        calls.append(len(value) if isinstance(value, str) else 0)
        return dumps(value, **kwargs)

    monkeypatch.setattr(events.json, "dumps", counting_dumps)
    encoders = [lambda: event_json(samples[0]), lambda: event_json(samples[1]), lambda: canonical(wire)]
    for encode, text in zip(encoders, expected, strict=True):
        calls.clear()
        assert encode() == text
        # No single call encodes more than a piece of the long text (the lock is given back between them).
        assert max(calls) <= events.JSON_PIECE
    monkeypatch.undo()
    assert events.dumps_in_pieces(wire, sort_keys=True) == json.dumps(wire, ensure_ascii=False, sort_keys=True)
