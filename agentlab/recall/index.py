"""Generic search primitives over ``(doc_id, text)``: lexical BM25, dense cosine, and hybrid RRF.

Session recall indexes events with these; the memory service indexes memories with the same
classes. Nothing here knows about sessions.

* :class:`LexicalIndex` — BM25 on an inverted index that grows with each add (texts are tokenised
  once, on add; the next search folds the pending adds in, at the cost of their tokens), scored
  exactly as bm25s's default Lucene variant.
* :class:`DenseIndex` — cosine similarity by one matrix product. A document is embedded once
  (per distinct text); pending documents are embedded in one batch on the next search.
* :func:`rrf_fuse` — reciprocal-rank fusion, score = Σ 1 / (k + rank + 1) with 0-based ranks.
* :class:`HybridSearcher` — fuses the lexical and dense top ``3 × top_k``; ``min_score`` filters
  the dense similarity before fusion; a failing keyword search degrades to dense only.
* :class:`SearchIndex` — both indexes behind one object with a ``mode`` switch.

Ties are broken newest first (larger ``timestamp``; then later insertion).
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentlab import progress
from agentlab.recall.embed import Embedder, embed_query

log = logging.getLogger(__name__)

__all__ = [
    "ENGLISH_STOPWORDS",
    "DenseIndex",
    "HybridSearcher",
    "LexicalIndex",
    "ScoredDoc",
    "SearchIndex",
    "SearchMode",
    "rrf_fuse",
    "tokenize",
]

SearchMode = Literal["lexical", "dense", "hybrid"]
SEARCH_MODES: tuple[str, ...] = ("lexical", "dense", "hybrid")

#: Reciprocal-rank-fusion constant of trpc-agent-go's hybrid search (docs/sources.md#session-recall).
RRF_K = 60
#: Each ranked list contributes ``top_k × CANDIDATE_RATIO`` candidates to the fusion.
CANDIDATE_RATIO = 3
#: Documents embedded per embedder call when a dense index flushes (one progress step each).
EMBED_BATCH = 64

#: Function words that carry no topic; dropped from BM25 documents and queries alike.
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves""".split()
)

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

#: A predicate on doc ids: which documents a search may return.
DocFilter = Callable[[str], bool]


