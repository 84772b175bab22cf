"""``python -m agentlab.bench``: run a benchmark mode, print a report, list benchmarks.

    python -m agentlab.bench <benchmark> [--mode MODE] [--limit N] [--model SPEC] [--judge-model SPEC]
                                         [--context-window N] [--context-budget N] [--concurrency K] [--db PATH]
                                         [--set section.field=value ...]
                                         [--dry-run] [--retrieval-only] [--json] [--no-progress]
                                         [--executor in-process|ray] [--ray-address ADDR] [--workers N]
    python -m agentlab.bench sweep <benchmark> --mode M --grid SECTION.FIELD=V1,V2 [--grid ...] [run flags]
    python -m agentlab.bench report <benchmark> [--db PATH] [--json] [--run ID] [--variant NAME]
                                    [--between VARIANT_A VARIANT_B]
    python -m agentlab.bench report serve [--db PATH | --url URL [--api-key K]] [--by COLUMNS]
                                          [--cache-profile openai|none] [--price-model M]
    python -m agentlab.bench retention <benchmark> [--arms a,b|all] [--limit N] [--context-budget N]
                                       [--set dataset.delivery=turns|tool_results] [--db PATH] [--json]
    python -m agentlab.bench league <benchmark> [--arms a,b|all] [--recall] [--context-budget N]
                                    [--seeding forced|lived] [--limit N] [--fitting] [--model SPEC]
                                    [--metric NAME] [--db PATH] [--json] [--no-progress] [--set ...]
    python -m agentlab.bench cache-check [--sessions-dir DIR] [--limit N] [--strict] [--price-model M] [--json]
    python -m agentlab.bench list [--json]
    python -m agentlab.bench fixture longmemeval PATH [--questions N] [--sessions N] [--turns N]

``league`` runs (or reuses) the baseline once and every arm on the same cases with one model and
call cache, then prints one table: savings, peak prompt tokens, summary cost, quality delta with
paired 95 % intervals, recovery of ``+recall`` arms, Pareto flag; stored for ``analysis.league_df()``.

``cache-check`` compares the prompt-cache model with the usage Anthropic billed in recorded Claude
Code sessions, call by call. ``--sessions-dir DIR`` (run, retention, league) replays a folder of your
own Claude Code logs as the ``trajectories`` benchmark's ``claude_code`` dataset.

Published settings come from ``benchmarks/<benchmark>.toml``; flags and ``--set`` override them.
With the embedded model (the offline smoke-test model) and no ``--limit``, only the first 5 cases
run, and everything it produces is labelled a smoke test. ``--limit 0`` runs all cases.
"""

# The docstring above is the --help text. The commands live beside this module: run (a run, its
# baselines and the settings loading), report, sweep, retention, league, cache_check, and what they
# share in common. This module dispatches the command line and turns a user error into one
# `error: ...` line with exit status 2.

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from agentlab.bench.cli.common import (
    EMBEDDED_DEFAULT_LIMIT,
    EXECUTORS,
    SMOKE_LABEL,
    CliError,
    add_executor_args,
    fixture_parser,
    list_parser,
    print_json,
    report_parser,
    run_parser,
    sweep_parser,
)
from agentlab.bench.cli.report import COMPARISON_SECTIONS, REPORT_RULES, cmd_report
from agentlab.bench.cli.run import (
    cmd_run,
    executor_from_args,
    run_with_baselines,
)
from agentlab.bench.cli.sweep import cmd_sweep
from agentlab.bench.config import SettingsError, settings_path
from agentlab.bench.datasets.base import DatasetError
from agentlab.bench.running.distributed import ExecutorError
from agentlab.bench.spec import comparison_modes
from agentlab.bench.tasks import UnknownBenchmark, Unsupported, discover
from agentlab.bench.usage import UsageError
from agentlab.duckdb_files import DatabaseFileError
from agentlab.extensions import ExtensionError


