"""``python -m agentlab.bench retention trajectories``: the trajectory replay's printed and JSON output.

Called by :func:`agentlab.bench.cli.retention.cmd_retention` (and by the ``trajectories`` task) once it has chosen the arms, parsed the
settings and resolved the budget; this module only loads the trajectories, measures
(:func:`agentlab.bench.retention.trajectories.measure_trajectories`), stores and prints. Rows are
stored per trajectory and arm in the ``trajectory_retention`` table of ``--db``
(:mod:`agentlab.bench.store.trajectories`; the ``retention`` table's columns are the evidence
measure's), and with a cache profile their cache figures in the ``prompt_cache`` table
(:mod:`agentlab.bench.store.cache`), both in one transaction; ``--no-store`` writes neither.
``analysis.trajectory_retention_df()`` and ``analysis.prompt_cache_df("trajectories")`` read them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, TextIO

from agentlab.bench.retention.cache import cache_means, ranking_differences
from agentlab.bench.retention.parallel import measure_in_processes
from agentlab.bench.retention.questions import retention_settings
from agentlab.bench.retention.report import (
    active_profile,
    format_cache_table,
    resolve_price,
    write_ending,
    write_fraction_note,
)
from agentlab.bench.retention.summary_bounds import (
    DEFAULT_SUMMARY_TOKENS,
    format_summary_costs,
    with_summary_costs,
)
from agentlab.bench.retention.trajectories import (
    DEFAULT_K,
    TRAJECTORY_RETENTION_VERSION,
    TrajectoryRow,
    aggregate_trajectories,
    format_trajectory_table,
)
from agentlab.bench.store.cache import PROMPT_CACHE, RECORDED, store_with_cache
from agentlab.bench.store.trajectories import TABLE, TRAJECTORY_RETENTION, trajectory_records
from agentlab.bench.usage import print_json
from agentlab.model.prompt_caching import get_profile


def run_trajectory_retention(trajectories: Sequence[Any], datasets: str, arms: dict[str, Any], skipped: dict[str, str],
                             settings: Any, budget: int, budget_source: str, as_json: bool, out: TextIO, *,
                             cache_profile: str = "none", price_model: str | None = None,
                             db: Path | None = None, summary_tokens: int | None = None,
                             data_note: str | None = None) -> int:
    """Measure every arm over ``trajectories`` (the chosen ``datasets``), store the rows in ``db`` and print the table.

    With a cache profile (``--cache-profile``; ``none`` with a ``--price-model`` prices every token
    uncached) each trajectory's step requests go through :mod:`agentlab.model.prompt_caching` and a
    second table per dataset gives raw, cached, uncached and written tokens, busts and cost.
    ``db`` ``None`` (``--no-store``): nothing is stored. ``summary_tokens`` (``--summary-tokens``)
    replays the summarising arms among ``arms`` with no model, as bounds at that summary length
    (:mod:`agentlab.bench.retention.summary_bounds`); their summariser calls are in the cache table's tokens and,
    at the output price, in its costs. ``data_note`` (whose data, what the loader skipped) is printed
    under the header.
    """
    started = time.perf_counter()
    bounding = [name for name, arm in arms.items() if arm.needs_model]
    bounds_line = (f"summarising arms ({len(bounding)}) replayed with no model: supported = their summaries keep "
                   f"none of what they cover, sup hi = all of it; summ = summariser calls per trajectory, each "
                   f"sent what the arm sends and answered with {summary_tokens} tokens (--summary-tokens, default "
                   f"{DEFAULT_SUMMARY_TOKENS})") if bounding and summary_tokens is not None else ""
    profile = active_profile(cache_profile, price_model)
    price, priced_model, price_line = resolve_price(cache_profile, price_model) if profile is not None else (None, None, "")
    from agentlab.bench.retention.cache_check import replay_prefixes

    hidden, estimated = replay_prefixes(trajectories) if profile is not None else ({}, None)
    cache_model = None if estimated is None else (
        f"for the {len(hidden)} recordings with the provider's usage, the cache model the cache check validated "
        f"('warm + clock'): each session's unlogged system prompt and tools in front of every request "
        f"({_median([h.tokens for h in hidden.values()])} agentlab tokens per session, median; estimated from the "
        f"bill as recorded prompt - {estimated.ratio:.3f} x ours, divided by that tokenizer ratio), the part the "
        f"first call read already cached (median {_median([h.warm for h in hidden.values()])}), each request sent "
        f"at its recorded time (entries expire after the profile's lifetime); token figures are agentlab's "
        f"(the provider counts {estimated.ratio:.3f} x as many)")
    timed = measure_in_processes(trajectories, list(arms.values()), context_window=budget,
                                 settings=retention_settings(settings), cache_profile=profile,
                                 summary_tokens=summary_tokens, hidden=hidden or None)
    summaries = aggregate_trajectories(timed.rows, budget)
    if profile is not None:
        def group(s: Any) -> list[TrajectoryRow]:
            return [r for r in timed.rows if r.dataset == s.dataset and r.arm == s.arm]

        summaries = [replace(s, extra=with_summary_costs({**s.extra, **cache_means(group(s), price)}, group(s), price))
                     for s in summaries]
    datasets_seen = list(dict.fromkeys(s.dataset for s in summaries))
    moved = {d: ranking_differences([s for s in summaries if s.dataset == d]) for d in datasets_seen} \
        if profile is not None else None
    stored, cached = (0, 0) if db is None else _store(db, timed.rows, budget, profile, price, priced_model)
    wall = time.perf_counter() - started
    if as_json:
        print_json({"benchmark": "trajectories", "datasets": datasets, "context_budget": budget,
                     "context_budget_source": budget_source, "cases": len(trajectories), "data_note": data_note, "model": None,
                     "recall_top_k": DEFAULT_K, "summaries": [asdict(s) for s in summaries], "skipped": skipped,
                     "summary_tokens": summary_tokens, "summary_tokens_note": bounds_line or None,
                     "cache_profile": profile,
                     "cache_profile_description": None if profile is None else get_profile(profile).description,
                     "cache_model": cache_model, "price_model": priced_model, "price": None if price is None else price.__dict__,
                     "price_note": price_line or None, "ranking_differs": moved,
                     "stored_rows": stored, "stored_cache_rows": cached, "seconds": round(wall, 3)}, out)
        return 0
    out.write(f"trajectories retention: {len(trajectories)} recorded trajectories ({datasets}), context budget {budget} "
              f"tokens ({budget_source}), no model called\n")
    if data_note:
        out.write(f"data: {data_note}\n")
    write_fraction_note(out, arms, settings)
    if bounds_line:
        out.write(bounds_line + "\n")
    out.write(format_trajectory_table(summaries))
    out.write(f"(supported: share of step supports visible in the step's request, 95% bootstrap interval over "
              f"trajectories; +recall: with session_search top {DEFAULT_K} over what was hidden, for arms that have it; "
              f"artifact_load of a handle's artifact, for artifact_offload)\n")
    if profile is not None and moved is not None:
        out.write(f"prompt cache: {get_profile(profile).description}; means per trajectory over its step requests\n"
                  f"{price_line}\n")
        if cache_model:
            out.write(f"cache model: {cache_model}\n")
        if bounds_line:
            out.write("(summarising arms: their summariser requests are in the token columns, in the order sent; "
                      "with a price, each summary's output tokens are in raw $ and net $ at the output price)\n")
        basis = "net cost" if price is not None else "uncached tokens"
        for dataset in datasets_seen:
            out.write(f"{dataset}:\n")
            out.write(format_cache_table([s for s in summaries if s.dataset == dataset]))
            if bounds_line:
                out.write(format_summary_costs([s for s in summaries if s.dataset == dataset]))
            out.write(f"ranked by {basis} instead of raw tokens (1 = cheapest), these arms move: "
                      f"{', '.join(moved[dataset]) or 'none'}\n")
    write_ending(out, skipped, wall, db, {TABLE: stored, PROMPT_CACHE.name: cached})
    return 0


def _median(values: Sequence[int]) -> int:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0


def _store(db: Path, rows: Sequence[TrajectoryRow], budget: int, profile: str | None, price: Any,
           price_model: str | None) -> tuple[int, int]:
    """Store the rows (and, with a cache profile, their cache figures) in one transaction: (rows, cache rows)."""
    from agentlab.bench.config import code_version

    version = code_version()
    return store_with_cache(db, TRAJECTORY_RETENTION, trajectory_records(rows, context_budget=budget,
                                                                         code_version=version),
                            measure="trajectories",
                            cases=(((r.dataset, RECORDED, None, r.arm, r.traj_id), r.cache) for r in rows),
                            context_budget=budget, cache_profile=profile, price=price, price_model=price_model,
                            retention_version=TRAJECTORY_RETENTION_VERSION, code_version=version)


__all__ = ["run_trajectory_retention"]
