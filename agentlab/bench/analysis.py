"""The notebook API: every results table as a pandas DataFrame.

>>> from agentlab.bench import analysis
>>> analysis.recovery_df(benchmark="qmsum")            # doctest: +SKIP

Each function opens the results file read-only (``results/agentlab.duckdb`` unless ``db=`` is
given, or pass an open :class:`~agentlab.bench.store.results.ResultStore` as ``store=``), filters by
benchmark / mode when asked, and returns a DataFrame. The three derived tables are rebuilt first
when ``rebuild=True`` (the ``report`` command always rebuilds them).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from agentlab.bench.facts import ModeRoles
from agentlab.bench.scoring.metrics import percentiles
from agentlab.bench.store.results import DEFAULT_DB, MODE_MEANS_SQL, ResultStore


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


def _where(pairs: tuple[tuple[str, Any], ...]) -> tuple[list[str], list[Any]]:
    """``column = ?`` conditions (and their parameters) for the pairs whose value is given."""
    given = [(column, value) for column, value in pairs if value is not None]
    return [f"{column} = ?" for column, _ in given], [value for _, value in given]


def _select(store: ResultStore, table: str, filters: Mapping[str, Any], order: str) -> pd.DataFrame:
    if not store.has_table(table):
        return pd.DataFrame()
    where: list[str] = []
    params: list[Any] = []
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
    """Every run, with its ok / failed case counts, (after a rebuild) its role and comparison partners,
    and one column per resolved setting.

    The setting columns are named ``section.field`` (``summary.events_over``, ``recall.search_top_k``)
    and read from the run's stored config, which holds every field of every section, defaults
    included; so two runs can be told apart by any knob, not only by the ones their variant names.
    A list value is a tuple (hashable, so the columns group). A run stored before settings were
    typed shows the fields it stored under their old names.
    """
    with _open(db, store) as s:
        if not s.has_table("runs"):
            return pd.DataFrame()
        paired = s.has_table("report_runs")
        where, params = _where((("r.benchmark", benchmark), ("r.mode", mode)))
        sql = ("SELECT r.*"
               + (", p.role, p.baseline_run_id, p.baseline_variant, p.lossy_run_id, p.lossy_variant, p.pairing"
                  if paired else "")
               + ", (SELECT count(*) FROM cases c WHERE c.run_id = r.run_id AND c.status = 'ok') AS n_ok"
               + ", (SELECT count(*) FROM cases c WHERE c.run_id = r.run_id AND c.status = 'failed') AS n_failed"
               + " FROM runs r" + (" LEFT JOIN report_runs p USING (run_id)" if paired else "")
               + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY r.started, r.run_id")
        return _with_setting_columns(s.df(sql, params))


def _with_setting_columns(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` plus a ``section.field`` column for every setting stored in a run's config."""
    if runs.empty or "config" not in runs.columns:
        return runs
    rows = []
    for raw in runs["config"]:
        try:
            config = json.loads(raw) if isinstance(raw, str) else (raw or {})
        except ValueError:
            config = {}
        flat: dict[str, Any] = {}
        for section, values in sorted((config.get("settings") or {}).items()):
            if isinstance(values, Mapping):
                for field, value in sorted(values.items()):
                    flat[f"{section}.{field}"] = tuple(value) if isinstance(value, list) else value
        rows.append(flat)
    columns = sorted({key for row in rows for key in row} - set(runs.columns))
    if not columns:
        return runs
    extra = pd.DataFrame([[row.get(c) for c in columns] for row in rows], columns=columns, index=runs.index)
    return pd.concat([runs, extra], axis=1)


