"""Evidence recall@k and hit@k: how much of a question's gold evidence a retriever's ranking holds.

The one loop every model-free retrieval measure runs (LongMemEval's ``session_search``, LoCoMo's
preload window): for each depth ``k``, the per-k metrics of :mod:`agentlab.bench.metrics`
(:func:`~agentlab.bench.metrics.evidence_recall_at_k`, :func:`~agentlab.bench.metrics.evidence_hit_at_k`)
of one question, then their mean over questions. A question without gold evidence has no score
(``None``) and is left out of the mean, which the caller counts as ``with_evidence``.

A retriever either ranks once (the ranking is cut at each ``k``) or is asked for ``k`` results
each time (``session_search``'s ``top_k`` changes what its fallback search returns, so the top 5
need not be the first 5 of the top 10): :func:`at_k` takes one ranking or a ranking per ``k``, and
:func:`session_search_rankings` asks the search tool once per ``k``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentlab.bench.metrics import evidence_hit_at_k, evidence_recall_at_k, mean

if TYPE_CHECKING:
    from agentlab.recall.policy import RecallPolicy

__all__ = ["at_k", "metric_names", "mean_at_k", "session_search_rankings"]


def metric_names(ks: Sequence[int], *, by_metric: bool = False) -> list[str]:
    """``recall@k`` and ``hit@k`` names for ``ks``: per ``k`` (recall then hit), or every recall then every hit."""
    if by_metric:
        return [f"recall@{k}" for k in ks] + [f"hit@{k}" for k in ks]
    return [name for k in ks for name in (f"recall@{k}", f"hit@{k}")]


def at_k(retrieved: Sequence[str] | Mapping[int, Sequence[str]], evidence: Iterable[str],
         ks: Sequence[int]) -> dict[str, float] | None:
    """``{"recall@k": …, "hit@k": …}`` of one question for each ``k`` (per ``k``, recall then hit).

    ``retrieved``: retrieved ids best first, cut at each ``k``; or a ranking per ``k``. ``None``
    when the question has no gold evidence.
    """
    gold = list(evidence)
    if not gold:
        return None
    out: dict[str, float] = {}
    for k in ks:
        ranked = retrieved[k] if isinstance(retrieved, Mapping) else retrieved
        recall, hit = evidence_recall_at_k(ranked, gold, k), evidence_hit_at_k(ranked, gold, k)
        assert recall is not None and hit is not None  # gold is not empty
        out[f"recall@{k}"], out[f"hit@{k}"] = recall, hit
    return out


def mean_at_k(rows: Iterable[Mapping[str, float] | None], ks: Sequence[int], *,
              by_metric: bool = False) -> dict[str, float | None]:
    """The mean of each :func:`metric_names` metric over the questions that have evidence (``None``: none has)."""
    scored = [r for r in rows if r is not None]
    return {name: mean(r[name] for r in scored) for name in metric_names(ks, by_metric=by_metric)}


async def session_search_rankings(service: Any, session: Any, policy: RecallPolicy, query: str, ks: Sequence[int],
                                  *, scope: str = "current_session") -> dict[int, list[str]]:
    """The event ids ``session_search`` returns for ``query`` with ``top_k = k``, for each ``k`` (no model, no run).

    ``scope="current_session"`` searches the whole seeded session; before a run nothing is hidden,
    and once a summary covers everything ``current_hidden`` searches the same events.
    """
    from agentlab.recall.search import search_session

    rankings: dict[int, list[str]] = {}
    for k in ks:
        result = await search_session(service, session, policy, query, scope=scope, top_k=k)
        rankings[k] = [str(r.get("event_id")) for r in result["results"]]
    return rankings
