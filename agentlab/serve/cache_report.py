"""The proxy's calls through the prompt-cache model, beside what the upstream reported (``report serve``).

What the store keeps decides what can be estimated. ``serve_calls`` does not keep the requests; it
keeps, per call, the prompt tokens as the client sent them and as they went upstream, and the
tokens of the leading messages each shares with the conversation's previous call
(``client_prefix_tokens``, ``upstream_prefix_tokens``; :mod:`agentlab.serve.analysis`). So the
estimate here is the ``openai`` profile of :mod:`agentlab.model.prompt_caching` applied to those
shared prefixes:

* ``est_cached_tokens`` — the upstream prefix at the profile's minimum and step (1,024 tokens,
  128-token steps). It is a lower bound of the profile's figure over the requests themselves:
  the prefix is counted in whole messages and against the previous call only;
* ``est_uncached_tokens`` — the upstream prompt less that;
* ``cache_write_tokens`` — 0: OpenAI bills no write. The ``anthropic`` profile is refused here: its
  reads need the previous call's breakpoint, which the store does not keep;
* ``cache_busts`` — calls whose cacheable upstream prefix is shorter than the client's own
  request's: the arm rewrote something the cache held (the client's own rewrites are not counted,
  since the client's previous request is not kept either);
* ``usage_cached_tokens`` / ``cache_hit_pct`` — what the upstream itself reported
  (``prompt_tokens_details.cached_tokens``, summed over the call's recall rounds), beside
  ``est_hit_pct``; ``passthrough_hit_pct`` is the reported hit rate of the passthrough arm's calls (``long_context``, formerly ``passthrough``)
  in the same database (``None`` without such calls), the cache the client would have had;
* ``net_cost_usd`` from the reported usage and ``est_net_cost_usd`` from the estimate (first round
  only; the completion tokens are the reported ones), at the price of each call's model in
  ``data/prices.toml`` (or ``price_model``). A model without a price gets no cost columns, and the
  note says so once.

Not modelled, as everywhere: eviction, lifetimes, sharing between conversations or tenants, and
provider routing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from agentlab.model.prices import Price, load_prices, no_price_note
from agentlab.model.prompt_caching import get_profile
from agentlab.serve.analysis import MECHANISM_PURPOSES, serve_calls_df

#: The profiles the stored columns can be run through.
SERVE_PROFILES = ("openai", "none")
#: The arm that forwards requests unrewritten: the baseline (stored as ``passthrough`` before the arm
#: registry was shared with the bench, so both names count).
PASSTHROUGH_ARMS = ("long_context", "passthrough")


def _profile(name: str) -> Any:
    if name not in SERVE_PROFILES:
        raise ValueError(f"cache profile {name!r} cannot be estimated from serve_calls (it keeps the prefix each "
                         "call shares with the previous one, not the requests or their breakpoints); use "
                         f"{' or '.join(SERVE_PROFILES)}")
    return get_profile(name)


def with_estimates(calls: pd.DataFrame, profile: str = "openai") -> pd.DataFrame:
    """``calls`` (:func:`~agentlab.serve.analysis.serve_calls_df`) with the per-call estimate columns."""
    p = _profile(profile)
    df = calls.copy()
    df["est_cached_tokens"] = df["upstream_prefix_tokens"].map(p.cacheable).astype("int64")
    df["est_client_cached_tokens"] = df["client_prefix_tokens"].map(p.cacheable).astype("int64")
    df["est_uncached_tokens"] = df["upstream_prompt_tokens"] - df["est_cached_tokens"]
    df["cache_write_tokens"] = 0
    df["cache_bust"] = df["est_cached_tokens"] < df["est_client_cached_tokens"]
    return df


def _cost(frame: pd.DataFrame, prices: dict[str, Price], price_model: str | None, cached: str,
          prompt: str) -> pd.Series:
    def one(row: Any) -> float | None:
        price = prices.get(price_model or row["model"])
        if price is None:
            return None
        uncached = row[prompt] - row[cached]
        return float(uncached * price.input + row[cached] * price.cached_input
                     + row["usage_completion_tokens"] * price.output) / 1_000_000

    return frame.apply(one, axis=1) if len(frame) else pd.Series(dtype="float64")


def _pct(part: pd.Series, whole: pd.Series) -> pd.Series:
    return (100.0 * part / whole.where(whole > 0)).round(1)


def cache_savings_df(source: Any = None, by: Sequence[str] = ("arm", "tenant", "conversation_id"), *, profile: str = "openai",
                     price_model: str | None = None, url: str | None = None,
                     api_key: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Per group, the answered client calls' cache figures (module docstring), and the notes to print once.

    ``source``, ``url`` and ``api_key`` as for :func:`~agentlab.serve.analysis.serve_calls_df`.
    """
    calls = serve_calls_df(source, url=url, api_key=api_key)
    ok = with_estimates(calls[~calls["purpose"].isin(MECHANISM_PURPOSES) & (calls["status"] == 200)], profile)
    for column in ("usage_prompt_tokens", "usage_cached_tokens", "usage_completion_tokens"):
        ok[column] = pd.to_numeric(ok[column]).fillna(0).astype("int64")
    prices = load_prices()
    models = [price_model] if price_model else sorted({str(m) for m in ok["model"].dropna()})
    notes = [no_price_note(m) for m in models if m not in prices]
    priced = not notes
    if priced:
        ok["net_cost_usd"] = _cost(ok, prices, price_model, "usage_cached_tokens", "usage_prompt_tokens")
        ok["est_net_cost_usd"] = _cost(ok, prices, price_model, "est_cached_tokens", "upstream_prompt_tokens")
        notes += [f"costs priced as {prices[m].describe()}" for m in models]
    keys = list(by)
    aggregations: dict[str, tuple[str, str]] = {
        "calls": ("call_id", "count"), "upstream_tokens": ("upstream_prompt_tokens", "sum"),
        "est_cached_tokens": ("est_cached_tokens", "sum"), "est_uncached_tokens": ("est_uncached_tokens", "sum"),
        "cache_write_tokens": ("cache_write_tokens", "sum"), "cache_busts": ("cache_bust", "sum"),
        "usage_prompt_tokens": ("usage_prompt_tokens", "sum"), "usage_cached_tokens": ("usage_cached_tokens", "sum"),
    }
    if priced:
        aggregations.update(net_cost_usd=("net_cost_usd", "sum"), est_net_cost_usd=("est_net_cost_usd", "sum"))
    out = ok.groupby(keys, dropna=False).agg(**aggregations)
    out["cache_busts"] = out["cache_busts"].astype("int64")
    out["cache_hit_pct"] = _pct(out["usage_cached_tokens"], out["usage_prompt_tokens"])
    out["est_hit_pct"] = _pct(out["est_cached_tokens"], out["upstream_tokens"])
    passthrough = ok[ok["arm"].isin(PASSTHROUGH_ARMS)]
    reported = passthrough["usage_prompt_tokens"].sum()
    out["passthrough_hit_pct"] = round(100.0 * passthrough["usage_cached_tokens"].sum() / reported, 1) \
        if reported else None
    columns = ["calls", "upstream_tokens", "est_cached_tokens", "est_uncached_tokens", "cache_write_tokens",
               "cache_busts", "usage_cached_tokens", "cache_hit_pct", "est_hit_pct", "passthrough_hit_pct"]
    if priced:
        columns += ["net_cost_usd", "est_net_cost_usd"]
    return out[columns].reset_index(), notes


__all__ = ["SERVE_PROFILES", "cache_savings_df", "with_estimates"]