def tokenize(text: str, stopwords: frozenset[str] = ENGLISH_STOPWORDS) -> list[str]:
    """Lowercase runs of letters and digits, stop-words removed."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords]


@dataclass(frozen=True)
class ScoredDoc:
    """One search result. ``score`` is BM25, cosine or RRF depending on who produced it."""

    doc_id: str
    score: float


@dataclass
class _DocMeta:
    timestamp: float
    seq: int


class _Recency:
    """Insertion order and timestamps shared by the indexes, for newest-first tie breaks."""

    def __init__(self) -> None:
        self.meta: dict[str, _DocMeta] = {}
        self._seq = 0

    def touch(self, doc_id: str, timestamp: float | None) -> None:
        self._seq += 1
        ts = float(timestamp) if timestamp is not None else float(self._seq)
        self.meta[doc_id] = _DocMeta(ts, self._seq)

    def key(self, doc_id: str) -> tuple[float, int]:
        m = self.meta.get(doc_id)
        return (m.timestamp, m.seq) if m else (float("-inf"), -1)


def _ranked(ids: Sequence[str], scores: np.ndarray, recency: _Recency, top_k: int,
            include: DocFilter | None, min_score: float | None) -> list[ScoredDoc]:
    """Best ``top_k`` documents by score (newest first on ties), filtered lazily in rank order."""
    if top_k <= 0 or len(ids) == 0:
        return []
    candidates = np.flatnonzero(scores > 0) if min_score is None else np.flatnonzero(scores >= min_score)
    if candidates.size == 0:
        return []
    cand_scores = scores[candidates]
    # Plain ints index the id list (numpy integers are not ``int`` to a Sequence).
    positions: list[int] = candidates.tolist()
    stamps = np.fromiter((recency.key(ids[i])[0] for i in positions), dtype=np.float64, count=candidates.size)
    seqs = np.fromiter((recency.key(ids[i])[1] for i in positions), dtype=np.int64, count=candidates.size)
    # lexsort: last key is primary -> score desc, then timestamp desc, then insertion desc.
    order = np.lexsort((-seqs, -stamps, -cand_scores.astype(np.float64)))
    out: list[ScoredDoc] = []
    for pos in order:
        doc_id = ids[candidates[pos]]
        if include is not None and not include(doc_id):
            continue
        out.append(ScoredDoc(doc_id, float(cand_scores[pos])))
        if len(out) >= top_k:
            break
    return out


# --------------------------------------------------------------------------------------- BM25


class LexicalIndex:
    """BM25 over ``(doc_id, text)``. Re-adding an id replaces its text; ``remove`` deletes it.

    Only documents that share at least one (non-stop-word) token with the query are returned,
    so a score of 0 never appears in results.

    The index is an inverted list per term (document slots and term frequencies) plus document
    lengths, so an add costs the document's tokens, not a rebuild: adds wait in a pending batch
    that the next search folds in. Scores are computed at query time from the live statistics
    (the Lucene variant bm25s uses by default: ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``,
    ``tf / (tf + k1 (1 - b + b dl / avgdl))``, in float64, terms summed in sorted order), so an
    index grown add by add scores every query exactly as one built at once from the same documents.
    A removed document leaves a dead slot that scores 0; slots are compacted when most are dead.
    """

    def __init__(self, *, tokenizer: Callable[[str], list[str]] = tokenize, k1: float = 1.5,
                 b: float = 0.75) -> None:
        self.tokenizer = tokenizer
        self.k1 = k1
        self.b = b
        self._tokens: dict[str, list[int]] = {}
        self._vocab: dict[str, int] = {}
        self._recency = _Recency()
        self._pending: dict[str, list[int]] = {}
        self._removed: set[str] = set()
        # Folded-in documents: slot per doc id, doc id per slot, per-slot length and liveness.
        self._slot_of: dict[str, int] = {}
        self._ids: list[str] = []
        self._lengths: list[int] = []
        self._alive: list[bool] = []
        self._slot_counts: list[dict[int, int]] = []  # term id -> frequency, per slot
        self._dead = 0
        self._total_length = 0
        # Per term id: the slots holding it and its frequency there (dead slots included), and
        # how many live documents hold it.
        self._postings: dict[int, tuple[list[int], list[int]]] = {}
        self._df: dict[int, int] = {}
        self._arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._length_array = np.zeros(0, dtype=np.float64)
        self._alive_array = np.zeros(0, dtype=bool)
        self._lock = threading.Lock()
        #: How many times pending changes were folded in (once per batch of adds, not per search).
        self.builds = 0

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._tokens

    def add(self, doc_id: str, text: str, *, timestamp: float | None = None) -> None:
        """Tokenise and queue a document; it is searchable from the next search, which folds it in."""
        vocab = self._vocab
        ids: list[int] = []
        with self._lock:
            for tok in self.tokenizer(text):
                tok_id = vocab.get(tok)
                if tok_id is None:
                    tok_id = vocab[tok] = len(vocab)
                ids.append(tok_id)
            self._tokens[doc_id] = ids
            self._pending[doc_id] = ids
            self._recency.touch(doc_id, timestamp)

    def add_many(self, items: Iterable[tuple[str, str] | tuple[str, str, float | None]]) -> None:
        """``add`` for each ``(doc_id, text[, timestamp])``."""
        for item in items:
            self.add(item[0], item[1], timestamp=item[2] if len(item) > 2 else None)

    def remove(self, doc_id: str) -> None:
        """Forget a document (its slot is dropped at the next fold); unknown ids are ignored."""
        with self._lock:
            if self._tokens.pop(doc_id, None) is not None:
                self._recency.meta.pop(doc_id, None)
                self._pending.pop(doc_id, None)
                if doc_id in self._slot_of:
                    self._removed.add(doc_id)

    def build(self) -> None:
        """Fold pending adds and removals into the inverted lists (nothing to do if none)."""
        with self._lock:
            if not self._pending and not self._removed:
                return
            for doc_id in self._removed:
                self._kill(doc_id)
            self._removed.clear()
            first_new = len(self._ids)
            for doc_id, ids in self._pending.items():
                self._kill(doc_id)  # a re-added id replaces its text
                counts: dict[int, int] = {}
                for tok_id in ids:
                    counts[tok_id] = counts.get(tok_id, 0) + 1
                self._append(doc_id, counts, len(ids))
            self._pending.clear()
            if self._dead > 1000 and self._dead > len(self._ids) // 2:
                self._compact()
            else:
                self._length_array = np.concatenate(
                    [self._length_array, np.asarray(self._lengths[first_new:], dtype=np.float64)])
                self._alive_array = np.asarray(self._alive, dtype=bool)
            self.builds += 1

    def _append(self, doc_id: str, counts: dict[int, int], length: int) -> None:
        slot = len(self._ids)
        self._slot_of[doc_id] = slot
        self._ids.append(doc_id)
        self._lengths.append(length)
        self._alive.append(True)
        self._slot_counts.append(counts)
        self._total_length += length
        for tok_id, tf in counts.items():
            postings = self._postings.get(tok_id)
            if postings is None:
                postings = self._postings[tok_id] = ([], [])
            postings[0].append(slot)
            postings[1].append(tf)
            self._df[tok_id] = self._df.get(tok_id, 0) + 1
            self._arrays.pop(tok_id, None)

    def _kill(self, doc_id: str) -> None:
        slot = self._slot_of.pop(doc_id, None)
        if slot is None:
            return
        self._alive[slot] = False
        self._dead += 1
        self._total_length -= self._lengths[slot]
        # The slot's postings entries stay (masked as dead); only the document frequencies change.
        for tok_id in self._slot_counts[slot]:
            self._df[tok_id] -= 1
        self._slot_counts[slot] = {}

    def _compact(self) -> None:
        """Renumber the live slots (scores do not depend on slot numbers)."""
        live = [(doc_id, self._slot_counts[slot], self._lengths[slot])
                for slot, doc_id in enumerate(self._ids) if self._alive[slot]]
        self._slot_of, self._ids, self._lengths, self._alive, self._slot_counts = {}, [], [], [], []
        self._dead = self._total_length = 0
        self._postings, self._df, self._arrays = {}, {}, {}
        for doc_id, counts, length in live:
            self._append(doc_id, counts, length)
        self._length_array = np.asarray(self._lengths, dtype=np.float64)
        self._alive_array = np.asarray(self._alive, dtype=bool)

    def _term_arrays(self, tok_id: int) -> tuple[np.ndarray, np.ndarray]:
        cached = self._arrays.get(tok_id)
        if cached is None:
            slots, tfs = self._postings[tok_id]
            cached = (np.asarray(slots, dtype=np.int64), np.asarray(tfs, dtype=np.float64))
            self._arrays[tok_id] = cached
        return cached

    def scores(self, query: str) -> tuple[list[str], np.ndarray]:
        """BM25 score of every document for ``query`` (ids in slot order; dead slots score 0)."""
        self.build()
        with self._lock:
            ids = list(self._ids)
            n_live = len(self._ids) - self._dead
            if not ids or n_live == 0 or self._total_length == 0:
                return ids, np.zeros(len(ids), dtype=np.float32)
            terms = sorted({t for t in self.tokenizer(query) if t in self._vocab})
            scores = np.zeros(len(ids), dtype=np.float64)
            avg_length = self._total_length / n_live
            k1, b = self.k1, self.b
            for term in terms:
                tok_id = self._vocab[term]
                df = self._df.get(tok_id, 0)
                if df <= 0:
                    continue
                slots, tfs = self._term_arrays(tok_id)
                idf = math.log(1.0 + (n_live - df + 0.5) / (df + 0.5))
                lengths = self._length_array[slots]
                contribution = idf * tfs / (tfs + k1 * (1.0 - b + b * lengths / avg_length))
                if self._dead:
                    contribution = np.where(self._alive_array[slots], contribution, 0.0)
                scores[slots] += contribution
            return ids, scores.astype(np.float32)

    def search(self, query: str, top_k: int, *, include: DocFilter | None = None,
               min_score: float | None = None) -> list[ScoredDoc]:
        """Best ``top_k`` matches (score > 0, and >= ``min_score`` when given)."""
        ids, scores = self.scores(query)
        floor = None if not min_score or min_score <= 0 else float(min_score)
        return _ranked(ids, scores, self._recency, top_k, include, floor)


# -------------------------------------------------------------------------------------- dense


class DenseIndex:
    """Cosine similarity over embedded documents.

    Adding stores the text as pending; the next search embeds all pending documents in one
    batch. A doc id is embedded once per distinct text: re-adding the same text is free.
    ``add(..., vector=v)`` stores a precomputed vector (e.g. one loaded from a database).
    """

    def __init__(self, embedder: Embedder, *, max_chars: int = 4000) -> None:
        self.embedder = embedder
        #: Texts longer than this are cut before embedding (models have input limits).
        self.max_chars = max_chars
        self._vectors: dict[str, np.ndarray] = {}
        self._texts: dict[str, str] = {}
        self._pending: dict[str, str] = {}
        self._recency = _Recency()
        self._matrix: np.ndarray | None = None
        self._ids: list[str] = []
        self._lock = threading.Lock()
        #: Number of documents ever sent to the embedder (never counts one text twice).
        self.embedded_count = 0

    def __len__(self) -> int:
        return len(self._vectors) + len(self._pending)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._vectors or doc_id in self._pending

    def add(self, doc_id: str, text: str, *, timestamp: float | None = None,
            vector: np.ndarray | None = None) -> None:
        """Queue a document for embedding, or store ``vector`` as its embedding when given."""
        with self._lock:
            self._recency.touch(doc_id, timestamp)
            if vector is not None:
                row = np.asarray(vector, dtype=np.float32).reshape(-1)
                norm = float(np.linalg.norm(row))
                self._vectors[doc_id] = row / norm if norm else row
                self._texts[doc_id] = text
                self._pending.pop(doc_id, None)
                self._matrix = None
                return
            if self._texts.get(doc_id) == text and doc_id in self._vectors:
                return
            self._pending[doc_id] = text

    def remove(self, doc_id: str) -> None:
        """Forget a document and its vector; unknown ids are ignored."""
        with self._lock:
            self._pending.pop(doc_id, None)
            self._texts.pop(doc_id, None)
            self._recency.meta.pop(doc_id, None)
            if self._vectors.pop(doc_id, None) is not None:
                self._matrix = None

    def vector(self, doc_id: str) -> np.ndarray | None:
        """The stored vector of a document (after a ``flush``), or ``None``."""
        return self._vectors.get(doc_id)

    def flush(self) -> int:
        """Embed every pending document now; returns how many were embedded.

        Holds the lock while embedding so two concurrent flushes never embed the same text.
        """
        with self._lock:
            if not self._pending:
                return 0
            pending = list(self._pending.items())
            texts = [text[: self.max_chars] for _, text in pending]
            # In batches, so a long flush (thousands of events on a CPU model) reports progress;
            # each text's vector does not depend on the batch it is embedded in.
            parts = []
            for start in range(0, len(texts), EMBED_BATCH):
                parts.append(self.embedder.embed(texts[start:start + EMBED_BATCH]))
                if len(texts) > EMBED_BATCH:
                    progress.report_progress("embedding", min(start + EMBED_BATCH, len(texts)), len(texts),
                                             unit="texts")
            matrix = np.concatenate(parts) if len(parts) > 1 else parts[0]
            if matrix.shape[0] != len(pending):
                raise RuntimeError(
                    f"embedder {self.embedder.name!r} returned {matrix.shape[0]} vectors for {len(pending)} texts"
                )
            for (doc_id, text), row in zip(pending, matrix, strict=True):
                self._vectors[doc_id] = np.asarray(row, dtype=np.float32)
                self._texts[doc_id] = text
            self._pending.clear()
            self.embedded_count += len(pending)
            self._matrix = None
            return len(pending)

    def _current_matrix(self) -> tuple[list[str], np.ndarray]:
        with self._lock:
            if self._matrix is None:
                self._ids = list(self._vectors)
                self._matrix = (
                    np.stack([self._vectors[d] for d in self._ids]).astype(np.float32)
                    if self._ids
                    else np.zeros((0, self.embedder.dim), dtype=np.float32)
                )
            return self._ids, self._matrix

    def similarities(self, query: str | None = None, *, query_vector: np.ndarray | None = None
                     ) -> tuple[list[str], np.ndarray]:
        """Cosine similarity of every document to the query (ids in matrix order)."""
        self.flush()
        ids, matrix = self._current_matrix()
        if not ids:
            return [], np.zeros(0, dtype=np.float32)
        if query_vector is None:
            if query is None:
                raise ValueError("DenseIndex.similarities needs a query or a query_vector")
            query_vector = embed_query(self.embedder, [query])[0]
        return ids, matrix @ np.asarray(query_vector, dtype=np.float32).reshape(-1)

    def search(self, query: str | None, top_k: int, *, include: DocFilter | None = None,
               min_score: float | None = None, query_vector: np.ndarray | None = None) -> list[ScoredDoc]:
        """Best ``top_k`` by cosine; ``min_score`` (a similarity in [-1, 1]) filters first.

        Without ``min_score`` only positive similarities are returned.
        """
        ids, sims = self.similarities(query, query_vector=query_vector)
        floor = None if min_score is None or min_score <= 0 else float(min_score)
        return _ranked(ids, sims, self._recency, top_k, include, floor)


# ----------------------------------------------------------------------------------- fusion


def rrf_fuse(rankings: Sequence[Sequence[str]], *, k: int = RRF_K, top_k: int | None = None,
             recency: Callable[[str], float] | None = None) -> list[ScoredDoc]:
    """Reciprocal-rank fusion: each list adds ``1 / (k + rank + 1)`` (rank 0-based) per doc.

    Sorted by fused score; ties go to the newer document (``recency(doc_id)`` larger), then to
    the one ranked earlier in the first list that has it.
    """
    fused: dict[str, float] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    for list_index, ranking in enumerate(rankings):
        for rank, doc_id in enumerate(ranking):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (k + rank + 1)
            first_seen.setdefault(doc_id, (list_index, rank))

    def order(doc_id: str) -> tuple[float, float, int, int]:
        newer = recency(doc_id) if recency is not None else 0.0
        list_index, rank = first_seen[doc_id]
        return (-fused[doc_id], -newer, list_index, rank)

    ranked = [ScoredDoc(d, fused[d]) for d in sorted(fused, key=order)]
    return ranked if top_k is None else ranked[:top_k]


class HybridSearcher:
    """Lexical + dense, fused by RRF over ``candidate_ratio × top_k`` candidates from each."""

    def __init__(self, lexical: LexicalIndex, dense: DenseIndex, *, k: int = RRF_K,
                 candidate_ratio: int = CANDIDATE_RATIO) -> None:
        self.lexical = lexical
        self.dense = dense
        self.k = k
        self.candidate_ratio = candidate_ratio

    def search(self, query: str, top_k: int, *, include: DocFilter | None = None,
               min_score: float | None = None, query_vector: np.ndarray | None = None) -> list[ScoredDoc]:
        """Best ``top_k`` by RRF of the dense and lexical candidates; lexical failure degrades to dense only."""
        candidates = max(1, top_k) * self.candidate_ratio
        # min_score is a similarity threshold: it filters the dense list only, before fusion.
        dense_hits = self.dense.search(query, candidates, include=include, min_score=min_score,
                                       query_vector=query_vector)
        try:
            lexical_hits = self.lexical.search(query, candidates, include=include)
        except Exception as exc:  # keyword search is an enhancement; dense alone still answers
            log.warning("keyword search failed, using dense results only: %s", exc)
            lexical_hits = []

        def recency(doc_id: str) -> float:
            return max(self.dense._recency.key(doc_id)[0], self.lexical._recency.key(doc_id)[0])

        return rrf_fuse([[h.doc_id for h in dense_hits], [h.doc_id for h in lexical_hits]],
                        k=self.k, top_k=top_k, recency=recency)


class SearchIndex:
    """A lexical index, plus a dense one when an embedder is given, searched by mode.

    ``min_score`` means: BM25 score floor in ``lexical`` mode, cosine floor in ``dense`` mode,
    and (as in the reference) the dense cosine floor applied before fusion in ``hybrid`` mode.
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        self.embedder = embedder
        self.lexical = LexicalIndex()
        self.dense = DenseIndex(embedder) if embedder is not None else None
        self.hybrid = HybridSearcher(self.lexical, self.dense) if self.dense is not None else None

    def __len__(self) -> int:
        return len(self.lexical)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.lexical

    def add(self, doc_id: str, text: str, *, timestamp: float | None = None,
            vector: np.ndarray | None = None) -> None:
        """Add a document to the lexical index and, with an embedder, the dense one."""
        self.lexical.add(doc_id, text, timestamp=timestamp)
        if self.dense is not None:
            self.dense.add(doc_id, text, timestamp=timestamp, vector=vector)

    def remove(self, doc_id: str) -> None:
        """Remove a document from every index it is in."""
        self.lexical.remove(doc_id)
        if self.dense is not None:
            self.dense.remove(doc_id)

    def resolve_mode(self, mode: str | None) -> str:
        """The mode a search will really use: dense modes need an embedder."""
        if mode is None:
            return "hybrid" if self.dense is not None else "lexical"
        if mode not in SEARCH_MODES:
            raise ValueError(f"unknown search mode {mode!r}: use one of {', '.join(SEARCH_MODES)}")
        if mode != "lexical" and self.dense is None:
            raise ValueError(f"search mode {mode!r} needs an embedder (none is configured)")
        return mode

    def search(self, query: str, top_k: int, *, mode: str | None = None, include: DocFilter | None = None,
               min_score: float | None = None, query_vector: np.ndarray | None = None) -> list[ScoredDoc]:
        """Best ``top_k`` in ``mode`` (default: hybrid with an embedder, else lexical); embeds on this thread."""
        resolved = self.resolve_mode(mode)
        if resolved == "lexical":
            return self.lexical.search(query, top_k, include=include, min_score=min_score)
        assert self.dense is not None and self.hybrid is not None
        if resolved == "dense":
            return self.dense.search(query, top_k, include=include, min_score=min_score, query_vector=query_vector)
        return self.hybrid.search(query, top_k, include=include, min_score=min_score, query_vector=query_vector)

    async def asearch(self, query: str, top_k: int, *, mode: str | None = None,
                      include: DocFilter | None = None, min_score: float | None = None) -> list[ScoredDoc]:
        """``search`` with embedding (documents and query) done off the event loop."""
        resolved = self.resolve_mode(mode)
        query_vector = None
        if resolved != "lexical" and self.dense is not None:
            await asyncio.to_thread(self.dense.flush)
            query_vector = (await asyncio.to_thread(embed_query, self.dense.embedder, [query]))[0]
        return self.search(query, top_k, mode=resolved, include=include, min_score=min_score,
                           query_vector=query_vector)