def cmd_fixture(args: argparse.Namespace, out: TextIO) -> int:
    """``fixture``: write generated LongMemEval-shaped data for runs where the real file is unavailable."""
    from agentlab.bench.datasets.longmemeval import QUESTION_TYPES, write_longmemeval_fixture

    for flag, value in (("--questions", args.questions), ("--sessions", args.sessions), ("--turns", args.turns)):
        if value < 1:
            raise CliError(f"{flag} must be >= 1, got {value}")
    path = write_longmemeval_fixture(args.path, args.questions, sessions_per_question=args.sessions,
                                     turns_per_session=args.turns, question_types=args.types or QUESTION_TYPES)
    out.write(f"wrote {args.questions} GENERATED questions (not the LongMemEval data) to {path}\n"
              f"run on it with: python -m agentlab.bench longmemeval --set dataset.path={path}\n")
    return 0


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    """``list``: the registered benchmarks with their modes (and arms), version and settings file."""
    tasks = discover()
    rows: list[dict[str, Any]] = []
    for name in sorted(tasks):
        cls = tasks[name]
        path = settings_path(name)
        rows.append({"benchmark": name, "modes": list(cls.modes), "default_mode": cls.default_mode,
                     "version": cls.version, "settings": str(path) if path.is_file() else None,
                     "description": cls.description, "arms": cls().arm_names()})
    if args.json:
        print_json({"benchmarks": rows}, out)
        return 0
    if not rows:
        out.write("no benchmarks registered\n")
    for r in rows:
        modes = ", ".join(m + (" (default)" if m == r["default_mode"] else "") for m in r["modes"])
        out.write(f"{r['benchmark']:<14} modes: {modes}\n")
        if r["description"]:
            out.write(f"{'':<14} {r['description']}\n")
    if rows:  # the generic arms are the same on every benchmark (a task may leave some out)
        generic = [a for a in rows[0]["arms"] if a not in tasks[rows[0]["benchmark"]].modes]
        out.write(f"arms on every benchmark besides its modes (--arm NAME): {', '.join(generic)}\n")
    return 0


# ------------------------------------------------------------------------------------- main


def _sessions_dir_as_setting(argv: list[str]) -> list[str]:
    """``--sessions-dir DIR`` (a folder of the user's own Claude Code logs) as ``--set dataset.sessions_dir=DIR``."""
    out: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--sessions-dir":
            folder = next(it, None)
            if folder is None:
                raise SystemExit("error: --sessions-dir needs a folder of Claude Code logs (e.g. ~/.claude/projects/<p>)")
            out += ["--set", f"dataset.sessions_dir={folder}"]
        elif arg.startswith("--sessions-dir="):
            out += ["--set", f"dataset.sessions_dir={arg.split('=', 1)[1]}"]
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run one command line; returns the exit status (2 for a user error, printed as one line).

    ``argv`` defaults to ``sys.argv[1:]`` and ``out`` to stdout, so tests and notebooks call it
    in-process and capture what it prints.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["cache-check"]:
        argv = _sessions_dir_as_setting(argv)
    out = out or sys.stdout
    prog = "python -m agentlab.bench"
    if not argv or argv[0] in {"-h", "--help"}:
        out.write(__doc__ or "")
        return 0 if argv else 2
    try:
        if argv[0] == "list":
            return cmd_list(list_parser(prog).parse_args(argv[1:]), out)
        if argv[:2] == ["report", "serve"]:  # the proxy's savings: its database or a running server
            from agentlab.serve.__main__ import report_main

            return report_main(argv[2:], out, prog=f"{prog} report serve")
        if argv[0] == "report":
            return cmd_report(report_parser(prog).parse_args(argv[1:]), out)
        if argv[0] == "sweep":
            sweep_args, run_flags = sweep_parser(prog).parse_known_args(argv[1:])
            return cmd_sweep(sweep_args, run_flags, out)
        if argv[0] == "retention":
            from agentlab.bench.cli.retention import cmd_retention, retention_parser

            return cmd_retention(retention_parser(prog).parse_args(argv[1:]), out)
        if argv[0] == "league":
            from agentlab.bench.cli.league import cmd_league, league_parser

            return cmd_league(league_parser(prog).parse_args(argv[1:]), out)
        if argv[0] == "cache-check":
            from agentlab.bench.cli.cache_check import cache_check_parser, cmd_cache_check

            return cmd_cache_check(cache_check_parser(prog).parse_args(argv[1:]), out)
        if argv[0] == "fixture":
            return cmd_fixture(fixture_parser(prog).parse_args(argv[1:]), out)
        return cmd_run(run_parser(prog).parse_args(argv), out)
    except (CliError, UsageError, SettingsError, UnknownBenchmark, DatasetError, FileNotFoundError, DatabaseFileError,
            ExecutorError, ExtensionError, Unsupported) as exc:
        message = exc.args[0] if isinstance(exc, UnknownBenchmark | FileNotFoundError) and exc.args else str(exc)
        sys.stderr.write(f"error: {message}\n")
        return 2


__all__ = [
    "COMPARISON_SECTIONS",
    "EMBEDDED_DEFAULT_LIMIT",
    "EXECUTORS",
    "REPORT_RULES",
    "SMOKE_LABEL",
    "CliError",
    "add_executor_args",
    "cmd_fixture",
    "cmd_list",
    "cmd_report",
    "cmd_run",
    "cmd_sweep",
    "comparison_modes",
    "executor_from_args",
    "main",
    "run_with_baselines",
]
