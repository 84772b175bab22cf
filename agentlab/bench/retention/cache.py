"""Prompt caching in the retention benchmark: what each arm's requests would cost with a provider's cache.

:func:`agentlab.bench.retention.questions.measure_retention` projects every request a case sends (the reading
requests of tool delivery, then the answer request). With a cache profile it hands them, in order,
to :func:`reading_replay` and :func:`case_cache` here, which run them through
:mod:`agentlab.model.prompt_caching` and give each row its :class:`~agentlab.model.prompt_caching.CacheTotals`.
The reading requests are shared by a history's questions, so their replay is made once and
forked per question. :func:`with_cache` then adds the per-arm means (and, with a price from
``data/prices.toml``, the net cost) to the summaries, in ``RetentionSummary.extra``.

A case is one request sequence with its own cache: nothing is shared between cases, arms or
histories (per-organisation sharing is not modelled, and neither are eviction or lifetimes).
Any other request sequence (a recorded agent trajectory, say) goes through
:func:`agentlab.model.prompt_caching.cache_sequence` directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from agentlab.model.base import ModelRequest
from agentlab.model.prices import Price, net_cost, raw_cost
from agentlab.model.prompt_caching import CacheReplay, CacheTotals, get_profile, request_tokens, totals

#: The columns :func:`with_cache` adds to a summary's ``extra`` (means per case, except ``cache_profile``).
CACHE_COLUMNS: tuple[str, ...] = ("raw_tokens", "cached_tokens", "uncached_tokens", "cache_write_tokens",
                                  "cache_busts", "cache_hit_rate", "raw_cost_usd", "net_cost_usd")


def reading_replay(profile: str, requests: Sequence[ModelRequest]) -> CacheReplay:
    """A cache of ``profile`` after the reading requests of one history, in the order they were sent."""
    cache = CacheReplay(get_profile(profile))
    for request in requests:
        cache.add(request_tokens(request.messages, request.tools))
    return cache


def case_cache(reading: CacheReplay, final: ModelRequest) -> CacheTotals:
    """The cache figures of one case: its reading requests, then its answer request ``final``."""
    cache = reading.fork()
    cache.add(request_tokens(final.messages, final.tools))
    return totals(cache.results)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def cache_means(rows: Sequence[Any], price: Price | None) -> dict[str, Any]:
    """Means per case of the rows' cache figures, and their cost at ``price`` (``None``: no cost columns)."""
    caches: list[CacheTotals] = [r.cache for r in rows if r.cache is not None]
    if not caches:
        return {}
    out: dict[str, Any] = {
        "raw_tokens": _mean([c.prompt_tokens for c in caches]),
        "cached_tokens": _mean([c.cached_tokens for c in caches]),
        "uncached_tokens": _mean([c.uncached_tokens for c in caches]),
        "cache_write_tokens": _mean([c.cache_write_tokens for c in caches]),
        "cache_busts": _mean([c.n_busts for c in caches]),
        "cache_hit_rate": sum(c.cached_tokens for c in caches) / max(1, sum(c.prompt_tokens for c in caches)),
    }
    if price is not None:
        out["raw_cost_usd"] = _mean([raw_cost(c.prompt_tokens, price) for c in caches])
        out["net_cost_usd"] = _mean([net_cost(c, price) for c in caches])
    return out


def with_cache(summaries: Sequence[Any], rows: Sequence[Any], price: Price | None) -> list[Any]:
    """``summaries`` (one per arm and delivery) with :func:`cache_means` of their rows in ``extra``."""
    out = []
    for s in summaries:
        group = [r for r in rows if r.arm == s.arm and r.delivery == s.delivery]
        out.append(dataclasses.replace(s, extra={**s.extra, **cache_means(group, price)}))
    return out


def rankings(summaries: Sequence[Any]) -> dict[str, tuple[int, int]]:
    """Each arm's (rank by mean raw tokens, rank by mean net cost), 1 = cheapest.

    The net cost when every summary has one, else the uncached tokens; ties keep table order.
    """
    key = "net_cost_usd" if all("net_cost_usd" in s.extra for s in summaries) else "uncached_tokens"
    usable = [s for s in summaries if key in s.extra]
    by_raw = [s.arm for s in sorted(usable, key=lambda s: s.extra["raw_tokens"])]
    by_net = [s.arm for s in sorted(usable, key=lambda s: s.extra[key])]
    return {arm: (by_raw.index(arm) + 1, by_net.index(arm) + 1) for arm in by_raw}


def ranking_differences(summaries: Sequence[Any]) -> list[str]:
    """The arms whose rank by net cost differs from their rank by raw tokens, as ``arm (raw rank -> net rank)``."""
    return [f"{arm} ({raw} -> {net})" for arm, (raw, net) in rankings(summaries).items() if raw != net]


__all__ = ["CACHE_COLUMNS", "cache_means", "case_cache", "ranking_differences", "rankings", "reading_replay", "with_cache"]
