"""The notebook API: every results table as a pandas DataFrame.

>>> from agentlab.bench import analysis
>>> analysis.recovery_df(benchmark="qmsum")            # doctest: +SKIP

Each function opens the results file read-only (``results/agentlab.duckdb`` unless ``db=`` is
given, or pass an open :class:`~agentlab.bench.store.ResultStore` as ``store=``), filters by
benchmark / mode when asked, and returns a DataFrame. The three derived tables are rebuilt first
when ``rebuild=True`` (the ``report`` command always rebuilds them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from agentlab.bench.config import ModeRoles
from agentlab.bench.metrics import percentiles
from agentlab.bench.store import DEFAULT_DB, MODE_MEANS_SQL, ResultStore


@contextlib.contextmanager
def _open(db: str | Path | None, store: ResultStore | None, *, writable: bool = False) -> Iterator[ResultStore]:
    if store is not None:
        yield store
        return
    path = Path(db) if db is not None else DEFAULT_DB
    if not path.exists():
        raise FileNotFoundError(f"no results database at {path}; run a benchmark first (python -m agentlab.bench ...)")
    opened = ResultStore(path, read_only=not writable)
    try:
        yield opened
    finally:
        opened.close()


def _select(store: ResultStore, table: str, filters: Mapping[str, Any], order: str) -> pd.DataFrame:
    if not store.has_table(table):
        return pd.DataFrame()
    where, params = [], []
    for column, value in filters.items():
        if value is None:
            continue
        if isinstance(value, list | tuple | set):
            where.append(f"{column} IN ({', '.join('?' for _ in value)})")
            params.extend(value)
        else:
            where.append(f"{column} = ?")
            params.append(value)
    sql = f"SELECT * FROM {table}" + (f" WHERE {' AND '.join(where)}" if where else "") + f" ORDER BY {order}"
    return store.df(sql, params)


def rebuild(db: str | Path | None = None, *, store: ResultStore | None = None,
            roles: Mapping[str, ModeRoles] | None = None) -> None:
    """Rebuild the derived tables (token_savings, quality_loss, recovery) in place."""
    with _open(db, store, writable=True) as s:
        s.rebuild_derived(roles)


def runs_df(benchmark: str | None = None, mode: str | None = None, *, db: str | Path | None = None,
            store: ResultStore | None = None) -> pd.DataFrame:
    with _open(db, store) as s:
        return _select(s, "runs", {"benchmark": benchmark, "mode": mode}, "started, run_id")


def cases_df(benchmark: str | None = None, mode: str | None = None, *, run_id: str | None = None,
             db: str | Path | None = None, store: ResultStore | None = None) -> pd.DataFrame:
    """Cases joined with their run's benchmark, mode and model."""
    with _open(db, store) as s:
        where, params = [], []
        for column, value in (("r.benchmark", benchmark), ("r.mode", mode), ("c.run_id", run_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = ("SELECT r.benchmark, r.mode, r.model, c.* FROM cases c JOIN runs r USING (run_id)"
               + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY r.benchmark, r.mode, c.ordinal, c.case_id")
        return s.df(sql, params)


def scores_df(benchmark: str | None = None, mode: str | None = None, *, metric: str | None = None,
              db: str | Path | None = None, store: ResultStore | None = None) -> pd.DataFrame:
    """Scores joined with run and case status (failed cases have no score rows)."""
    with _open(db, store) as s:
        where, params = [], []
        for column, value in (("r.benchmark", benchmark), ("r.mode", mode), ("sc.metric", metric)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = ("SELECT r.benchmark, r.mode, r.model, sc.*, c.status FROM scores sc JOIN runs r USING (run_id) "
               "JOIN cases c ON c.run_id = sc.run_id AND c.case_id = sc.case_id"
               + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY r.benchmark, r.mode, sc.case_id, sc.metric")
        return s.df(sql, params)


def calls_df(benchmark: str | None = None, mode: str | None = None, *, db: str | Path | None = None,
             store: ResultStore | None = None) -> pd.DataFrame:
    with _open(db, store) as s:
        where, params = [], []
        for column, value in (("r.benchmark", benchmark), ("r.mode", mode)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = ("SELECT r.benchmark, r.mode, k.* FROM calls k JOIN runs r USING (run_id)"
               + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY r.benchmark, r.mode, k.case_id, k.seq")
        return s.df(sql, params)


def mode_means_df(benchmark: str, *, db: str | Path | None = None, store: ResultStore | None = None) -> pd.DataFrame:
    """Mean of every metric per mode (current run of each mode); failed cases count as 0."""
    with _open(db, store) as s:
        return s.df(MODE_MEANS_SQL, [benchmark])


def token_savings_df(benchmark: str | None = None, mode: str | None = None, *, level: str | None = None,
                     db: str | Path | None = None, store: ResultStore | None = None,
                     rebuild: bool = False) -> pd.DataFrame:
    """Per-case (``level='case'``) and aggregate (``level='aggregate'``) token savings."""
    with _open(db, store, writable=rebuild) as s:
        if rebuild:
            s.rebuild_derived()
        return _select(s, "token_savings", {"benchmark": benchmark, "mode": mode, "level": level},
                       "benchmark, model, mode, level, case_id")


def quality_loss_df(benchmark: str | None = None, mode: str | None = None, *, metric: str | None = None,
                    db: str | Path | None = None, store: ResultStore | None = None,
                    rebuild: bool = False) -> pd.DataFrame:
    with _open(db, store, writable=rebuild) as s:
        if rebuild:
            s.rebuild_derived()
        return _select(s, "quality_loss", {"benchmark": benchmark, "mode": mode, "metric": metric},
                       "benchmark, model, mode, metric")


def recovery_df(benchmark: str | None = None, *, metric: str | None = None, db: str | Path | None = None,
                store: ResultStore | None = None, rebuild: bool = False) -> pd.DataFrame:
    with _open(db, store, writable=rebuild) as s:
        if rebuild:
            s.rebuild_derived()
        return _select(s, "recovery", {"benchmark": benchmark, "metric": metric}, "benchmark, model, metric")


def savings_percentiles(per_case: pd.DataFrame, column: str = "total_savings") -> pd.DataFrame:
    """p25/p50/p75/p95 and the negative rate of a per-case savings column, per (benchmark, model, mode)."""
    rows = []
    cases = per_case[per_case["level"] == "case"] if "level" in per_case else per_case
    for key, group in cases.groupby(["benchmark", "model", "mode"]):
        values = [float(v) for v in group[column].dropna()]
        if not values:
            continue
        row = dict(zip(["benchmark", "model", "mode"], key, strict=True))
        row.update(percentiles(values))
        row["negative_rate"] = sum(v < 0 for v in values) / len(values)
        row["n_cases"] = len(values)
        rows.append(row)
    return pd.DataFrame(rows)
