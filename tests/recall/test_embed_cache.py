"""Embeddings cached by content: a second run embeds nothing; text, side and model each change the key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentlab.recall.embed import HashEmbedder
from agentlab.recall.embed_cache import CachedEmbedder, EmbeddingCache, default_embed_cache_path


class CountingEmbedder(HashEmbedder):
    """A hash embedder that counts the texts it was asked to embed, per side."""

    def __init__(self) -> None:
        super().__init__(64)
        self.documents: list[str] = []
        self.queries: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.documents += texts
        return super().embed(texts)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        self.queries += texts
        return -super().embed(texts)  # a different vector per side, as e5's prefixes give


def test_second_process_embeds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "embed.duckdb"
    first_model = CountingEmbedder()
    first = CachedEmbedder(first_model, EmbeddingCache(path))
    docs = first.embed(["a puppy named Oscar", "camping in the mountains", "a puppy named Oscar"])
    query = first.embed_query(["which puppy?"])
    assert first_model.documents == ["a puppy named Oscar", "camping in the mountains"]  # a repeat is embedded once
    assert first.embedded == 3 and first.reused == 1
    assert first.query_cost_ms("which puppy?") is not None
    assert first.replayed_query_cost_ms("which puppy?") is None  # embedded here: its time was spent here
    first.cache.close()

    again_model = CountingEmbedder()
    again = CachedEmbedder(again_model, EmbeddingCache(path))
    np.testing.assert_allclose(again.embed(["camping in the mountains", "a puppy named Oscar"]), docs[[1, 0]], atol=1e-6)
    np.testing.assert_allclose(again.embed_query(["which puppy?"]), query, atol=1e-6)
    assert again_model.documents == [] and again_model.queries == [] and again.embedded == 0
    # The replayed query still reports what its embedding cost when it was made.
    assert again.replayed_query_cost_ms("which puppy?") == first.query_cost_ms("which puppy?")
    # A new text, or the same text on the other side, is a miss.
    again.embed(["which puppy?", "a new turn"])
    assert again_model.documents == ["which puppy?", "a new turn"]


def test_another_model_never_reuses_a_vector() -> None:
    cache = EmbeddingCache(None)
    CachedEmbedder(HashEmbedder(64), cache).embed(["same text"])
    other = HashEmbedder(32)
    cached = CachedEmbedder(other, cache)
    assert cached.embed(["same text"]).shape == (1, 32) and cached.embedded == 1
    assert cache.count("hash-64") == 1 and cache.count("hash-32") == 1


def test_default_path_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLAB_EMBED_CACHE_DB", str(tmp_path / "x.duckdb"))
    assert default_embed_cache_path() == tmp_path / "x.duckdb"
    monkeypatch.delenv("AGENTLAB_EMBED_CACHE_DB")
    assert default_embed_cache_path() == Path("results") / "embed_cache.duckdb"
