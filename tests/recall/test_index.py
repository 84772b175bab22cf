"""Search primitives: BM25 laziness, dense caching, RRF arithmetic and hybrid fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

from agentlab.recall.embed import HashEmbedder
from agentlab.recall.index import (
    DenseIndex,
    HybridSearcher,
    LexicalIndex,
    SearchIndex,
    rrf_fuse,
    tokenize,
)


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.texts_seen: list[str] = []

    def embed(self, texts):
        self.texts_seen.extend(texts)
        return super().embed(texts)

    def embed_query(self, texts):
        return super().embed(texts)  # queries are not documents: not counted


def test_tokenize_lowercases_splits_and_drops_stopwords():
    assert tokenize("The DEPLOY-key is alpha_7, and it's été!") == ["deploy", "key", "alpha", "7", "s", "été"]


def test_lexical_index_rebuilds_lazily_once_per_batch_of_adds():
    idx = LexicalIndex()
    idx.add("d1", "the invoice total was 420 euros", timestamp=1)
    idx.add("d2", "the weather was sunny", timestamp=2)
    assert idx.builds == 0
    hits = idx.search("invoice total", 5)
    assert [h.doc_id for h in hits] == ["d1"] and hits[0].score > 0
    idx.search("weather", 5)
    assert idx.builds == 1  # no adds in between: no rebuild
    idx.add("d3", "a second invoice arrived", timestamp=3)
    hits = idx.search("invoice", 5)
    assert {h.doc_id for h in hits} == {"d1", "d3"} and idx.builds == 2
    idx.remove("d3")
    assert [h.doc_id for h in idx.search("invoice", 5)] == ["d1"]
    assert idx.search("nothing matches here", 5) == []


def test_lexical_ties_go_to_the_newer_document_and_include_filters():
    idx = LexicalIndex()
    for i in range(4):
        idx.add(f"d{i}", "same words exactly", timestamp=float(i))
    assert [h.doc_id for h in idx.search("words", 3)] == ["d3", "d2", "d1"]
    assert [h.doc_id for h in idx.search("words", 3, include=lambda d: d in {"d0", "d2"})] == ["d2", "d0"]


def test_dense_index_never_embeds_a_document_twice():
    emb = CountingEmbedder()
    idx = DenseIndex(emb)
    idx.add("a", "red apples and green pears")
    idx.add("b", "network outage in the data centre")
    assert emb.texts_seen == []  # lazy
    first = idx.search("apples", 2)
    idx.add("a", "red apples and green pears")  # same text again: no new embedding
    idx.add("c", "apples again")
    idx.search("apples", 2)
    idx.search("outage", 2)
    assert sorted(emb.texts_seen) == sorted(["red apples and green pears", "network outage in the data centre",
                                             "apples again"])
    assert idx.embedded_count == 3
    assert first[0].doc_id == "a"
    # cosine by matmul, exactly
    va = emb.embed(["red apples and green pears"])[0]
    q = emb.embed(["apples"])[0]
    assert first[0].score == pytest.approx(float(va @ q), abs=1e-6)


def test_dense_min_score_and_precomputed_vectors():
    idx = DenseIndex(HashEmbedder(64))
    idx.add("x", "ignored text", vector=np.ones(64) * 5)
    idx.add("y", "apples")
    ones = np.ones(64, dtype=np.float32) / 8.0
    hits = idx.search(None, 5, query_vector=ones)
    assert hits[0].doc_id == "x" and hits[0].score == pytest.approx(1.0, abs=1e-6)
    assert idx.search("apples", 5, min_score=0.99)[0].doc_id == "y"
    assert all(h.score >= 0.99 for h in idx.search("apples", 5, min_score=0.99))


def test_rrf_math_and_newer_first_ties():
    fused = rrf_fuse([["a", "b", "c"], ["b", "d"]], k=60)
    scores = {h.doc_id: h.score for h in fused}
    assert scores["a"] == pytest.approx(1 / 61)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["c"] == pytest.approx(1 / 63)
    assert scores["d"] == pytest.approx(1 / 62)
    assert [h.doc_id for h in fused] == ["b", "a", "d", "c"]
    # a and d tie at rank 0 of their lists: the newer one wins
    tie = rrf_fuse([["a"], ["d"]], recency={"a": 1.0, "d": 5.0}.get)
    assert [h.doc_id for h in tie] == ["d", "a"]
    assert rrf_fuse([["a", "b"], ["c"]], top_k=1)[0].doc_id in {"a", "c"}


def test_hybrid_uses_three_times_candidates_and_min_score_on_dense_only():
    lexical = LexicalIndex()
    dense = DenseIndex(HashEmbedder(64))
    for i in range(12):
        text = f"report number {i} about budget planning"
        lexical.add(f"d{i}", text, timestamp=i)
        dense.add(f"d{i}", text, timestamp=i)
    searcher = HybridSearcher(lexical, dense)
    hits = searcher.search("budget planning", 2)
    assert len(hits) == 2
    # With an impossible dense floor only the lexical list remains: scores are single 1/(60+r+1).
    only_lexical = searcher.search("budget planning", 2, min_score=1.01)
    assert [round(h.score, 9) for h in only_lexical] == [round(1 / 61, 9), round(1 / 62, 9)]


def test_hybrid_keyword_failure_falls_back_to_dense():
    lexical = LexicalIndex()
    dense = DenseIndex(HashEmbedder(64))
    dense.add("only", "dense only document about rockets")

    def broken(*args, **kwargs):
        raise RuntimeError("bm25 exploded")

    lexical.search = broken  # type: ignore[method-assign]
    hits = HybridSearcher(lexical, dense).search("rockets", 3)
    assert [h.doc_id for h in hits] == ["only"] and hits[0].score == pytest.approx(1 / 61)


async def test_search_index_modes_and_errors():
    plain = SearchIndex()
    plain.add("m1", "likes hiking in the alps")
    assert plain.resolve_mode(None) == "lexical"
    with pytest.raises(ValueError, match="needs an embedder"):
        plain.search("hiking", 3, mode="dense")
    with pytest.raises(ValueError, match="unknown search mode 'fuzzy'"):
        plain.search("hiking", 3, mode="fuzzy")
    both = SearchIndex(HashEmbedder(64))
    both.add("m1", "likes hiking in the alps", timestamp=1)
    both.add("m2", "allergic to peanuts", timestamp=2)
    assert both.resolve_mode(None) == "hybrid"
    for mode in ("lexical", "dense", "hybrid"):
        hits = await both.asearch("hiking alps", 1, mode=mode)
        assert hits[0].doc_id == "m1", mode
