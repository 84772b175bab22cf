"""LLM-free retention of every LLM-free arm over all of QMSum and LoCoMo in tool delivery (prints a table).

No model at all: each case's history is delivered as tool results (QMSum's transcript through
``read_transcript``, ``--chunk-turns`` turns per call; LoCoMo's sessions through ``open_session``),
every request a live agent would send is projected with ``agentlab.core.project`` under each arm of
``agentlab.bench.retention.questions.retention_arms()``, and the retention columns are averaged per arm and
benchmark (definitions in ``agentlab/bench/retention/questions.py``). The arms that need a summariser are
listed as skipped, with the reason.

Run (data from ``$AGENTLAB_DATA_DIR``)::

    .venv/bin/python benchmarks/perf/bench_retention.py [--window 8192] [--chunk-turns 40] \
        [--limit 0] [--arms a,b] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from agentlab.bench.datasets.locomo import load_locomo
from agentlab.bench.datasets.qmsum import load_qmsum, select_cases
from agentlab.bench.retention.delivery import Delivery
from agentlab.bench.retention.questions import (
    DEFAULT_CONTEXT_WINDOW,
    HistoryGroup,
    RetentionSummary,
    aggregate,
    measure_groups,
    model_arms,
    retention_arms,
)
from agentlab.bench.tasks.locomo_delivery import locomo_groups
from agentlab.bench.tasks.qmsum_delivery import qmsum_groups


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(benchmark: str, summaries: list[RetentionSummary], seconds: float) -> list[str]:
    lines = [f"\n{benchmark}: {summaries[0].n_cases if summaries else 0} cases per arm, {seconds:.1f} s",
             f"{'arm':28s} {'scored':>6s} {'retained':>8s} {'rec@5':>6s} {'rec@10':>6s} {'peak':>7s} "
             f"{'max peak':>8s} {'>window':>7s} {'total sent':>10s} {'final':>7s}"]
    for s in summaries:
        lines.append(f"{s.arm:28s} {s.n_scored:6d} {_fmt(s.retained):>8s} {_fmt(s.recoverable.get(5)):>6s} "
                     f"{_fmt(s.recoverable.get(10)):>6s} {s.mean_peak_prompt_tokens:7.0f} "
                     f"{s.max_peak_prompt_tokens:8d} {s.n_over_window or 0:7d} {s.mean_total_prompt_tokens:10.0f} "
                     f"{s.mean_final_prompt_tokens:7.0f}")
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=DEFAULT_CONTEXT_WINDOW, help="the run's context window")
    parser.add_argument("--chunk-turns", type=int, default=Delivery().chunk_turns, help="QMSum turns per read")
    parser.add_argument("--limit", type=int, default=0, help="first N QMSum cases / LoCoMo conversations (0 = all)")
    parser.add_argument("--arms", default="", help="comma-separated arm names (default: every LLM-free arm)")
    parser.add_argument("--json", default="", help="also write the summaries to this file")
    args = parser.parse_args()

    arms = retention_arms()
    if args.arms:
        unknown = [a for a in args.arms.split(",") if a not in arms]
        if unknown:
            parser.error(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(arms)}")
        arms = {a: arms[a] for a in args.arms.split(",")}
    delivery = Delivery("tool_results", args.chunk_turns)
    started = time.perf_counter()
    cases = select_cases(load_qmsum(), limit=args.limit)
    conversations = load_locomo().conversations
    if args.limit:
        conversations = conversations[:args.limit]
    benchmarks: dict[str, list[HistoryGroup]] = {
        "qmsum": qmsum_groups(cases, delivery),
        "locomo": locomo_groups(conversations, delivery),
    }
    print(f"tool_results delivery, window {args.window}, chunk_turns {args.chunk_turns}, no model; "
          f"data loaded in {time.perf_counter() - started:.1f} s")
    out: dict[str, Any] = {}
    for name, groups in benchmarks.items():
        timed = await measure_groups(groups, list(arms.values()), context_window=args.window)
        summaries = aggregate(timed.rows, args.window)
        missing = sum(r.n_missing for r in timed.rows) // max(1, len(arms))
        print("\n".join(_table(name, summaries, timed.seconds)))
        print(f"({missing} gold ids not in the history, left out of the fractions)")
        out[name] = {"seconds": timed.seconds, "summaries": [s.__dict__ for s in summaries]}
    print("\nskipped (need a model): " + "; ".join(f"{s.name}: {s.reason}" for s in model_arms().values()))
    print(f"wall time {time.perf_counter() - started:.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    asyncio.run(main())