def cases_df(benchmark: str | None = None, mode: str | None = None, *, run_id: str | None = None,
             db: str | Path | None = None, store: ResultStore | None = None) -> pd.DataFrame:
    """Cases joined with their run's benchmark, mode and model."""
    with _open(db, store) as s:
        where, params = _where((("r.benchmark", benchmark), ("r.mode", mode), ("c.run_id", run_id)))
        sql = ("SELECT r.benchmark, r.mode, r.model, c.* FROM cases c JOIN runs r USING (run_id)"
               + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY r.benchmark, r.mode, c.ordinal, c.case_id")
        return s.df(sql, params)


def scores_df(benchmark: str | None = None, mode: str | None = None, *, metric: str | None = None,
              db: str | Path | None = None, store: ResultStore | None = None) -> pd.DataFrame:
    """Scores joined with run and case status (failed cases have no score rows)."""
    with _open(db, store) as s:
        where, params = _where((("r.benchmark", benchmark), ("r.mode", mode), ("sc.metric", metric)))
        sql = ("SELECT r.benchmark, r.mode, r.model, sc.*, c.status FROM scores sc JOIN runs r USING (run_id) "
               "JOIN cases c ON c.run_id = sc.run_id AND c.case_id = sc.case_id"
               + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY r.benchmark, r.mode, sc.case_id, sc.metric")
        return s.df(sql, params)


def calls_df(benchmark: str | None = None, mode: str | None = None, *, db: str | Path | None = None,
             store: ResultStore | None = None) -> pd.DataFrame:
    """Every recorded model call (purpose, tokens, latency, cache hit) with its run's benchmark and mode."""
    with _open(db, store) as s:
        where, params = _where((("r.benchmark", benchmark), ("r.mode", mode)))
        sql = ("SELECT r.benchmark, r.mode, k.* FROM calls k JOIN runs r USING (run_id)"
               + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY r.benchmark, r.mode, k.case_id, k.seq")
        return s.df(sql, params)


def retention_df(benchmark: str | None = None, arm: str | None = None, *, delivery: str | None = None,
                 db: str | Path | None = None, store: ResultStore | None = None) -> pd.DataFrame:
    """The LLM-free retention rows of ``python -m agentlab.bench retention``: one per benchmark,
    delivery, budget, arm and case (columns in :mod:`agentlab.bench.store.retention`).

    Empty, with the columns, when nothing was measured yet. ``chunk_turns`` is missing where it
    does not apply (turn delivery, or whole-session reads).
    """
    from agentlab.bench.store.retention import read_retention

    with _open(db, store) as s:
        return read_retention(s.conn, benchmark=benchmark, arm=arm, delivery=delivery)


def trajectory_retention_df(dataset: str | None = None, arm: str | None = None, *, db: str | Path | None = None,
                            store: ResultStore | None = None) -> pd.DataFrame:
    """The rows of ``python -m agentlab.bench retention trajectories``: one per dataset, budget, arm and
    recorded trajectory (columns in :mod:`agentlab.bench.store.trajectories`).

    Empty, with the columns, when nothing was measured yet. ``hidden`` is a JSON list of
    (step index, support text); ``n_hidden`` its length.
    """
    from agentlab.bench.store.trajectories import read_trajectory_retention

    with _open(db, store) as s:
        return read_trajectory_retention(s.conn, dataset=dataset, arm=arm)


def prompt_cache_df(measure: str | None = None, arm: str | None = None, *, db: str | Path | None = None,
                    store: ResultStore | None = None) -> pd.DataFrame:
    """The prompt-cache figures of the retention rows measured with ``--cache-profile``: one per measure
    (``retention`` or ``trajectories``), benchmark or dataset, delivery, budget, arm, case and profile
    (columns in :mod:`agentlab.bench.store.cache`).

    Empty, with the columns, when nothing was stored yet. ``chunk_turns`` is missing where it does
    not apply; the costs are missing when no price was resolved.
    """
    from agentlab.bench.store.cache import read_prompt_cache

    with _open(db, store) as s:
        return read_prompt_cache(s.conn, measure=measure, arm=arm)


def league_df(benchmark: str | None = None, *, league_id: str | None = None, db: str | Path | None = None,
              store: ResultStore | None = None) -> pd.DataFrame:
    """The stored league tables of ``python -m agentlab.bench league``: one row per league, arm and metric.

    Stable columns: ``league_id, benchmark, arm, role, partner, n_ok, n_failed, prompt_savings,
    peak_prompt_tokens_mean, peak_prompt_tokens_max, summary_calls, summary_tokens, metric, delta,
    ci_low, ci_high, p_value, recovery, pareto, evidence_kept`` (then the run ids, intervals and
    counts of :data:`agentlab.bench.league.store.LEAGUE_COLUMNS`). Empty, with the columns, before any league.
    """
    from agentlab.bench.league.store import read_league

    with _open(db, store) as s:
        return read_league(s, benchmark=benchmark, league_id=league_id)


def mode_means_df(benchmark: str, *, db: str | Path | None = None, store: ResultStore | None = None) -> pd.DataFrame:
    """Mean of every metric per run (each (mode, variant) its own row); failed cases count as 0."""
    with _open(db, store) as s:
        if not s.has_table("report_runs"):
            # The means read the run list the derived tables keep; build it when the file allows.
            try:
                s.rebuild_derived()
            except Exception as exc:  # a read-only file
                raise RuntimeError("the derived tables have not been built: call analysis.rebuild(db) or run "
                                   f"`python -m agentlab.bench report {benchmark}` first") from exc
        return s.df(MODE_MEANS_SQL, [benchmark])


def token_savings_df(benchmark: str | None = None, mode: str | None = None, *, level: str | None = None,
                     variant: str | None = None, db: str | Path | None = None, store: ResultStore | None = None,
                     rebuild: bool = False) -> pd.DataFrame:
    """Per-case (``level='case'``) and aggregate (``level='aggregate'``) token savings, one run per row
    group; aggregate rows carry the interval and test of ``prompt_savings``.
    """
    with _open(db, store, writable=rebuild) as s:
        if rebuild:
            s.rebuild_derived()
        return _select(s, "token_savings", {"benchmark": benchmark, "mode": mode, "level": level, "variant": variant},
                       "benchmark, model, mode, variant, run_id, level, case_id")


def quality_loss_df(benchmark: str | None = None, mode: str | None = None, *, metric: str | None = None,
                    variant: str | None = None, db: str | Path | None = None, store: ResultStore | None = None,
                    rebuild: bool = False) -> pd.DataFrame:
    """Each (mode, variant) run vs its baseline run per metric: means, ``delta`` with its interval and p-value."""
    with _open(db, store, writable=rebuild) as s:
        if rebuild:
            s.rebuild_derived()
        return _select(s, "quality_loss", {"benchmark": benchmark, "mode": mode, "metric": metric, "variant": variant},
                       "benchmark, model, mode, variant, run_id, metric")


def recovery_df(benchmark: str | None = None, *, metric: str | None = None, variant: str | None = None,
                db: str | Path | None = None, store: ResultStore | None = None, rebuild: bool = False) -> pd.DataFrame:
    """Recovery of each recovered-mode run vs its lossy and baseline partners, with its interval."""
    with _open(db, store, writable=rebuild) as s:
        if rebuild:
            s.rebuild_derived()
        return _select(s, "recovery", {"benchmark": benchmark, "metric": metric, "variant": variant},
                       "benchmark, model, metric, variant, run_id")


def pareto_df(benchmark: str | None = None, metric: str | None = None, *, db: str | Path | None = None,
              store: ResultStore | None = None, rebuild: bool = False) -> pd.DataFrame:
    """Every compared (mode, variant) run as a point (token savings, quality loss), with intervals.

    ``token_savings`` is the mean of per-case prompt savings vs the baseline run (higher is
    better); ``quality_loss`` is ``baseline_mean − mode_mean`` of ``metric`` (lower is better), so
    its interval is the quality-loss row's ``delta`` interval negated. ``on_frontier``: no other
    run of the same benchmark, model and metric saves at least as much while losing at most as
    much (and is better in one). Points, not intervals, decide the frontier: read it with the bars.
    """
    from agentlab.bench.scoring.stats import pareto_front

    with _open(db, store, writable=rebuild) as s:
        if rebuild:
            s.rebuild_derived()
        savings = _select(s, "token_savings", {"benchmark": benchmark, "level": "aggregate"}, "run_id")
        loss = _select(s, "quality_loss", {"benchmark": benchmark, "metric": metric}, "run_id, metric")
    if savings.empty or loss.empty:
        return pd.DataFrame(columns=PARETO_COLUMNS)
    sv = savings[["run_id", "prompt_savings", "ci_low", "ci_high", "n_pairs"]].rename(columns={
        "prompt_savings": "token_savings", "ci_low": "savings_ci_low", "ci_high": "savings_ci_high",
        "n_pairs": "savings_n_pairs"})
    ql = loss[["benchmark", "model", "mode", "variant", "run_id", "baseline_run_id", "baseline_variant", "metric",
               "delta", "ci_low", "ci_high", "p_value", "n_pairs"]].copy()
    ql["quality_loss"] = 0.0 - ql["delta"]  # 0.0 - x, not -x: no "-0.0" in the tables
    ql["loss_ci_low"] = 0.0 - ql["ci_high"]
    ql["loss_ci_high"] = 0.0 - ql["ci_low"]
    ql = ql.rename(columns={"p_value": "loss_p_value", "n_pairs": "loss_n_pairs"}).drop(columns=["delta", "ci_low", "ci_high"])
    points = ql.merge(sv, on="run_id", how="inner")
    flags = pd.Series(False, index=points.index)
    for _, group in points.groupby(["benchmark", "model", "metric"]):
        values = [None if pd.isna(v) else float(v) for v in group["token_savings"]]
        losses = [None if pd.isna(v) else float(v) for v in group["quality_loss"]]
        flags.loc[group.index] = pareto_front(values, losses)
    points["on_frontier"] = flags.astype(bool)
    return points[PARETO_COLUMNS].sort_values(["benchmark", "model", "metric", "token_savings"]).reset_index(drop=True)


PARETO_COLUMNS = ["benchmark", "model", "metric", "mode", "variant", "run_id", "baseline_variant", "baseline_run_id",
                  "token_savings", "savings_ci_low", "savings_ci_high", "savings_n_pairs", "quality_loss",
                  "loss_ci_low", "loss_ci_high", "loss_p_value", "loss_n_pairs", "on_frontier"]


def variant_comparison_df(benchmark: str, variant_a: str, variant_b: str, *, mode: str | None = None,
                          metric: str | None = None, db: str | Path | None = None,
                          store: ResultStore | None = None) -> pd.DataFrame:
    """Variant B against variant A of the same mode and model, paired on the cases both hold:
    mean of ``B − A`` per metric with its bootstrap interval and Wilcoxon p-value.

    Failed cases score 0 and NULL scores are left out, as in ``quality_loss``. One row per
    (model, mode, metric) where both variants have a run (the run with the most ok cases when a
    variant has several, e.g. on two data subsets — its id is in the row).
    """
    from agentlab.bench.scoring.stats import paired_difference

    with _open(db, store) as s:
        runs = runs_df(benchmark, mode, store=s)
        if runs.empty:
            return pd.DataFrame()
        scores = s.df(
            "SELECT c.run_id, c.case_id, m.metric, CASE WHEN c.status = 'ok' THEN sc.value ELSE 0.0 END AS value "
            "FROM cases c JOIN (SELECT DISTINCT run_id, metric FROM scores) m ON m.run_id = c.run_id "
            "LEFT JOIN scores sc ON sc.run_id = c.run_id AND sc.case_id = c.case_id AND sc.metric = m.metric "
            "WHERE c.run_id IN (SELECT run_id FROM runs WHERE benchmark = ?)", [benchmark])
    rows = []
    for (model, run_mode), group in runs.groupby(["model", "mode"]):
        picked = {}
        for name in (variant_a, variant_b):
            mine = group[group["variant"] == name]
            if mine.empty:
                break
            picked[name] = mine.sort_values(["n_ok", "started"]).iloc[-1]["run_id"]
        if len(picked) < 2:
            continue
        a = scores[scores["run_id"] == picked[variant_a]]
        b = scores[scores["run_id"] == picked[variant_b]]
        both = a.merge(b, on=["case_id", "metric"], suffixes=("_a", "_b")).dropna(subset=["value_a", "value_b"])
        for name, pairs in both.groupby("metric"):
            if metric is not None and name != metric:
                continue
            result = paired_difference(pairs["value_a"].tolist(), pairs["value_b"].tolist())
            rows.append({"benchmark": benchmark, "model": model, "mode": run_mode, "metric": name,
                         "variant_a": variant_a, "run_a": picked[variant_a], "variant_b": variant_b,
                         "run_b": picked[variant_b], "mean_a": float(pairs["value_a"].mean()),
                         "mean_b": float(pairs["value_b"].mean()), "delta": result.estimate,
                         **result.as_columns()})
    return pd.DataFrame(rows)


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
