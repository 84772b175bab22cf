"""``python -m agentlab.bench retention trajectories``: the trajectory replay's printed and JSON output.

Called by :func:`agentlab.bench.cli_retention.cmd_retention` once it has chosen the arms, parsed the
settings and resolved the budget; this module only loads the trajectories, measures
(:func:`agentlab.bench.trajectory_retention.measure_trajectories`) and prints. Rows are not
stored in the DuckDB file (the ``retention`` table's columns are the evidence measure's).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any, TextIO

from agentlab.bench.cli_common import _print_json
from agentlab.bench.loops import run_sync
from agentlab.bench.retention import FRACTION_TRIGGERED_PEERS, PEER_TRIGGER_FRACTION, retention_settings
from agentlab.bench.tasks.trajectories import TrajectoryDataset, selected_trajectories
from agentlab.bench.trajectory_retention import (
    DEFAULT_K,
    aggregate_trajectories,
    format_trajectory_table,
    measure_trajectories,
)


def run_trajectory_retention(arms: dict[str, Any], skipped: dict[str, str], settings: Any, budget: int,
                             budget_source: str, limit: int, as_json: bool, out: TextIO) -> int:
    """Measure every arm over the chosen trajectories (the first ``limit`` when > 0) and print the table."""
    started = time.perf_counter()
    trajectories = selected_trajectories(settings)
    if limit:
        trajectories = trajectories[:limit]
    timed = run_sync(measure_trajectories(trajectories, list(arms.values()), context_window=budget,
                                          settings=retention_settings(settings)))
    summaries = aggregate_trajectories(timed.rows, budget)
    wall = time.perf_counter() - started
    choice = settings.of("dataset", TrajectoryDataset).datasets
    if as_json:
        _print_json({"benchmark": "trajectories", "datasets": choice, "context_budget": budget,
                     "context_budget_source": budget_source, "cases": len(trajectories), "model": None,
                     "recall_top_k": DEFAULT_K, "summaries": [asdict(s) for s in summaries], "skipped": skipped,
                     "stored_rows": 0, "seconds": round(wall, 3)}, out)
        return 0
    out.write(f"trajectories retention: {len(trajectories)} recorded trajectories ({choice}), context budget {budget} "
              f"tokens ({budget_source}), no model called\n")
    fractioned = [n for n in FRACTION_TRIGGERED_PEERS if n not in settings and any(a.startswith(n) for a in arms)]
    if fractioned:
        out.write(f"({', '.join(fractioned)}: trigger at {PEER_TRIGGER_FRACTION} of the budget, not the source's "
                  "absolute 100,000 tokens)\n")
    out.write(format_trajectory_table(summaries))
    out.write(f"(supported: share of step supports visible in the step's request, 95% bootstrap interval over "
              f"trajectories; +recall: with session_search top {DEFAULT_K} over what was hidden, for arms that have it)\n")
    if skipped:
        out.write("skipped (they need a model; this command calls none):\n")
        w = max(len(name) for name in skipped)
        out.write("".join(f"  {name:{w}s}  {reason}\n" for name, reason in skipped.items()))
    out.write(f"measured in {wall:.1f} s; nothing stored\n")
    return 0


__all__ = ["run_trajectory_retention"]
