"""Per-case frames for a benchmark's own report tables: one row per case of the run each table shows.

:func:`current_cases` reads the cases of ``current_runs`` (the one run per (model, mode) a task's
table shows, :func:`agentlab.bench.queries.current_runs_cte` through
:meth:`~agentlab.bench.store.ResultStore.current_runs_df`) with named aggregates over each case's
calls (:data:`CASE_COLUMNS`: tokens by purpose, the published last-call rule of
:data:`~agentlab.bench.queries.LAST_ANSWER_PROMPT_SQL`, latency, call counts) and its scores, one
column per metric. :func:`zero_failed` applies the denominator rule of the derived tables
(:data:`~agentlab.bench.queries.CASE_METRIC_CTE`): a failed case scores 0 and stays in every mean.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import agentlab.bench.queries as queries

__all__ = ["CASE_COLUMNS", "case_metadata", "current_cases", "zero_failed"]

#: Per-case columns by name: aggregates over the case's calls ``k`` (0 for a case without calls),
#: or a column of the case row ``c``.
CASE_COLUMNS: dict[str, str] = {
    "latency_ms": "c.latency_ms",
    "answer_prompt": "COALESCE(SUM(k.prompt_tokens) FILTER (WHERE k.purpose = 'answer'), 0)",
    "answer_completion": "COALESCE(SUM(k.completion_tokens) FILTER (WHERE k.purpose = 'answer'), 0)",
    "answer_prompt_last": queries.LAST_ANSWER_PROMPT_SQL,
    "summary_prompt": "COALESCE(SUM(k.prompt_tokens) FILTER (WHERE k.purpose = 'summary'), 0)",
    "summary_completion": "COALESCE(SUM(k.completion_tokens) FILTER (WHERE k.purpose = 'summary'), 0)",
    "all_tokens": "COALESCE(SUM(k.prompt_tokens + k.completion_tokens), 0)",
    "answer_latency_ms": "COALESCE(SUM(k.latency_ms) FILTER (WHERE k.purpose = 'answer'), 0)",
    "answer_calls": "count(k.seq) FILTER (WHERE k.purpose = 'answer')",
    "all_calls": "count(k.seq)",
}


def current_cases(store: Any, benchmark: str, columns: Sequence[str]) -> Any:
    """One row per case of the run shown for each (model, mode) of ``benchmark``, as a DataFrame.

    Columns: ``model, mode, run_id, case_id, status, metadata`` (the stored JSON), the named
    :data:`CASE_COLUMNS`, and one column per metric scored in any run of the benchmark (NaN where
    the case has no such score, e.g. a failed case). Empty when no run is stored.
    """
    unknown = [c for c in columns if c not in CASE_COLUMNS]
    if unknown:
        raise ValueError(f"unknown per-case columns {unknown}; known: {', '.join(CASE_COLUMNS)}")
    selected = "".join(f",\n    {CASE_COLUMNS[name]} AS {name}" for name in columns)
    cases = store.current_runs_df(
        f"""
        SELECT r.model, r.mode, c.run_id, c.case_id, c.status, c.metadata{selected}
        FROM current_runs r JOIN cases c ON c.run_id = r.run_id
        LEFT JOIN calls k ON k.run_id = c.run_id AND k.case_id = c.case_id
        GROUP BY ALL
        """, benchmark)
    if cases.empty:
        return cases
    scores = store.df("SELECT run_id, case_id, metric, value FROM scores WHERE run_id IN "
                      "(SELECT run_id FROM runs WHERE benchmark = ?)", [benchmark])
    if not scores.empty:
        wide = scores.pivot_table(index=["run_id", "case_id"], columns="metric", values="value", aggfunc="first")
        cases = cases.merge(wide.reset_index(), on=["run_id", "case_id"], how="left")
    return cases


def case_metadata(cases: Any) -> list[dict[str, Any]]:
    """The ``metadata`` column of a :func:`current_cases` frame, parsed (``{}`` where none was stored)."""
    return [json.loads(m) if isinstance(m, str) else (m or {}) for m in cases["metadata"]]


def zero_failed(cases: Any, metrics: Sequence[str], *, if_scored: Sequence[str] = ()) -> None:
    """A failed case scores 0 on ``metrics`` and on the ``if_scored`` ones the frame has (in place).

    ``metrics`` get a (NaN) column when no case was scored on them (every case failed), so their
    failed cases still count 0; an ``if_scored`` metric (e.g. a judge's, absent when judging was
    off) is left absent.
    """
    for metric in metrics:
        if metric not in cases.columns:
            cases[metric] = float("nan")
    failed = cases["status"] != "ok"
    for metric in (*metrics, *if_scored):
        if metric in cases.columns:
            cases.loc[failed, metric] = 0.0
