"""``python -m agentlab.bench retention <benchmark>``: LLM-free evidence retention per arm.

    python -m agentlab.bench retention qmsum|locomo|longmemeval [--arms a,b,…|all] [--limit N]
        [--context-budget N] [--set dataset.delivery=turns|tool_results] [--set dataset.chunk_turns=N]
        [--set section.field=value …] [--db PATH] [--json]

No model is called. Each case's history is seeded as the task seeds it (``turns``) or as a scripted
reading trajectory of tool results (``tool_results``, :mod:`agentlab.bench.delivery`); every request
a live agent would send is projected under each arm with ``agentlab.core.project``; and the
retention figures of :mod:`agentlab.bench.retention` are printed per arm, stored per case in the
``retention`` table of ``--db`` (:mod:`agentlab.bench.retention_store`) and returned by
``analysis.retention_df()``. ``all`` runs every arm that needs no model and names the ones it
skipped, with the reason. The context budget the mechanisms see is stated in the output (default
:data:`~agentlab.bench.retention.DEFAULT_CONTEXT_WINDOW`); with no model there is no window to
resolve, so the budget is the window.

``dataset.delivery`` (and QMSum's ``dataset.chunk_turns``) are the benchmark's own settings, read
by its runs too (``python -m agentlab.bench qmsum --arm compaction --set dataset.delivery=tool_results``);
every ``--set`` goes to the benchmark's settings as in a run, e.g. ``--set dataset.categories=[1,4]``
for LoCoMo or ``--set compaction.tool_result_max_tokens=512`` for the ``compaction`` arms. The arms
are the registry's (:func:`~agentlab.bench.retention.retention_arms`); the peers whose source
trigger is an absolute 100,000 tokens run at 0.9 of the budget here (stated in the output).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from agentlab.bench.cli_common import CliError, _print_json
from agentlab.bench.delivery import Delivery
from agentlab.bench.retention import (
    DEFAULT_CONTEXT_WINDOW,
    FRACTION_TRIGGERED_PEERS,
    PEER_TRIGGER_FRACTION,
    HistoryGroup,
    RetentionSummary,
    aggregate,
    locomo_groups,
    longmemeval_groups,
    measure_groups,
    model_arms,
    qmsum_groups,
    retention_arms,
    retention_settings,
)
from agentlab.bench.store import DEFAULT_DB

BENCHMARKS = ("qmsum", "locomo", "longmemeval", "trajectories")


def retention_parser(prog: str) -> argparse.ArgumentParser:
    """The ``retention`` subcommand's flags."""
    p = argparse.ArgumentParser(prog=f"{prog} retention", description="LLM-free evidence retention per arm")
    p.add_argument("benchmark", help=f"one of {', '.join(BENCHMARKS)}")
    p.add_argument("--arms", default="all", help="comma-separated arm names, or 'all' (every arm that needs no model)")
    p.add_argument("--limit", type=int, default=0, help="the first N cases of the published selection (0 = all)")
    p.add_argument("--context-budget", type=int, default=None,
                   help=f"the window the mechanisms see (default {DEFAULT_CONTEXT_WINDOW}, stated in the output)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"results DuckDB file (default {DEFAULT_DB})")
    p.add_argument("--json", action="store_true", help="print the summaries and skipped arms as JSON")
    p.add_argument("--no-store", action="store_true", help="print only; write nothing to --db")
    return p


def _delivery(settings: Any) -> Delivery:
    """``[dataset] delivery`` (and QMSum's ``chunk_turns``) of the benchmark's settings."""
    dataset = settings.section("dataset")
    return dataset if isinstance(dataset, Delivery) else Delivery(settings.get("dataset", "delivery", "turns"))


def _pick_arms(names: str, task: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """(the arms to run, the skipped ones with their reasons): views over the arms registry for ``task``."""
    free, needing = retention_arms(task), model_arms(task)
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


def _groups(benchmark: str, cases: Sequence[Any], delivery: Delivery, settings: Any) -> list[HistoryGroup]:
    """The histories of the selected cases, in ``delivery``, with only the selected questions."""
    wanted = {c.id for c in cases}
    if benchmark == "qmsum":
        from agentlab.bench.tasks.qmsum import seed_events

        return qmsum_groups([c.data for c in cases], delivery, seed=seed_events)
    if benchmark == "locomo":
        from agentlab.bench.tasks.locomo import seed_plan
        from agentlab.bench.tasks.locomo_settings import LoCoMoDataset

        captions = settings.of("dataset", LoCoMoDataset).include_image_captions
        conversations: dict[str, Any] = {}
        for case in cases:
            conversations.setdefault(case.data.conversation.sample_id, case.data.conversation)
        groups = locomo_groups(list(conversations.values()), delivery, include_captions=captions,
                               seed=lambda conv: [e for _, events in seed_plan(conv, captions) for e in events])
        return [HistoryGroup(g.session_id, g.delivery, g.events, g.tools,
                             tuple(q for q in g.questions if q.case_id in wanted)) for g in groups]
    from agentlab.bench.tasks.longmemeval import haystack_events

    return longmemeval_groups([c.data for c in cases], delivery, seed=haystack_events)


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
    from agentlab.bench.cli_run import _load
    from agentlab.bench.config import code_version
    from agentlab.bench.executor import select
    from agentlab.bench.loops import run_sync
    from agentlab.bench.retention_store import write_retention
    from agentlab.bench.spec import load_selection
    from agentlab.bench.tasks import get_task

    if args.benchmark not in BENCHMARKS:
        raise CliError(f"retention {args.benchmark!r}: retention is defined for {', '.join(BENCHMARKS)} "
                       "(their gold evidence is marked turn by turn, or, for trajectories, each step's supports)")
    if args.limit < 0:
        raise CliError(f"--limit must be >= 0 (0 = all cases), got {args.limit}")
    budget = DEFAULT_CONTEXT_WINDOW if args.context_budget is None else args.context_budget
    if budget < 1:
        raise CliError(f"--context-budget must be >= 1, got {budget}")
    task = get_task(args.benchmark)
    arms, skipped = _pick_arms(args.arms, task)
    settings = _load(task, args.overrides)
    budget_source = "--context-budget" if args.context_budget is not None else "the retention default"
    if args.benchmark == "trajectories":
        from agentlab.bench.cli_trajectories import run_trajectory_retention

        return run_trajectory_retention(arms, skipped, settings, budget, budget_source, args.limit, args.json, out)
    delivery = _delivery(settings)
    started = time.perf_counter()
    cases = select(load_selection(task, settings), args.limit or None)
    groups = _groups(args.benchmark, cases, delivery, settings)
    timed = run_sync(measure_groups(groups, list(arms.values()), context_window=budget,
                                    settings=retention_settings(settings)))
    summaries = aggregate(timed.rows, budget)
    chunk = delivery.chunk_turns if (args.benchmark == "qmsum" and delivery.delivery == "tool_results") else None
    stored = 0
    if not args.no_store:
        stored = write_retention(args.db, timed.rows, benchmark=args.benchmark, chunk_turns=chunk,
                                 context_budget=budget, code_version=code_version())
    wall = time.perf_counter() - started
    if args.json:
        _print_json({"benchmark": args.benchmark, "delivery": delivery.delivery, "chunk_turns": chunk,
                     "context_budget": budget, "context_budget_source": budget_source, "cases": len(cases),
                     "model": None, "summaries": [s.__dict__ for s in summaries], "skipped": skipped,
                     "stored_rows": stored, "seconds": round(wall, 3)}, out)
        return 0
    read = f", {delivery.chunk_turns} turns per read" if chunk is not None else ""
    out.write(f"{args.benchmark} retention: {len(cases)} cases, {delivery.delivery} delivery{read}, context budget "
              f"{budget} tokens ({budget_source}), no model called\n")
    fractioned = [n for n in FRACTION_TRIGGERED_PEERS if n not in settings and any(a.startswith(n) for a in arms)]
    if fractioned:
        out.write(f"({', '.join(fractioned)}: trigger at {PEER_TRIGGER_FRACTION} of the budget, not the source's "
                  "absolute 100,000 tokens)\n")
    out.write(format_table(summaries))
    missing = sum(r.n_missing for r in timed.rows) // max(1, len(arms))
    if missing:
        out.write(f"({missing} gold evidence ids are not in the history; left out of every fraction)\n")
    if skipped:
        out.write("skipped (they need a model; this command calls none):\n")
        w = max(len(name) for name in skipped)
        out.write("".join(f"  {name:{w}s}  {reason}\n" for name, reason in skipped.items()))
    where = f"; {stored} rows stored in {args.db} (table retention)" if stored else "; nothing stored"
    out.write(f"measured in {wall:.1f} s{where}\n")
    return 0


__all__ = ["BENCHMARKS", "cmd_retention", "format_table", "retention_parser"]
