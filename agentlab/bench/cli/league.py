"""``python -m agentlab.bench league <benchmark>``: every arm against one baseline, one table.

    python -m agentlab.bench league qmsum --arms all|a,b,… [--recall] [--context-budget N]
        [--seeding forced|lived] [--limit N] [--fitting] [--model SPEC] [--judge-model SPEC] [--metric NAME]
        [--db PATH]
        [--json] [--no-progress] [--set section.field=value …]

The computation, the stored tables and the columns are in :mod:`agentlab.bench.league.play`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TextIO

import agentlab.bench.league.play as league
from agentlab.bench.cli.common import EMBEDDED_DEFAULT_LIMIT, CliError, print_json
from agentlab.bench.store.results import DEFAULT_DB


def league_parser(prog: str) -> argparse.ArgumentParser:
    """The ``league`` subcommand's flags."""
    p = argparse.ArgumentParser(prog=f"{prog} league", description="Every arm against one baseline, one table "
                                "(resumable: finished runs are reused)")
    p.add_argument("benchmark")
    p.add_argument("--arms", default="all",
                   help="comma-separated arms, or 'all': every lossy generic arm (peer policies, rolling_summary) "
                        "and the benchmark's own non-baseline modes")
    p.add_argument("--recall", action="store_true", help="add <arm>+recall for every lossy generic arm")
    p.add_argument("--limit", type=int, default=None,
                   help=f"the first N selected cases (0 = all; default all, on the embedded model its demo set of "
                        f"{EMBEDDED_DEFAULT_LIMIT})")
    p.add_argument("--fitting", action="store_true",
                   help="take the first --limit cases whose baseline prompt fits the model's window (the demo rule)")
    p.add_argument("--model", help="answer model spec; default from the environment")
    p.add_argument("--judge-model", help="judge model spec (as run's --judge-model); default [judge] model, "
                                         "else the answer model")
    p.add_argument("--context-window", type=int, default=None, metavar="N",
                   help="the answer model's window in tokens (default: what its server states)")
    p.add_argument("--context-budget", type=int, default=None, metavar="N",
                   help="the window the mechanisms see (part of every run id); at most the model's window")
    p.add_argument("--seeding", default=None, help="forced (default) or lived: the history replayed event by event")
    p.add_argument("--metric", default=None, help="the primary metric of the printed table and its Pareto flag")
    p.add_argument("--concurrency", type=int, default=None, help="cases run at once per arm")
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"results DuckDB file (default {DEFAULT_DB})")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a setting of benchmarks/<benchmark>.toml for every arm (repeatable)")
    p.add_argument("--published-settings", action="store_true",
                   help="with the embedded model, keep the published settings (skip the [smoke] settings)")
    p.add_argument("--no-evidence", action="store_true",
                   help="do not measure the LLM-free evidence kept of the arms that need no model (the 'kept' "
                        "column then shows only retention rows already stored)")
    p.add_argument("--json", action="store_true", help="print one JSON object (the header and every row)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def cmd_league(args: argparse.Namespace, out: TextIO) -> int:
    """Run (or resume) the league, print its table, store it; exit 130 when interrupted."""
    if args.seeding is not None and args.seeding not in ("forced", "lived"):
        raise CliError(f"--seeding {args.seeding!r}: use forced or lived")
    if args.fitting and args.limit == 0:
        raise CliError("--fitting takes the first --limit N fitting cases; give N >= 1")
    notes = sys.stderr if args.json else out
    try:
        result = league.run_league(
            args.benchmark, arms=args.arms, recall=args.recall, model=args.model, judge_model=args.judge_model,
            limit=args.limit,
            context_budget=args.context_budget, context_window=args.context_window, seeding=args.seeding,
            overrides=args.overrides, db=args.db, concurrency=args.concurrency, progress=not args.no_progress,
            metric=args.metric, fitting=args.fitting, published_settings=args.published_settings,
            evidence=not args.no_evidence, notes=notes)
    except (KeyboardInterrupt, asyncio.CancelledError):
        sys.stderr.write("\ninterrupted: every finished case and arm is stored. Rerun the same command to resume "
                         "(finished arms are reused, not rerun).\n")
        return 130
    if args.json:
        print_json(result.to_dict(), out)
    else:
        out.write(league.format_league(result))
    return 0


__all__ = ["cmd_league", "league_parser"]
