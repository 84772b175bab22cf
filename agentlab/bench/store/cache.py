"""The ``prompt_cache`` table: the prompt-cache figures of every retention row measured with ``--cache-profile``.

``python -m agentlab.bench retention <benchmark> --cache-profile openai|anthropic`` (and ``none``
with a ``--price-model``) runs each case's requests through a provider's prompt cache
(:mod:`agentlab.model.prompt_caching`); ``retention trajectories`` does the same with each
trajectory's step requests. Both write one row here per measured row (:func:`cache_records`;
:func:`store_with_cache` stores them in the transaction that stores the measure's own rows); ``agentlab.bench.analysis.prompt_cache_df()`` reads them back.

A table of its own, not columns of ``retention``: its key adds the cache profile, so one case
measured under two profiles keeps both rows, and a results file written before this table needs
no change to the ``retention`` table's primary key. The key:

* ``measure`` — ``retention`` (a row of the ``retention`` table) or ``trajectories`` (a row of
  ``trajectory_retention``);
* ``benchmark`` — the benchmark (``retention``) or the trajectory dataset (``trajectories``:
  ``tau_bench``, ``swe_agent``), the first key column of the measure's table;
* ``delivery`` — ``turns`` or ``tool_results``, ``recorded`` for a trajectory (its own steps);
* ``chunk_turns`` — QMSum's turns per read in tool delivery, -1 where it does not apply (as in
  ``retention``; read back as missing);
* ``context_budget``, ``arm``, ``case_id`` (the trajectory id for ``trajectories``) and
  ``cache_profile``.

The figures are :class:`~agentlab.model.prompt_caching.CacheTotals`' over the row's requests, in
order: ``n_requests``, ``prompt_tokens`` (raw), ``cached_tokens``, ``cache_write_tokens``,
``uncached_tokens``, ``n_busts`` and ``hit_rate`` (cached over raw; missing for no prompt).
``price_model`` is the model named for the prices (as ``--json`` names it, kept even when it has
no price), ``raw_cost_usd`` (every token billed as uncached input) and ``net_cost_usd`` (with the
cache) are :func:`agentlab.model.prices.raw_cost` and :func:`~agentlab.model.prices.net_cost` at
that price — their means per arm are the printed cost columns — and missing when no price was
resolved. Measuring again at another price model replaces the row (the price is not in the key).
Provenance: the measure's definitions version, the code version and ``measured_at``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentlab.bench.store.retention import (
    KeyedTable,
    chunk_turns_missing,
    read_rows,
    replace_rows,
    stored_chunk,
)
from agentlab.model.prices import Price, net_cost, raw_cost
from agentlab.model.prompt_caching import CacheTotals

TABLE = "prompt_cache"
#: The ``delivery`` of a trajectory's rows: the recording's own steps.
RECORDED = "recorded"

#: Columns in table order: the key, the figures (``CacheTotals`` and the costs), then provenance.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("measure", "VARCHAR"), ("benchmark", "VARCHAR"), ("delivery", "VARCHAR"), ("chunk_turns", "INTEGER"),
    ("context_budget", "INTEGER"), ("arm", "VARCHAR"), ("case_id", "VARCHAR"), ("cache_profile", "VARCHAR"),
    ("n_requests", "INTEGER"), ("prompt_tokens", "INTEGER"), ("cached_tokens", "INTEGER"),
    ("cache_write_tokens", "INTEGER"), ("uncached_tokens", "INTEGER"), ("n_busts", "INTEGER"),
    ("hit_rate", "DOUBLE"), ("price_model", "VARCHAR"), ("raw_cost_usd", "DOUBLE"), ("net_cost_usd", "DOUBLE"),
    ("retention_version", "VARCHAR"), ("code_version", "VARCHAR"), ("measured_at", "DOUBLE"),
)
KEY = ("measure", "benchmark", "delivery", "chunk_turns", "context_budget", "arm", "case_id", "cache_profile")
PROMPT_CACHE = KeyedTable(TABLE, COLUMNS, KEY)

#: One measured row's key within a command: (benchmark or dataset, delivery, chunk_turns or ``None``, arm, case id).
CaseKey = tuple[str, str, int | None, str, str]


def cache_records(measure: str, cases: Iterable[tuple[CaseKey, CacheTotals | None]], *, context_budget: int,
                  cache_profile: str, price: Price | None, price_model: str | None, retention_version: str,
                  code_version: str) -> list[tuple[Any, ...]]:
    """The records of ``cases`` (each key with its cache figures; a case without figures is left out)."""
    now = time.time()
    records = []
    for (benchmark, delivery, chunk_turns, arm, case_id), c in cases:
        if c is None:
            continue
        records.append((measure, benchmark, delivery, stored_chunk(chunk_turns), context_budget,
                        arm, case_id, cache_profile, c.n_requests, c.prompt_tokens, c.cached_tokens,
                        c.cache_write_tokens, c.uncached_tokens, c.n_busts, c.hit_rate, price_model,
                        None if price is None else raw_cost(c.prompt_tokens, price),
                        None if price is None else net_cost(c, price), retention_version, code_version, now))
    return records


def store_with_cache(db: str | Path, table: KeyedTable, records: Sequence[tuple[Any, ...]], *, measure: str,
                     cases: Iterable[tuple[CaseKey, CacheTotals | None]], context_budget: int,
                     cache_profile: str | None, price: Price | None, price_model: str | None,
                     retention_version: str, code_version: str) -> tuple[int, int]:
    """Store a measure's own ``records`` in ``table`` and, with a ``cache_profile``, its ``cases``' cache rows here.

    One transaction (:func:`~agentlab.bench.store.retention.replace_rows`); returns (rows stored in
    ``table``, rows stored here). ``cache_profile`` ``None``: no cache rows.
    """
    batches = [(table, records)]
    if cache_profile is not None:
        batches.append((PROMPT_CACHE, cache_records(
            measure, cases, context_budget=context_budget, cache_profile=cache_profile, price=price,
            price_model=price_model, retention_version=retention_version, code_version=code_version)))
    stored, *cached = replace_rows(db, batches)
    return stored, sum(cached)


def read_prompt_cache(con: Any, *, measure: str | None = None, arm: str | None = None) -> Any:
    """The stored rows as a DataFrame, in key order (empty, with the columns, when nothing was stored yet).

    ``chunk_turns`` reads as missing where it does not apply (stored as -1).
    """
    return chunk_turns_missing(read_rows(con, PROMPT_CACHE, (("measure", measure), ("arm", arm))))


__all__ = ["COLUMNS", "KEY", "PROMPT_CACHE", "RECORDED", "TABLE", "CaseKey", "cache_records", "read_prompt_cache",
           "store_with_cache"]
