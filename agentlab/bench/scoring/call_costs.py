"""What a run's stored model calls cost with the provider's prompt cache: the ``report`` and ``league`` columns.

What the results file keeps decides what can be shown. Each row of ``calls`` holds the provider's
``usage``: prompt, completion and cached tokens (``prompt_tokens_details.cached_tokens``; 0 when the
server reported none, which cannot be told apart from a reported 0). It does not keep the
requests, and a call row names no call-cache key, so the prompt-cache *model*
(:mod:`agentlab.model.prompt_caching`) cannot be run over a stored run: these columns are the
provider-reported figures only, and cache busts are not available here (the retention benchmark,
``--cache-profile``, estimates them without a model). Over a run's ``answer`` calls without error:

* ``prompt_tokens`` / ``cached_tokens`` / ``uncached_tokens`` (prompt − cached), means per case;
* ``cache_hit_pct``: cached over prompt tokens;
* ``net_cost_usd`` / ``raw_cost_usd``: mean per case, at the price in ``data/prices.toml`` of the
  run's model (or ``price_model``): uncached input, cached input and output tokens, and the same with
  every prompt token uncached. A model without a price gets no cost (``None``) and one note.

A call answered from agentlab's own call cache keeps the usage of the call that made it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentlab.model.prices import load_prices, no_price_note

_SQL = """
SELECT k.run_id, any_value(k.model) AS model, count(DISTINCT k.case_id) AS n_cases,
    COALESCE(SUM(k.prompt_tokens), 0), COALESCE(SUM(k.cached_tokens), 0), COALESCE(SUM(k.completion_tokens), 0)
FROM calls k
WHERE k.purpose = 'answer' AND k.error IS NULL AND k.run_id IN ({marks})
GROUP BY k.run_id
"""
#: The columns :func:`run_costs` gives per run.
COST_COLUMNS = ("cached_tokens", "uncached_tokens", "cache_hit_pct", "raw_cost_usd", "net_cost_usd")


def run_costs(query: Callable[[str, list[Any]], list[tuple[Any, ...]]], run_ids: Sequence[str], *,
              price_model: str | None = None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Per run id: the module docstring's columns; and the notes to print once (models without a price).

    ``query`` runs SQL on the results file (``ResultStore.query``).
    """
    if not run_ids:
        return {}, []
    prices = load_prices()
    out: dict[str, dict[str, Any]] = {}
    missing: set[str] = set()
    for run_id, model, n_cases, prompt, cached, completion in query(
            _SQL.format(marks=", ".join("?" for _ in run_ids)), list(run_ids)):
        name = price_model or str(model)
        price = prices.get(name)
        if price is None:
            missing.add(name)
        n = max(1, int(n_cases))
        prompt, cached, completion = int(prompt), int(cached), int(completion)
        out[str(run_id)] = {
            "model": model, "prompt_tokens": prompt / n, "cached_tokens": cached / n,
            "uncached_tokens": (prompt - cached) / n,
            "cache_hit_pct": round(100.0 * cached / prompt, 1) if prompt else None,
            "raw_cost_usd": None if price is None else (prompt * price.input + completion * price.output) / n / 1e6,
            "net_cost_usd": None if price is None else ((prompt - cached) * price.input + cached * price.cached_input
                                                         + completion * price.output) / n / 1e6,
        }
    return out, [no_price_note(m) for m in sorted(missing)]


def with_run_costs(frame: Any, query: Callable[[str, list[Any]], list[tuple[Any, ...]]], *,
                   price_model: str | None = None) -> tuple[Any, list[str]]:
    """``frame`` (with a ``run_id`` column: runs, league rows) with :data:`COST_COLUMNS` added, and the notes."""
    costs, notes = run_costs(query, [str(r) for r in frame["run_id"].dropna().unique()], price_model=price_model)
    out = frame.copy()
    for column in COST_COLUMNS:
        out[column] = [costs.get(str(r), {}).get(column) for r in out["run_id"]]
    return out, notes


def add_to_rows(query: Callable[[str, list[Any]], list[tuple[Any, ...]]], rows: list[dict[str, Any]], *,
                price_model: str | None = None) -> list[str]:
    """Add :data:`COST_COLUMNS` to league rows (dicts with a ``run_id``), in place; returns the notes."""
    costs, notes = run_costs(query, sorted({str(r["run_id"]) for r in rows if r.get("run_id")}),
                             price_model=price_model)
    for row in rows:
        row.update({column: costs.get(str(row.get("run_id")), {}).get(column) for column in COST_COLUMNS})
    return notes


def league_lines(rows: Sequence[dict[str, Any]], metric: str | None, model: str) -> list[str]:
    """The league's printed prompt-cache block: one line per arm (the rows of ``metric``)."""
    shown = [r for r in rows if r.get("metric") == metric and "cached_tokens" in r]
    if not shown:
        return []
    wide = max(len(r["arm"]) for r in shown)
    priced = all(r.get("net_cost_usd") is not None for r in shown)
    lines = ["", "prompt cache (answer calls, provider-reported cached tokens, mean per case"
             + ("; USD at data/prices.toml)" if priced else ")")]
    for r in shown:
        hit = "-" if r["cache_hit_pct"] is None else f"{r['cache_hit_pct']:.1f}%"
        cost = f"  raw ${r['raw_cost_usd']:.5f}  net ${r['net_cost_usd']:.5f}" if priced else ""
        lines.append(f"  {r['arm']:{wide}s}  cached {r['cached_tokens'] or 0:9.0f}  uncached "
                     f"{r['uncached_tokens'] or 0:9.0f}  hit {hit:>6s}{cost}")
    if not priced:
        lines.append(f"  {no_price_note(model.split(':', 1)[-1].split('@', 1)[0])}")
    return lines


__all__ = ["COST_COLUMNS", "add_to_rows", "league_lines", "run_costs", "with_run_costs"]
