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
