"""The ``trajectory_retention`` table: one row per (dataset, budget, arm, trajectory) of ``retention trajectories``.

``python -m agentlab.bench retention trajectories`` writes it (:func:`trajectory_records`, stored
with :func:`agentlab.bench.store.retention.replace_rows`) into the results file, beside the
``retention`` table; ``agentlab.bench.analysis.trajectory_retention_df()`` reads it back. A row holds
one :class:`~agentlab.bench.retention.trajectories.TrajectoryRow` (definitions in
:mod:`agentlab.bench.retention.trajectories`) and is keyed by what its figures depend on — the
dataset, the context budget the mechanisms saw, the arm and the trajectory — so measuring again
replaces the rows of that key, and rows measured under another budget stay beside them. A
summarising arm measured with no model has its bounds (``supported_lo``, ``supported_hi``), the
stated ``summary_tokens`` and its summariser calls and tokens; any other arm has both bounds equal
to ``supported`` and ``summary_tokens`` NULL. ``hidden``
is the row's list of (step index, support text) as JSON, ``n_hidden`` its length. Each row also
keeps the definitions' version (:data:`~agentlab.bench.retention.trajectories.TRAJECTORY_RETENTION_VERSION`,
which names the supports' :data:`~agentlab.bench.retention.supports.SUPPORTS_VERSION`) and the code version
that measured it. The rows' prompt-cache figures, when a cache profile was active, are in the
``prompt_cache`` table (:mod:`agentlab.bench.store.cache`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from agentlab.bench.retention.trajectories import DEFAULT_K, TRAJECTORY_RETENTION_VERSION, TrajectoryRow
from agentlab.bench.store.retention import KeyedTable, read_rows

TABLE = "trajectory_retention"

#: Columns in table order: the key, the figures (``TrajectoryRow``), then provenance.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("dataset", "VARCHAR"), ("context_budget", "INTEGER"), ("arm", "VARCHAR"), ("traj_id", "VARCHAR"),
    ("n_steps", "INTEGER"), ("n_support_steps", "INTEGER"), ("n_supports", "INTEGER"), ("supported", "DOUBLE"),
    ("recoverable", "DOUBLE"), ("recall_top_k", "INTEGER"), ("refetch_steps", "INTEGER"),
    ("refetch_tokens", "INTEGER"), ("peak_prompt_tokens", "INTEGER"), ("total_prompt_tokens", "INTEGER"),
    ("final_prompt_tokens", "INTEGER"), ("recorded_reward", "DOUBLE"), ("n_hidden", "INTEGER"),
    ("hidden", "VARCHAR"), ("retention_version", "VARCHAR"), ("code_version", "VARCHAR"),
    ("measured_at", "DOUBLE"),
    # Added with trajectory-retention-v2 (at the end: a file made before gets them as new columns).
    ("supported_lo", "DOUBLE"), ("supported_hi", "DOUBLE"), ("summary_tokens", "INTEGER"),
    ("summary_calls", "INTEGER"), ("summary_input_tokens", "INTEGER"), ("summary_output_tokens", "INTEGER"),
)
KEY = ("dataset", "context_budget", "arm", "traj_id")
TRAJECTORY_RETENTION = KeyedTable(TABLE, COLUMNS, KEY)


def trajectory_records(rows: Sequence[TrajectoryRow], *, context_budget: int, code_version: str,
                       k: int = DEFAULT_K) -> list[tuple[Any, ...]]:
    """``rows`` (measured at ``context_budget`` tokens, ``recoverable`` at search depth ``k``) as records of the table."""
    now = time.time()
    return [(r.dataset, context_budget, r.arm, r.traj_id, r.n_steps, r.n_support_steps, r.n_supports, r.supported,
             r.recoverable, k, r.refetch_steps, r.refetch_tokens, r.peak_prompt_tokens, r.total_prompt_tokens,
             r.final_prompt_tokens, r.recorded_reward, len(r.hidden), json.dumps([list(h) for h in r.hidden]),
             TRAJECTORY_RETENTION_VERSION, code_version, now, r.supported_lo, r.supported_hi, r.summary_tokens,
             r.summary_calls, r.summary_input_tokens, r.summary_output_tokens) for r in rows]


def read_trajectory_retention(con: Any, *, dataset: str | None = None, arm: str | None = None) -> Any:
    """The stored rows as a DataFrame, in key order (empty, with the columns, when nothing was measured yet)."""
    return read_rows(con, TRAJECTORY_RETENTION, (("dataset", dataset), ("arm", arm)))


__all__ = ["COLUMNS", "KEY", "TABLE", "TRAJECTORY_RETENTION", "read_trajectory_retention", "trajectory_records"]
