"""Per-case and per-run frames of a benchmark's current runs, for its own report tables.

A task's published-style tables (``Task.report_tables``) read the one run per (model, mode) that
:func:`agentlab.bench.scoring.queries.with_current_runs` picks, through
:meth:`ResultStore.current_runs_df <agentlab.bench.store.results.ResultStore.current_runs_df>`. The two
shapes tasks ask for:

* :func:`metadata_means` — per run of one mode: cases, failed cases, and the mean of numeric
  case-metadata fields (QMSum's recall table);
* :func:`case_tokens` — one row per case: its status, metadata fields, tokens by call purpose,
  further per-case aggregates of :data:`CASE_COLUMNS` (the published last-call rule of
  :data:`~agentlab.bench.scoring.queries.LAST_ANSWER_PROMPT_SQL`, latency, call counts) and its scores,
  wide (MT-Bench-101's, LoCoMo's and LongMemEval's tables);
* :func:`ok_case_metadata` — what one case stored in earlier ``ok`` runs of the same settings.

:func:`zero_failed` applies the denominator rule of the derived tables
(:data:`~agentlab.bench.scoring.queries.CASE_METRIC_CTE`) to such a frame: a failed case scores 0 and stays in.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import agentlab.bench.scoring.queries as queries

__all__ = ["CASE_COLUMNS", "case_metadata", "case_tokens", "metadata_means", "ok_case_metadata", "zero_failed"]

#: Per-case columns :func:`case_tokens` adds by name: aggregates over the case's calls ``k`` (0 for
#: a case without calls), or a column of the case row ``c``.
CASE_COLUMNS: dict[str, str] = {
    "latency_ms": "c.latency_ms",
    "answer_prompt_last": queries.LAST_ANSWER_PROMPT_SQL,
    "all_tokens": "COALESCE(SUM(k.prompt_tokens + k.completion_tokens), 0)",
    "answer_latency_ms": "COALESCE(SUM(k.latency_ms) FILTER (WHERE k.purpose = 'answer'), 0)",
    "answer_calls": "count(k.seq) FILTER (WHERE k.purpose = 'answer')",
    "all_calls": "count(k.seq)",
}


def _name(value: str, what: str) -> str:
    """``value`` if it is a plain name (letters, digits, ``_``, ``+``) that is safe inside the SQL, else ``ValueError``."""
    if not value or not value.replace("_", "").replace("+", "").isalnum():
        raise ValueError(f"not a {what}: {value!r}")
    return value


def _field(name: str) -> str:
    return f"json_extract_string(c.metadata, '$.{_name(name, 'metadata field name')}')"


def metadata_means(store: Any, benchmark: str, mode: str, means: Mapping[str, str],
                   by: Mapping[str, str] | None = None) -> Any:
    """Per current run of ``mode``: ``n_cases``, ``n_failed`` and ``column = mean of metadata field`` for ``means``.

    ``by``: group further by ``column = metadata field``, the value given when a case lacks it
    (``{"recall_path": "tool"}``). Rows ordered by model, then the ``by`` columns.
    """
    _name(mode, "mode name")
    groups = [f"COALESCE({_field(column)}, '{_name(default, 'default value')}') AS {column}"
              for column, default in (by or {}).items()]
    averages = [f"avg(TRY_CAST({_field(field)} AS DOUBLE)) AS {_name(column, 'column name')}"
                for column, field in means.items()]
    counts = ["count(*) AS n_cases", "count(*) FILTER (WHERE c.status = 'failed') AS n_failed"]
    sql = (f"SELECT r.model, r.mode, {', '.join([*groups, *counts, *averages])}\n"
           f"FROM current_runs r JOIN cases c ON c.run_id = r.run_id\nWHERE r.mode = '{mode}'\n"
           f"GROUP BY ALL ORDER BY {', '.join(['r.model', *(by or {})])}")
    return store.current_runs_df(sql, benchmark)


def case_tokens(store: Any, benchmark: str, purposes: Sequence[str] = ("answer",),
                fields: Mapping[str, Callable[[Any], Any]] | None = None, columns: Sequence[str] = ()) -> Any:
    """One row per case of the current runs: model, mode, run_id, case_id, status, metadata, tokens, scores.

    Tokens: ``<purpose>_prompt``, ``<purpose>_completion`` and their sum ``<purpose>_total`` per
    call purpose. ``fields``: metadata fields made columns, each the callable of the stored value
    (``None`` when missing). ``columns``: names of :data:`CASE_COLUMNS` added as they are. Scores: one column per metric any run of the benchmark scored, NaN
    where the case has none (a failed case, or an unparsed judge reply).
    """
    tokens = [f"COALESCE(SUM(k.{kind}_tokens) FILTER (WHERE k.purpose = '{_name(p, 'call purpose')}'), 0) AS {p}_{kind}"
              for p in purposes for kind in ("prompt", "completion")]
    unknown = [c for c in columns if c not in CASE_COLUMNS]
    if unknown:
        raise ValueError(f"unknown per-case columns {unknown}; known: {', '.join(CASE_COLUMNS)}")
    tokens += [f"{CASE_COLUMNS[name]} AS {name}" for name in columns]
    cases = store.current_runs_df(
        f"SELECT r.model, r.mode, c.run_id, c.case_id, c.status, c.metadata, {', '.join(tokens)}\n"
        "FROM current_runs r JOIN cases c ON c.run_id = r.run_id\n"
        "LEFT JOIN calls k ON k.run_id = c.run_id AND k.case_id = c.case_id\nGROUP BY ALL", benchmark)
    if cases.empty:
        return cases
    meta = case_metadata(cases)
    for column, convert in (fields or {}).items():
        cases[column] = [convert(m.get(column)) for m in meta]
    for p in purposes:
        cases[f"{p}_total"] = cases[f"{p}_prompt"] + cases[f"{p}_completion"]
    scores = store.df("SELECT run_id, case_id, metric, value FROM scores WHERE run_id IN "
                      "(SELECT run_id FROM runs WHERE benchmark = ?)", [benchmark])
    if not scores.empty:
        wide = scores.pivot_table(index=["run_id", "case_id"], columns="metric", values="value", aggfunc="first")
        cases = cases.merge(wide.reset_index(), on=["run_id", "case_id"], how="left")
    return cases


def ok_case_metadata(store: Any, benchmark: str, mode: str, model: str, case_id: str,
                     sections: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The metadata of case ``case_id`` in every run of (``benchmark``, ``mode``, ``model``) where it is ``ok``, newest run first,
    keeping only runs whose settings have these ``sections`` (section name → its stored value).

    E.g. MT-Bench-101's summary mode reads the baseline answers it is scored against this way:
    any ``ok`` baseline run of the same model and ``[answer]`` settings, whatever else differs.
    """
    rows = store.query(
        "SELECT r.config, c.metadata FROM cases c JOIN runs r USING (run_id) WHERE r.benchmark = ? AND r.mode = ? "
        "AND r.model = ? AND c.case_id = ? AND c.status = 'ok' ORDER BY r.started DESC",
        [benchmark, mode, model, case_id])
    found = []
    for config, metadata in rows:
        stored = (json.loads(config) if isinstance(config, str) else config or {}).get("settings", {})
        if all(stored.get(name) == value for name, value in sections.items()):
            found.append(json.loads(metadata) if isinstance(metadata, str) else (metadata or {}))
    return found


def case_metadata(cases: Any) -> list[dict[str, Any]]:
    """The ``metadata`` column of a :func:`case_tokens` frame, parsed (``{}`` where none was stored)."""
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
