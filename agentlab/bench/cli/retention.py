"""``python -m agentlab.bench retention <benchmark>``: LLM-free evidence retention per arm.

    python -m agentlab.bench retention <benchmark> [--arms a,b,…|all] [--limit N]
        [--context-budget N] [--set dataset.delivery=turns|tool_results] [--set dataset.chunk_turns=N]
        [--set section.field=value …] [--cache-profile openai|anthropic|none] [--price-model MODEL]
        [--db PATH] [--json]

The benchmark is any task that implements retention (:meth:`agentlab.bench.tasks.Task.retention_groups`,
or :meth:`~agentlab.bench.tasks.Task.retention` for a measure of its own; qmsum, locomo and longmemeval
do); the command asks the task and names no benchmark itself. No model is called. Each case's history is seeded as the task seeds it (``turns``) or as a scripted
reading trajectory of tool results (``tool_results``, :mod:`agentlab.bench.retention.delivery`); every request
a live agent would send is projected under each arm with ``agentlab.core.project``; and the
retention figures of :mod:`agentlab.bench.retention.questions` are printed per arm, stored per case in the
``retention`` table of ``--db`` (:mod:`agentlab.bench.store.retention`) and returned by
``analysis.retention_df()``. ``all`` runs every arm that needs no model and names the ones it
skipped, with the reason. The context budget the mechanisms see is stated in the output (default
:data:`~agentlab.bench.retention.questions.DEFAULT_CONTEXT_WINDOW`); with no model there is no window to
resolve, so the budget is the window.

``dataset.delivery`` (and QMSum's ``dataset.chunk_turns``) are the benchmark's own settings, read
by its runs too (``python -m agentlab.bench qmsum --arm compaction --set dataset.delivery=tool_results``);
every ``--set`` goes to the benchmark's settings as in a run, e.g. ``--set dataset.categories=[1,4]``
for LoCoMo or ``--set compaction.tool_result_max_tokens=512`` for the ``compaction`` arms. The arms
are the registry's (:func:`~agentlab.bench.retention.questions.retention_arms`); the peers whose source
trigger is an absolute 100,000 tokens run at 0.9 of the budget here (stated in the output).

``--cache-profile`` runs every case's requests through a provider's prompt cache
(:mod:`agentlab.model.prompt_caching`) and prints a second table per arm: raw, cached, uncached and
written tokens, cache-busting requests, and the raw and net cost at ``--price-model``'s price in
``data/prices.toml`` (default per profile, stated in the output; a model without a price gets the
token columns only). The cache columns are printed and in ``--json``, and stored per case (per
profile) in the ``prompt_cache`` table of ``--db`` (:mod:`agentlab.bench.store.cache`), beside the
``retention`` rows and in the same transaction; ``analysis.prompt_cache_df()`` returns them.
``--no-store`` writes neither table.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from agentlab.bench.cli.common import CliError, print_json
from agentlab.bench.retention.cache import ranking_differences, rankings, with_cache
from agentlab.bench.retention.delivery import Delivery
from agentlab.bench.retention.questions import (
    DEFAULT_CONTEXT_WINDOW,
    RetentionSummary,
    aggregate,
    retention_settings,
    split_arms,
)
from agentlab.bench.retention.report import (
    DEFAULT_PRICE_MODEL,
    active_profile,
    format_cache_table,
    resolve_price,
    write_ending,
    write_fraction_note,
)
from agentlab.bench.retention.summary_bounds import DEFAULT_SUMMARY_TOKENS, MIN_SUMMARY_TOKENS
from agentlab.bench.store.results import DEFAULT_DB
from agentlab.model.prompt_caching import PROFILES, get_profile
from agentlab.policies.arms import arm_names, get_arm


def retention_benchmarks() -> list[str]:
    """The registered benchmarks whose task implements retention (:meth:`~agentlab.bench.tasks.Task.has_retention`)."""
    from agentlab.bench.tasks import discover

    return sorted(name for name, cls in discover().items() if cls().has_retention())


def retention_parser(prog: str) -> argparse.ArgumentParser:
    """The ``retention`` subcommand's flags."""
    p = argparse.ArgumentParser(prog=f"{prog} retention", description="LLM-free evidence retention per arm")
    p.add_argument("benchmark", help="a benchmark whose task implements retention (e.g. qmsum, locomo, longmemeval)")
    p.add_argument("--arms", default="all", help="comma-separated arm names, or 'all' (every arm that needs no model)")
    p.add_argument("--limit", type=int, default=0, help="the first N cases of the published selection (0 = all)")
    p.add_argument("--context-budget", type=int, default=None,
                   help=f"the window the mechanisms see (default {DEFAULT_CONTEXT_WINDOW}, stated in the output)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"results DuckDB file (default {DEFAULT_DB})")
    p.add_argument("--json", action="store_true", help="print the summaries and skipped arms as JSON")
    p.add_argument("--cache-profile", default="none", choices=list(PROFILES),
                   help="model a provider's prompt cache over each case's requests (default none)")
    p.add_argument("--price-model", default=None,
                   help="the model of data/prices.toml the cost columns use (default per profile: "
                        + ", ".join(f"{k} -> {v}" for k, v in DEFAULT_PRICE_MODEL.items()) + ")")
    p.add_argument("--summary-tokens", type=int, default=None, metavar="N",
                   help="benchmarks that bound summarising arms (trajectories): the summary length their cost is "
                        f"stated at, in tokens (default {DEFAULT_SUMMARY_TOKENS}, stated in the output)")
    p.add_argument("--no-store", action="store_true", help="print only; write nothing to --db")
    return p


def _delivery(settings: Any) -> Delivery:
    """``[dataset] delivery`` (and ``chunk_turns``, for a ``[dataset]`` that reads in chunks) of the settings."""
    dataset = settings.section("dataset") if "dataset" in settings else None
    return dataset if isinstance(dataset, Delivery) else Delivery(settings.get("dataset", "delivery", "turns"))


def _pick_arms(names: str, task: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """(the arms to run, the skipped ones with their reasons): views over the arms registry for ``task``.

    A task with ``summary_bounds`` runs the summarising arms too (as bounds); any other skips them.
    """
    free, needing = split_arms(task)
    if task.summary_bounds:
        bounded = {**free, **{name: get_arm(name, task) for name in needing}}
        free, needing = {n: bounded[n] for n in _registry_order(task) if n in bounded}, {}
    if names.strip() == "all":
        return free, {name: s.reason for name, s in needing.items()}
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    if not chosen:
        raise CliError("--arms: name at least one arm, or 'all'")
    picked, skipped = {}, {}
    for name in chosen:
        if name in free:
            picked[name] = free[name]
        elif name in needing:
            skipped[name] = needing[name].reason
        else:
            raise CliError(f"--arms: unknown arm {name!r}; arms that need no model: {', '.join(free)}; "
                           f"arms that need one: {', '.join(needing)}")
    if not picked:
        raise CliError(f"--arms {names}: every arm named needs a model ({'; '.join(skipped.values())}); "
                       "this command calls none")
    return picked, skipped


def _registry_order(task: Any) -> list[str]:
    """The retention arms' names in the registry's order (the baseline first)."""
    from agentlab.bench.retention.questions import FULL_HISTORY

    return [FULL_HISTORY, *(n for n in arm_names(task) if n not in task.modes)]


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(summaries: Sequence[RetentionSummary]) -> str:
    """The printed table: one line per arm (the arm column as wide as the longest name)."""
    w = max([28, *(len(s.arm) for s in summaries)])
    lines = [f"{'arm':{w}s} {'cases':>5s} {'retained':>8s} {'rec@5':>6s} {'rec@10':>6s} {'peak':>7s} "
             f"{'max peak':>8s} {'>budget':>7s} {'total sent':>10s} {'final':>7s}"]
    for s in summaries:
        lines.append(f"{s.arm:{w}s} {s.n_scored:5d} {_fmt(s.retained):>8s} {_fmt(s.recoverable.get(5)):>6s} "
                     f"{_fmt(s.recoverable.get(10)):>6s} {s.mean_peak_prompt_tokens:7.0f} "
                     f"{s.max_peak_prompt_tokens:8d} {s.n_over_window or 0:7d} {s.mean_total_prompt_tokens:10.0f} "
                     f"{s.mean_final_prompt_tokens:7.0f}")
    return "\n".join(lines) + "\n"


def cmd_retention(args: argparse.Namespace, out: TextIO) -> int:
    """Measure, print and store the retention of every chosen arm over the benchmark's cases."""
    from agentlab.bench.cli.run import load_task_settings
    from agentlab.bench.config import code_version
    from agentlab.bench.retention.questions import RETENTION_VERSION
    from agentlab.bench.running.executor import select
    from agentlab.bench.running.loops import run_sync
    from agentlab.bench.spec import load_selection
    from agentlab.bench.store.cache import PROMPT_CACHE, store_with_cache
    from agentlab.bench.store.retention import RETENTION, retention_records
    from agentlab.bench.tasks import Unsupported, get_task

    if args.limit < 0:
        raise CliError(f"--limit must be >= 0 (0 = all cases), got {args.limit}")
    budget = DEFAULT_CONTEXT_WINDOW if args.context_budget is None else args.context_budget
    if budget < 1:
        raise CliError(f"--context-budget must be >= 1, got {budget}")
    task = get_task(args.benchmark)
    if args.summary_tokens is not None and args.summary_tokens < MIN_SUMMARY_TOKENS:
        raise CliError(f"--summary-tokens must be >= {MIN_SUMMARY_TOKENS} (the summary's marker), "
                       f"got {args.summary_tokens}")
    if args.summary_tokens is not None and not task.summary_bounds:
        raise CliError(f"--summary-tokens: {args.benchmark} skips the summarising arms (they need a model); "
                       "drop the flag, or measure a benchmark that bounds them (trajectories)")
    if not task.has_retention():
        raise CliError(f"retention {args.benchmark!r}: its task marks no gold evidence (it implements neither "
                       "Task.retention_groups nor Task.retention); benchmarks with retention: "
                       f"{', '.join(retention_benchmarks())}")
    arms, skipped = _pick_arms(args.arms, task)
    settings = load_task_settings(task, args.overrides)
    budget_source = "--context-budget" if args.context_budget is not None else "the retention default"
    own = task.retention_report(arms, skipped, settings, context_budget=budget, budget_source=budget_source,
                                limit=args.limit, as_json=args.json, out=out,
                                cache_profile=args.cache_profile, price_model=args.price_model,
                                db=None if args.no_store else args.db,
                                summary_tokens=(args.summary_tokens or DEFAULT_SUMMARY_TOKENS)
                                if task.summary_bounds else None)
    if own is not None:  # a measure with a table of its own (e.g. per step of a recorded trajectory)
        return own
    delivery = _delivery(settings)
    started = time.perf_counter()
    cases = select(load_selection(task, settings, args.limit), args.limit or None)
    profile = active_profile(args.cache_profile, args.price_model)
    price, price_model, price_line = (resolve_price(args.cache_profile, args.price_model) if profile is not None
                                      else (None, None, ""))
    try:
        rows = run_sync(task.retention(cases, list(arms.values()), retention_settings(settings),
                                       delivery=delivery.delivery, context_window=budget, cache_profile=profile))
    except Unsupported as exc:  # a task that implements retention for one delivery only
        raise CliError(str(exc)) from exc
    summaries = aggregate(rows, budget)
    if profile is not None:
        summaries = with_cache(summaries, rows, price)
    reads_in_chunks = isinstance(settings.get("dataset", "chunk_turns"), int)
    chunk = delivery.chunk_turns if (reads_in_chunks and delivery.delivery == "tool_results") else None
    stored = cached = 0
    if not args.no_store:
        version = code_version()
        stored, cached = store_with_cache(
            args.db, RETENTION, retention_records(rows, benchmark=args.benchmark, chunk_turns=chunk,
                                                  context_budget=budget, code_version=version),
            measure="retention", cases=(((args.benchmark, r.delivery, chunk, r.arm, r.case_id), r.cache) for r in rows),
            context_budget=budget, cache_profile=profile, price=price, price_model=price_model,
            retention_version=RETENTION_VERSION, code_version=version)
    wall = time.perf_counter() - started
    if args.json:
        print_json({"benchmark": args.benchmark, "delivery": delivery.delivery, "chunk_turns": chunk,
                     "context_budget": budget, "context_budget_source": budget_source, "cases": len(cases),
                     "model": None, "summaries": [s.__dict__ for s in summaries], "skipped": skipped,
                     "stored_rows": stored, "stored_cache_rows": cached, "seconds": round(wall, 3),
                     "cache_profile": profile,
                     "cache_profile_description": None if profile is None else get_profile(profile).description,
                     "price_model": price_model, "price": None if price is None else price.__dict__,
                     "price_note": price_line or None,
                     "rankings": rankings(summaries) if profile is not None else None,
                     "ranking_differs": ranking_differences(summaries) if profile is not None else None}, out)
        return 0
    read = f", {delivery.chunk_turns} turns per read" if chunk is not None else ""
    out.write(f"{args.benchmark} retention: {len(cases)} cases, {delivery.delivery} delivery{read}, context budget "
              f"{budget} tokens ({budget_source}), no model called\n")
    write_fraction_note(out, arms, settings)
    out.write(format_table(summaries))
    if profile is not None:
        out.write(f"prompt cache: {get_profile(profile).description}; means per case\n{price_line}\n")
        out.write(format_cache_table(summaries))
        differ = ranking_differences(summaries)
        basis = "net cost" if price is not None else "uncached tokens"
        out.write(f"ranked by {basis} instead of raw tokens (1 = cheapest), these arms move: "
                  f"{', '.join(differ) or 'none'}\n")
    missing = sum(r.n_missing for r in rows) // max(1, len(arms))
    if missing:
        out.write(f"({missing} gold evidence ids are not in the history; left out of every fraction)\n")
    write_ending(out, skipped, wall, args.db, {RETENTION.name: stored, PROMPT_CACHE.name: cached})
    return 0


__all__ = ["cmd_retention", "format_table", "retention_benchmarks", "retention_parser"]
