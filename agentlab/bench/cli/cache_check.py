"""``python -m agentlab.bench cache-check``: the prompt-cache model against the bill of recorded Claude Code sessions.

Loads the pinned Claude Code sessions (or, with ``--sessions-dir``, a folder of the user's own
logs), runs :func:`agentlab.bench.retention.cache_check.check` for ``long_context`` under the ``anthropic``
and ``openai`` profiles, and prints the estimates, the per-call error distribution in cached share
and the predicted vs recorded cost per session (``--json``: one object, every session included).
No model is called.
"""

from __future__ import annotations

import argparse
import time
from typing import TextIO

from agentlab.bench.cli.common import CliError, print_json
from agentlab.bench.retention.cache_check import check, format_check
from agentlab.bench.retention.sources import CLAUDE_CODE, load_selected
from agentlab.model.prices import price_for

DEFAULT_PRICE_MODEL = "claude-sonnet-4-5"


def cache_check_parser(prog: str) -> argparse.ArgumentParser:
    """The ``cache-check`` subcommand's flags."""
    p = argparse.ArgumentParser(prog=f"{prog} cache-check",
                                description="the prompt-cache model checked call by call against recorded usage")
    p.add_argument("--sessions-dir", default="", metavar="DIR",
                   help="a folder of your own Claude Code logs (e.g. ~/.claude/projects/<project>); default: the "
                        "300 pinned sessions")
    p.add_argument("--limit", type=int, default=0, help="the first N session files (0 = all; pinned sessions only)")
    p.add_argument("--strict", action="store_true", help="refuse a malformed log line instead of skipping it")
    p.add_argument("--price-model", default=DEFAULT_PRICE_MODEL,
                   help=f"the model of data/prices.toml the costs use (default {DEFAULT_PRICE_MODEL})")
    p.add_argument("--json", action="store_true", help="print one JSON object (every session's costs included)")
    return p


def cmd_cache_check(args: argparse.Namespace, out: TextIO) -> int:
    """Run the check and print it."""
    if args.limit < 0:
        raise CliError(f"--limit must be >= 0 (0 = all sessions), got {args.limit}")
    price = price_for(args.price_model)
    if price is None:
        raise CliError(f"--price-model {args.price_model}: no price in data/prices.toml; name a model it lists")
    if price.cache_write is None:
        raise CliError(f"--price-model {args.price_model}: no cache_write price in data/prices.toml, and the recorded "
                       "bill has cache writes; name a model with one (e.g. claude-sonnet-4-5)")
    started = time.perf_counter()
    data = load_selected((CLAUDE_CODE,), args.sessions_dir, strict=args.strict, limit=args.limit or None)
    result = check(data.trajectories, price)
    wall = time.perf_counter() - started
    note = data.note.removeprefix("; ")
    if args.json:
        print_json({"data_note": note, **result.as_dict(), "seconds": round(wall, 3)}, out)
        return 0
    out.write(f"cache check: long_context of {result.n_sessions} Claude Code sessions, {result.n_calls} recorded "
              f"calls, no model called\ndata: {note}\n")
    out.write(format_check(result))
    out.write(f"checked in {wall:.1f} s\n")
    return 0


__all__ = ["cache_check_parser", "cmd_cache_check"]
