"""What every ``python -m agentlab.bench`` command shares: the user-error type, the flags, JSON output.

Kept apart from the commands so the run, report and sweep modules can use it without importing
each other.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from agentlab.bench.retrieval.retrievers import RETRIEVER_CHOICES
from agentlab.bench.store.results import DEFAULT_DB
from agentlab.bench.usage import EMBEDDED_DEFAULT_LIMIT as EMBEDDED_DEFAULT_LIMIT
from agentlab.bench.usage import print_banner as print_banner
from agentlab.bench.usage import print_json as print_json

#: Values of --executor.
EXECUTORS = ("in-process", "ray")
SMOKE_LABEL = ("SMOKE TEST: produced with the embedded SmolLM2-135M model; these numbers only show that the "
               "pipeline runs and are not comparable with published results.")


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


# ---------------------------------------------------------------------------------- parsers


def run_parser(prog: str) -> argparse.ArgumentParser:
    """The parser of a run: ``python -m agentlab.bench <benchmark> [flags]``."""
    p = argparse.ArgumentParser(prog=prog, description="Run one mode of a benchmark (resumable).")
    p.add_argument("benchmark")
    p.add_argument("--arm", "--mode", dest="mode",
                   help="arm to run: a mode of the benchmark or a registered arm (`list` shows them); "
                        "--mode is its synonym; default: the benchmark's default mode")
    p.add_argument("--seeding", choices=("forced", "lived"), default=None,
                   help="how a generic arm's history reaches its session: all at once (forced, the default) or "
                        "replayed event by event so each mechanism's trigger fires (lived; part of the run id)")
    p.add_argument("--limit", type=int, default=None,
                   help=f"run the first N selected cases (0 = all; default all, {EMBEDDED_DEFAULT_LIMIT} on the embedded model)")
    p.add_argument("--model", help="answer model spec (e.g. embedded, openai:gpt-4o-mini); default from the environment")
    p.add_argument("--judge-model", help="judge model spec; default: [judge] model in the settings, else the answer model")
    p.add_argument("--context-window", type=int, default=None, metavar="N",
                   help="the answer model's context window in tokens (default: what its server states, else the "
                        "known-model table; a model neither knows stops the run)")
    p.add_argument("--context-budget", type=int, default=None, metavar="N",
                   help="the window the mechanisms see (summary triggers, the 70%% pressure path, compaction "
                        "thresholds), below the model's real one, to compare policies at one pressure; part of "
                        "the run id when given (default: the model's window)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="cases run at once (per worker with --executor ray; default [run] concurrency or 4)")
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"results DuckDB file (default {DEFAULT_DB})")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a setting from benchmarks/<benchmark>.toml (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="build every prompt and count tokens; call no model")
    p.add_argument("--retrieval-only", action="store_true", help="LLM-free evidence recall@k of the retrieval")
    p.add_argument("--unit", help="with --retrieval-only: the benchmark's published retrieval protocol on these units "
                                  "(locomo: dialog, observation, summary); stored in --db")
    p.add_argument("--retriever", choices=RETRIEVER_CHOICES,
                   help="with --unit: one retriever (its per-category table and latency); default: the "
                        "protocol-text and expanded retrievers side by side in one table")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--published-settings", action="store_true",
                   help="with the embedded model, keep the published settings (skip the [smoke] settings)")
    p.add_argument("--variant", metavar="NAME",
                   help="name this run's variant (part of its id); default: the --set settings that differ "
                        "from the benchmark's file, e.g. summary.max_output_tokens=512, or 'default'")
    p.add_argument("--no-baselines", action="store_true",
                   help="run only --mode (by default a mode with a baseline first runs, or reuses, its baseline "
                        "and lossy modes on the same cases and ends with the comparison tables)")
    add_executor_args(p)
    return p


def add_executor_args(p: argparse.ArgumentParser) -> None:
    """``--executor``, ``--ray-address``, ``--workers``: where cases run (not part of the run id)."""
    p.add_argument("--executor", choices=EXECUTORS, default="in-process",
                   help="where cases run: in this process (default) or on Ray workers (pip install 'agentlab[ray]'); "
                        "the results land in --db either way and a run can be resumed with the other executor")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="join this Ray cluster ('auto' or HOST:PORT of `ray start --head`); default: a private "
                        "local Ray instance")
    p.add_argument("--workers", type=int, metavar="N",
                   help="Ray workers (one CPU each; each runs --concurrency cases at once); default: the cluster's CPUs")



def report_parser(prog: str) -> argparse.ArgumentParser:
    """The parser of ``report``."""
    p = argparse.ArgumentParser(prog=f"{prog} report", description="Rebuild and print the derived tables.")
    p.add_argument("benchmark")
    p.add_argument("--db", type=Path, default=DEFAULT_DB)
    p.add_argument("--json", action="store_true")
    p.add_argument("--run", action="append", metavar="ID", help="only rows of this run (and its partners; repeatable)")
    p.add_argument("--variant", action="append", metavar="NAME", help="only rows of this variant (repeatable)")
    p.add_argument("--between", nargs=2, metavar=("A", "B"),
                   help="also compare variant B with variant A of each mode, paired on shared cases")
    return p


def sweep_parser(prog: str) -> argparse.ArgumentParser:
    """The parser of ``sweep``."""
    p = argparse.ArgumentParser(
        prog=f"{prog} sweep", allow_abbrev=False,  # unknown flags go to the runs: no prefix guessing
        description="Run one mode over the cartesian product of --grid settings, each point a resumable variant "
                    "run named by its settings; the baseline mode runs once first (skip with --no-baseline). "
                    "Interrupted and rerun, it finishes only what is missing.",
        epilog="Every other flag of a run (--limit, --model, --judge-model, --context-window, --context-budget, "
               "--concurrency, --db, "
               "--set for settings shared by every point, --published-settings, --json, --no-progress) is passed "
               "to each run.")
    p.add_argument("benchmark")
    p.add_argument("--arm", "--mode", dest="mode", help="arm (mode) to sweep; default: the benchmark's default mode")
    p.add_argument("--grid", action="append", required=True, metavar="SECTION.FIELD=V1,V2[,...]",
                   help="a setting and its values (repeatable: the grid is the product)")
    p.add_argument("--no-baseline", action="store_true", help="do not run the baseline mode first")
    return p


def list_parser(prog: str) -> argparse.ArgumentParser:
    """The parser of ``list``."""
    p = argparse.ArgumentParser(prog=f"{prog} list", description="List the registered benchmarks.")
    p.add_argument("--json", action="store_true")
    return p


def fixture_parser(prog: str) -> argparse.ArgumentParser:
    """The parser of ``fixture``."""
    from agentlab.bench.datasets.longmemeval import QUESTION_TYPES

    p = argparse.ArgumentParser(
        prog=f"{prog} fixture",
        description="Write a small generated data file in a benchmark's real schema, for runs without the "
                    "real data (LongMemEval only: it cannot be downloaded everywhere). Run on it with "
                    "--set dataset.path=PATH.")
    p.add_argument("benchmark", choices=["longmemeval"])
    p.add_argument("path", type=Path, help="JSON file to write")
    p.add_argument("--questions", type=int, default=6, help="questions (default 6)")
    p.add_argument("--sessions", type=int, default=3, help="haystack sessions per question (default 3)")
    p.add_argument("--turns", type=int, default=4, help="turns per session (default 4)")
    p.add_argument("--question-type", action="append", dest="types", choices=QUESTION_TYPES,
                   help="question types to cycle through (repeatable; default all six)")
    return p


# ------------------------------------------------------------------------------------ helpers


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        try:
            return _jsonable(value.item())
        except (AttributeError, ValueError):
            pass
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def frame_records(df: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows as JSON-ready dicts (NaN and infinity as ``None``, dates as ISO text)."""
    if df is None or len(df) == 0:
        return []
    return [{k: _jsonable(v) for k, v in row.items()} for row in df.to_dict(orient="records")]



