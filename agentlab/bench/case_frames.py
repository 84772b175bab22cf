"""Per-case and per-run frames of a benchmark's current runs, for its own report tables.

A task's published-style tables (``Task.report_tables``) read the one run per (model, mode) that
:func:`agentlab.bench.queries.with_current_runs` picks, through
:meth:`ResultStore.current_runs_df <agentlab.bench.store.ResultStore.current_runs_df>`. The two
shapes tasks ask for:

* :func:`metadata_means` — per run of one mode: cases, failed cases, and the mean of numeric
  case-metadata fields (QMSum's recall table);
* :func:`case_tokens` — one row per case: its status, metadata fields, tokens by call purpose and
  its scores, wide (MT-Bench-101's token-efficiency and quality tables);
* :func:`ok_case_metadata` — what one case stored in earlier ``ok`` runs of the same settings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["case_tokens", "metadata_means", "ok_case_metadata"]


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
                fields: Mapping[str, Callable[[Any], Any]] | None = None) -> Any:
    """One row per case of the current runs: model, mode, run_id, case_id, status, metadata, tokens, scores.

    Tokens: ``<purpose>_prompt``, ``<purpose>_completion`` and their sum ``<purpose>_total`` per
    call purpose. ``fields``: metadata fields made columns, each the callable of the stored value
    (``None`` when missing). Scores: one column per metric any run of the benchmark scored, NaN
    where the case has none (a failed case, or an unparsed judge reply).
    """
    tokens = [f"COALESCE(SUM(k.{kind}_tokens) FILTER (WHERE k.purpose = '{_name(p, 'call purpose')}'), 0) AS {p}_{kind}"
              for p in purposes for kind in ("prompt", "completion")]
    cases = store.current_runs_df(
        f"SELECT r.model, r.mode, c.run_id, c.case_id, c.status, c.metadata, {', '.join(tokens)}\n"
        "FROM current_runs r JOIN cases c ON c.run_id = r.run_id\n"
        "LEFT JOIN calls k ON k.run_id = c.run_id AND k.case_id = c.case_id\nGROUP BY ALL", benchmark)
    if cases.empty:
        return cases
    meta = [json.loads(m) if isinstance(m, str) else (m or {}) for m in cases["metadata"]]
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
