"""The retrievers offered on LoCoMo's Table 3 protocol, each named with the text it indexes.

The protocol (:mod:`agentlab.bench.retrieval.locomo`) fixes the *units* and what retrieving one
yields; it leaves open what a retriever indexes for a unit. DRAGON in the paper indexes the unit's
own text. Our tuned retrievers (:data:`~agentlab.bench.retrieval.locomo.TUNED`) widen the lexical
text (document expansion: a dialog turn with its session date and the turns either side of it, an
observation with the turns it cites, a summary with its date), and that widening is what puts them
above DRAGON. So every retriever comes in two variants, and every output names the indexed text:

* ``lexical``, ``dense``, ``hybrid`` — the tuned configuration of the unit (``dense`` indexes the
  unit's own text under every tuned configuration, so it has no second variant);
* ``lexical-protocol-text``, ``hybrid-protocol-text`` — the same BM25 (stemming, k1, b) and the
  same fusion, with every expansion switched off: the index holds exactly the protocol's unit text.

:func:`measure` runs one of them; :func:`compare` runs the set :data:`COMPARED` for the one table
of ``locomo --retrieval-only --unit U`` without ``--retriever``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentlab.bench.retrieval.locomo import (
    PROTOCOL,
    PROTOCOL_KS,
    TUNED,
    RetrieverConfig,
    protocol_embedder,
    protocol_recall,
)

if TYPE_CHECKING:
    from agentlab.bench.config import Settings
    from agentlab.bench.tasks import Case
    from agentlab.recall.embed import Embedder

__all__ = ["COMPARED", "DRAGON_INDEXED_TEXT", "PROTOCOL_TEXT_SUFFIX", "RETRIEVER_CHOICES", "compare", "describe_indexed_text",
           "is_expanded", "measure", "protocol_text_config", "resolve"]

PROTOCOL_TEXT_SUFFIX = "-protocol-text"
#: Every ``--retriever`` name.
RETRIEVER_CHOICES: tuple[str, ...] = ("lexical", "dense", "hybrid", "lexical" + PROTOCOL_TEXT_SUFFIX,
                                      "hybrid" + PROTOCOL_TEXT_SUFFIX)
#: What ``--unit U`` without ``--retriever`` measures and prints in one table beside DRAGON's row.
COMPARED: tuple[str, ...] = ("lexical" + PROTOCOL_TEXT_SUFFIX, "lexical", "dense", "hybrid" + PROTOCOL_TEXT_SUFFIX,
                             "hybrid")
#: What the paper's DRAGON row indexes (the protocol builds each database from the unit text only).
DRAGON_INDEXED_TEXT = "the unit's protocol text"
_UNIT_NOUN = {"dialog": "turn", "observation": "observation", "summary": "session summary"}


def protocol_text_config(config: RetrieverConfig) -> RetrieverConfig:
    """``config`` with every document expansion off (neighbours, dates, cited turns), all else kept."""
    return replace(config, lexical_context_turns=0, dense_context_turns=0, lexical_date=False,
                   lexical_sources=False, dense_sources=False)


def resolve(retriever: str, unit: str) -> tuple[str, RetrieverConfig]:
    """The ranker's retriever (``lexical`` / ``dense`` / ``hybrid``) and configuration of a ``--retriever`` name."""
    if retriever not in RETRIEVER_CHOICES:
        raise ValueError(f"unknown retriever {retriever!r}: use one of {', '.join(RETRIEVER_CHOICES)}")
    if unit not in TUNED:
        raise ValueError(f"unknown retrieval unit {unit!r}: use one of {', '.join(TUNED)}")
    if retriever.endswith(PROTOCOL_TEXT_SUFFIX):
        return retriever[: -len(PROTOCOL_TEXT_SUFFIX)], protocol_text_config(TUNED[unit])
    return retriever, TUNED[unit]


def _lexical_text(unit: str, config: RetrieverConfig) -> list[str]:
    extra = []
    if config.lexical_date and unit in ("dialog", "summary"):
        extra.append("its session date")
    if config.lexical_context_turns > 0 and unit == "dialog":
        extra.append(f"the {config.lexical_context_turns} turns either side in its session")
    if config.lexical_sources and unit == "observation":
        extra.append("the text of the turns it cites")
    return extra


def _dense_text(unit: str, config: RetrieverConfig) -> list[str]:
    extra = []
    if config.dense_context_turns > 0 and unit == "dialog":
        extra.append(f"the {config.dense_context_turns} turns either side in its session")
    if config.dense_sources and unit == "observation":
        extra.append("the text of the turns it cites")
    return extra


def is_expanded(unit: str, retriever: str, config: RetrieverConfig) -> bool:
    """Whether the retriever indexes more than the unit's protocol text (document expansion)."""
    lexical = _lexical_text(unit, config) if retriever != "dense" else []
    dense = _dense_text(unit, config) if retriever != "lexical" else []
    return bool(lexical or dense)


def describe_indexed_text(unit: str, retriever: str, config: RetrieverConfig) -> str:
    """One line naming what ``retriever`` (``lexical`` / ``dense`` / ``hybrid``) indexes for each unit."""
    noun = _UNIT_NOUN[unit]

    def part(name: str, extra: list[str], how: str = "") -> str:
        if not extra:
            return f"{name}: the {noun}'s protocol text{how}"
        return f"{name}: the {noun}'s protocol text{how} + " + " + ".join(extra) + " (document expansion)"

    pieces = []
    if retriever != "dense":
        pieces.append(part("BM25", _lexical_text(unit, config)))
    if retriever != "lexical":
        how = ""
        if config.dense_sentences:
            how = ", embedded per sentence" + (" and whole" if config.whole_weight > 0 else "")
        pieces.append(part("dense", _dense_text(unit, config), how))
    return "; ".join(pieces)


def measure(cases: Sequence[Case], unit: str, retriever: str, settings: Settings, *,
            embedder: Embedder | None = None) -> dict[str, Any]:
    """:func:`~agentlab.bench.retrieval.locomo.protocol_recall` for a ``--retriever`` name, naming its indexed text."""
    base, config = resolve(retriever, unit)
    result = protocol_recall(cases, unit, base, settings, config=config, embedder=embedder)
    return {**result, "retriever": retriever, "ranker": base,
            "indexed_text": describe_indexed_text(unit, base, config),
            "document_expansion": is_expanded(unit, base, config)}


def compare(cases: Sequence[Case], unit: str, settings: Settings, *, retrievers: Sequence[str] = COMPARED,
            embedder: Embedder | None = None) -> dict[str, Any]:
    """Every retriever of ``retrievers`` on ``unit`` (one embedder shared, so vectors are embedded once)."""
    if embedder is None and any(resolve(r, unit)[0] != "lexical" for r in retrievers):
        embedder = protocol_embedder(settings.get("recall", "embedder", None) or None)
    results = [measure(cases, unit, r, settings, embedder=embedder) for r in retrievers]
    first = results[0]
    return {"protocol": PROTOCOL, "unit": unit, "ks": list(PROTOCOL_KS[unit]), "questions": first["questions"],
            "without_evidence": first["without_evidence"], "published": first["published"],
            "published_indexed_text": DRAGON_INDEXED_TEXT, "results": results}
