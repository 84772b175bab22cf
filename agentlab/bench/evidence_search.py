"""Evidence@k of ``session_search``: the model-free retrieval measure of the recall benchmarks.

The search tool's own function (:func:`agentlab.recall.search.search_session`) runs with the
question as the query over a seeded session, once per depth ``k`` (a search of depth ``k`` is
what the model would get asking for ``top_k=k``); a benchmark's ``grade`` turns the ranked event
ids into (recall, hit) against its own gold evidence — QMSum's relevant transcript spans,
LongMemEval's ``has_answer`` turns. :func:`mean_rows` averages per-question results over a
selection (``--retrieval-only``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agentlab.recall.search import search_session

__all__ = ["Grade", "evidence_at_k", "mean_rows"]

#: ``grade(ranked_event_ids, k)`` → (evidence recall, evidence hit) of one search of depth ``k``.
Grade = Callable[[list[str], int], tuple[float, float]]


async def evidence_at_k(service: Any, session: Any, policy: Any, query: str, ks: Sequence[int], grade: Grade,
                        scope: str = "current_session") -> dict[str, float]:
    """``evidence_recall@k`` and ``evidence_hit@k`` for every ``k`` of ``ks``.

    ``scope=current_session`` by default: measured before the run, nothing is hidden yet.
    """
    out: dict[str, float] = {}
    for k in ks:
        result = await search_session(service, session, policy, query, scope=scope, top_k=k)
        recall, hit = grade([str(r.get("event_id")) for r in result["results"]], k)
        out[f"evidence_recall@{k}"] = recall
        out[f"evidence_hit@{k}"] = hit
    return out


def mean_rows(rows: Iterable[Mapping[str, float]], n: int) -> dict[str, float]:
    """Per key, the sum over ``rows`` divided by ``n`` (the questions asked; 0 when there were none), keys sorted.

    A question without gold evidence contributes no row but stays in ``n`` only if the caller counts it.
    """
    totals: dict[str, float] = {}
    for row in rows:
        for key, value in row.items():
            totals[key] = totals.get(key, 0.0) + value
    return {key: (value / n if n else 0.0) for key, value in sorted(totals.items())}
