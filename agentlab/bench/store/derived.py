"""The derived tables of the results store, rebuilt from the raw ones by ``report``.

Derived tables (rebuilt by :meth:`agentlab.bench.store.results.ResultStore.rebuild_derived`, i.e. by
``report``, with :func:`write_derived`). Every run is its own row — a run is a (benchmark, mode,
model, judge, **variant**) on one dataset and task version, and nothing is dropped because a newer
run exists. ``report_runs`` pairs each run with the run it is compared with
(:func:`agentlab.bench.scoring.pairing.pair_runs`: the baseline-mode run of the same model, judge, data and task
version whose variant settings are the largest subset of the run's own, e.g. the ``default``
long-context run for every ``summary.*`` variant); comparisons are paired on the cases both runs
hold, so a partial run is compared on its own cases and the row counts them (``n_cases``,
``n_pairs``). Each savings, loss and recovery row carries a paired bootstrap 95 % interval and a
Wilcoxon p-value (``ci_low``, ``ci_high``, ``p_value``, ``n_pairs``, ``stats_method``,
``stats_seed``, ``stats_note``; see :mod:`agentlab.bench.scoring.stats`).

* ``mode_roles``      the per-benchmark baseline / lossy / recovered mode names (``Task.mode_roles``).
* ``report_runs``     run id, variant, role, baseline (and lossy) run id and variant, pairing rule.
* ``token_savings``   per case (``level = 'case'``) and per mode (``level = 'aggregate'``): prompt
                      tokens of the ``answer`` calls vs the baseline mode, as the mean of per-case
                      savings AND the ratio of totals; total (prompt + completion) savings; and the
                      same with summary-generation tokens added to both sides (the honest cost).
                      A case's answer tokens are the sum over all its answer calls; the ``*_last``
                      columns take only the last answer call's prompt, the rule of the published
                      summary benchmark; ``published_token_rule`` names the rule the benchmark's
                      published report uses (``Task.published_token_rule``).
                      Only cases that are ``ok`` in both runs are compared. The interval and test
                      of an aggregate row are those of ``prompt_savings`` (mean of per-case savings).
* ``quality_loss``    per metric, each mode vs its benchmark's baseline mode on the cases both runs
                      attempted. A failed case scores 0 (it stays in the denominator); a score that
                      could not be computed (NULL, e.g. a judge parse failure) is left out and counted.
* ``recovery``        per metric, (recovered − lossy) / (baseline − lossy) on the cases all three
                      runs attempted (``recovery``, ``n_cases``; failed cases count 0) and on those
                      of them whose baseline answered (``recovery_baseline_ok``, ``n_baseline_ok``),
                      with per-case wins / losses / ties of recovered vs lossy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentlab.bench.facts import ModeRoles
from agentlab.bench.scoring.pairing import pair_runs
from agentlab.bench.scoring.queries import DERIVED_TABLES_SQL, QUALITY_PAIRS_SQL, RECOVERY_TRIPLES_SQL


def write_derived(conn: Any, roles: Mapping[str, ModeRoles], token_rules: Mapping[str, str]) -> None:
    """Recreate the derived tables on ``conn`` in one transaction (see :meth:`agentlab.bench.store.results.ResultStore.rebuild_derived`)."""
    conn.execute("BEGIN TRANSACTION")
    try:
        conn.execute(
            "CREATE OR REPLACE TABLE mode_roles (benchmark VARCHAR PRIMARY KEY, baseline VARCHAR, "
            "lossy VARCHAR, recovered VARCHAR, published_token_rule VARCHAR)"
        )
        if roles:
            conn.executemany("INSERT INTO mode_roles VALUES (?, ?, ?, ?, ?)",
                             [[b, r.baseline, r.lossy, r.recovered, token_rules.get(b)]
                              for b, r in roles.items()])
        _write_report_runs(conn, roles)
        for statement in DERIVED_TABLES_SQL:
            conn.execute(statement)
        _attach_stats(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _write_report_runs(conn: Any, roles: Mapping[str, ModeRoles]) -> None:
    rows = conn.execute(
        "SELECT r.run_id, r.benchmark, r.mode, r.model, r.judge_model, r.dataset_sha256, r.task_version, "
        "r.status, r.started, r.variant, r.variant_settings, "
        "(SELECT count(*) FROM cases c WHERE c.run_id = r.run_id AND c.status = 'ok') AS n_ok, "
        "json_extract_string(r.config, '$.context_window') AS context_window, "
        "json_extract_string(r.config, '$.context_budget') AS context_budget "
        "FROM runs r").fetchall()
    names = ["run_id", "benchmark", "mode", "model", "judge_model", "dataset_sha256", "task_version", "status",
             "started", "variant", "variant_settings", "n_ok", "context_window", "context_budget"]
    runs = []
    for row in rows:
        run = dict(zip(names, row, strict=True))
        raw = run["variant_settings"]
        run["variant_settings"] = json.loads(raw) if isinstance(raw, str) and raw else (raw or {})
        runs.append(run)
    conn.execute(
        "CREATE OR REPLACE TABLE report_runs (run_id VARCHAR PRIMARY KEY, variant VARCHAR, role VARCHAR, "
        "baseline_run_id VARCHAR, baseline_variant VARCHAR, lossy_run_id VARCHAR, lossy_variant VARCHAR, "
        "pairing VARCHAR)")
    pairs = pair_runs(runs, roles)
    if pairs:
        conn.executemany(
            "INSERT INTO report_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [[p["run_id"], p["variant"], p["role"], p["baseline_run_id"], p["baseline_variant"],
              p["lossy_run_id"], p["lossy_variant"], p["pairing"]] for p in pairs])


def _attach_stats(conn: Any) -> None:
    """Add ``ci_low``, ``ci_high``, ``p_value``, ``n_pairs``, ``stats_*`` to the three tables."""
    import agentlab.bench.scoring.stats as stats
    from agentlab.bench.scoring.recovery_rule import recovery_columns

    savings = conn.execute(
        # Ordered: a seeded bootstrap resamples by position, so its interval depends on the order of the values.
        "SELECT run_id, prompt_savings FROM token_savings WHERE level = 'case' AND prompt_savings IS NOT NULL "
        "ORDER BY run_id, case_id").df()
    rows = [{"run_id": run_id, **stats.mean_with_ci(group["prompt_savings"].tolist()).as_columns()}
            for run_id, group in savings.groupby("run_id", sort=True)]
    _join_stats(conn, "token_savings", ["run_id"], rows, "level = 'aggregate'")

    pairs = conn.execute(QUALITY_PAIRS_SQL).df()
    rows = [{"run_id": run_id, "metric": metric,
             **stats.paired_difference(g["baseline_value"].tolist(), g["mode_value"].tolist()).as_columns()}
            for (run_id, metric), g in pairs.groupby(["run_id", "metric"], sort=True)]
    _join_stats(conn, "quality_loss", ["run_id", "metric"], rows)

    triples = conn.execute(RECOVERY_TRIPLES_SQL).df()
    rows = []
    for (run_id, metric), g in triples.groupby(["run_id", "metric"], sort=True):
        result = recovery_columns(g["baseline_value"].tolist(), g["lossy_value"].tolist(),
                                  g["recovered_value"].tolist(), "the lossy run")
        if (g["baseline_status"] == "failed").all():
            # The table's recovery is undefined here (no baseline answered); so is its interval.
            result.update(ci_low=None, ci_high=None,
                          stats_note="no baseline case answered: recovery undefined, no interval")
        rows.append({"run_id": run_id, "metric": metric, **result})
    _join_stats(conn, "recovery", ["run_id", "metric"], rows)


def _join_stats(conn: Any, table: str, keys: list[str], rows: list[dict[str, Any]], only: str | None = None) -> None:
    import pandas as pd

    columns = [*keys, "ci_low", "ci_high", "p_value", "n_pairs", "stats_method", "stats_seed", "stats_note"]
    frame = pd.DataFrame(rows, columns=columns)
    conn.register("_agentlab_stats", frame)
    try:
        on = " AND ".join(f"s.{k} = t.{k}" for k in keys)
        when = f" AND t.{only}" if only else ""
        conn.execute(
            f"CREATE OR REPLACE TABLE {table} AS SELECT t.*, "
            "CAST(s.ci_low AS DOUBLE) AS ci_low, CAST(s.ci_high AS DOUBLE) AS ci_high, "
            "CAST(s.p_value AS DOUBLE) AS p_value, CAST(s.n_pairs AS BIGINT) AS n_pairs, "
            "CAST(s.stats_method AS VARCHAR) AS stats_method, CAST(s.stats_seed AS BIGINT) AS stats_seed, "
            "CAST(s.stats_note AS VARCHAR) AS stats_note "
            f"FROM {table} t LEFT JOIN _agentlab_stats s ON {on}{when}")
    finally:
        conn.unregister("_agentlab_stats")
