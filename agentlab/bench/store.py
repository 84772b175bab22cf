"""The results store: one DuckDB file (``results/agentlab.duckdb`` by default).

Raw tables (written by the executor):

* ``runs``        one row per run; ``run_id`` = hash of the config (benchmark, mode, model, judge,
                  settings, dataset sha256, task version), so rerunning the same command resumes it.
* ``cases``       one row per (run, case): status ``ok`` / ``failed``, prediction, reference,
                  error (+ code such as ``context_length``), metadata JSON, latency.
* ``calls``       every model call of a case: purpose (answer/summary/judge/memory/tool/other),
                  model, prompt/completion/cached tokens, latency, cache hit, error, and the
                  HTTP ``attempts`` it took (a retried 429/5xx/timeout/garbage 200 shows as > 1).
* ``scores``      (run, case, metric) → value (NULL when it could not be computed), version, detail.
* ``compactions`` request-side compaction stats per case: results compacted, tokens before/after.

A case and everything about it is written in ONE transaction; a retried case replaces its old
rows in that same transaction, so a case is never half-written or duplicated.

Derived tables (rebuilt by :meth:`ResultStore.rebuild_derived`, i.e. by ``report``). Every run is its
own row — a run is a (benchmark, mode, model, judge, **variant**) on one dataset and task version,
and nothing is dropped because a newer run exists. ``report_runs`` pairs each run with the run it is
compared with (:func:`pair_runs`: the baseline-mode run of the same model, judge, data and task
version whose variant settings are the largest subset of the run's own, e.g. the ``default``
long-context run for every ``summary.*`` variant); comparisons are paired on the cases both runs
hold, so a partial run is compared on its own cases and the row counts them (``n_cases``,
``n_pairs``). Each savings, loss and recovery row carries a paired bootstrap 95 % interval and a
Wilcoxon p-value (``ci_low``, ``ci_high``, ``p_value``, ``n_pairs``, ``stats_method``,
``stats_seed``, ``stats_note``; see :mod:`agentlab.bench.stats`).

* ``mode_roles``      the per-benchmark baseline / lossy / recovered mode names (from config).
* ``report_runs``     run id, variant, role, baseline (and lossy) run id and variant, pairing rule.
* ``token_savings``   per case (``level = 'case'``) and per mode (``level = 'aggregate'``): prompt
                      tokens of the ``answer`` calls vs the baseline mode, as the mean of per-case
                      savings AND the ratio of totals; total (prompt + completion) savings; and the
                      same with summary-generation tokens added to both sides (the honest cost).
                      A case's answer tokens are the sum over all its answer calls; the ``*_last``
                      columns take only the last answer call's prompt, the rule of the published
                      summary benchmark; ``published_token_rule`` names the rule the benchmark's
                      published report uses (``config.PUBLISHED_TOKEN_RULES``).
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
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlab.bench.config import DEFAULT_VARIANT, MODE_ROLES, PUBLISHED_TOKEN_RULES, ModeRoles
from agentlab.bench.metrics import Score
from agentlab.duckdb_files import connect
from agentlab.model.base import CallRecord

DEFAULT_DB = Path("results") / "agentlab.duckdb"
#: The variant of a run stored before variants existed (rerunning its command labels it).
LEGACY_VARIANT = "legacy"
#: Two per-case values closer than this count as a tie in the recovery table.
TIE_EPSILON = 1e-9

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    benchmark VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    config JSON,
    model VARCHAR,
    judge_model VARCHAR,
    dataset_sha256 VARCHAR,
    code_version VARCHAR,
    task_version VARCHAR,
    status VARCHAR,            -- running | finished | interrupted | failed
    smoke_test BOOLEAN,
    cases_selected INTEGER,
    started TIMESTAMP,
    finished TIMESTAMP,
    variant VARCHAR,           -- --variant NAME, or the settings that differ from the benchmark's file
    variant_settings JSON      -- {"section.field": value} of those settings
);
-- Files written before variants existed: the columns are added, and report fills them in.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS variant VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS variant_settings JSON;
CREATE TABLE IF NOT EXISTS cases (
    run_id VARCHAR NOT NULL,
    case_id VARCHAR NOT NULL,
    ordinal INTEGER,
    status VARCHAR NOT NULL,   -- ok | failed
    prediction VARCHAR,
    reference VARCHAR,
    error VARCHAR,
    error_code VARCHAR,
    metadata JSON,
    latency_ms DOUBLE,
    written TIMESTAMP,
    PRIMARY KEY (run_id, case_id)
);
CREATE TABLE IF NOT EXISTS calls (
    run_id VARCHAR NOT NULL,
    case_id VARCHAR NOT NULL,
    seq INTEGER NOT NULL,
    purpose VARCHAR,
    model VARCHAR,
    prompt_tokens BIGINT,
    completion_tokens BIGINT,
    cached_tokens BIGINT,
    latency_ms DOUBLE,
    cache_hit BOOLEAN,
    error VARCHAR,
    attempts INTEGER,          -- HTTP attempts (transient faults retried); 0 = replayed from the cache
    PRIMARY KEY (run_id, case_id, seq)
);
CREATE TABLE IF NOT EXISTS scores (
    run_id VARCHAR NOT NULL,
    case_id VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    value DOUBLE,
    version VARCHAR,
    detail VARCHAR,
    PRIMARY KEY (run_id, case_id, metric)
);
CREATE TABLE IF NOT EXISTS compactions (
    run_id VARCHAR NOT NULL,
    case_id VARCHAR NOT NULL,
    seq INTEGER NOT NULL,
    results_compacted INTEGER,
    tokens_before BIGINT,
    tokens_after BIGINT,
    PRIMARY KEY (run_id, case_id, seq)
);
"""

# Columns added after a table's first release: files written before them gain the column (NULL for
# old rows) when they are opened for writing.
_MIGRATIONS = """
ALTER TABLE calls ADD COLUMN IF NOT EXISTS attempts INTEGER;
"""

RAW_TABLES = ("runs", "cases", "calls", "scores", "compactions")
DERIVED_TABLES = ("mode_roles", "report_runs", "token_savings", "quality_loss", "recovery")


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    benchmark: str
    mode: str
    config: Mapping[str, Any]
    model: str
    judge_model: str | None
    dataset_sha256: str
    code_version: str
    task_version: str
    smoke_test: bool = False
    cases_selected: int | None = None
    #: ``--variant NAME`` or the name derived from ``variant_settings`` (``default`` when none differ).
    variant: str = DEFAULT_VARIANT
    #: ``{"section.field": value}`` of the settings that differ from the benchmark's file.
    variant_settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CompactionRow:
    results_compacted: int
    tokens_before: int
    tokens_after: int


@dataclass
class CaseRecord:
    """Everything stored about one attempted case."""

    run_id: str
    case_id: str
    status: str  # "ok" | "failed"
    ordinal: int = 0
    prediction: str | None = None
    reference: str | None = None
    error: str | None = None
    error_code: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    latency_ms: float = 0.0
    calls: Sequence[CallRecord] = ()
    scores: Sequence[Score] = ()
    compactions: Sequence[CompactionRow] = ()


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _ts(epoch: float | None) -> Any:
    import datetime as _dt

    return None if epoch is None else _dt.datetime.fromtimestamp(epoch)


class ResultStore:
    """A connection to the results file; safe to share between asyncio tasks of one process."""

    def __init__(self, path: str | Path | None = DEFAULT_DB, *, read_only: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        target = ":memory:"
        if self.path is not None:
            if not read_only:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            target = str(self.path)
        self.conn = connect(None if self.path is None else target, read_only=read_only,
                            what="results database", fix="pass another --db")
        self._lock = threading.Lock()
        if not read_only:
            self.conn.execute(_SCHEMA)
            self.conn.execute(_MIGRATIONS)

    # ------------------------------------------------------------------------- lifecycle

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ runs

    def start_run(self, run: RunInfo) -> None:
        """Insert the run, or mark an existing one (a resume) as running again."""
        with self._lock:
            exists = self.conn.execute("SELECT 1 FROM runs WHERE run_id = ?", [run.run_id]).fetchone()
            if exists:
                self.conn.execute(
                    "UPDATE runs SET status = 'running', started = ?, finished = NULL, code_version = ?, "
                    "smoke_test = ?, cases_selected = GREATEST(COALESCE(cases_selected, 0), ?), "
                    "variant = ?, variant_settings = ? WHERE run_id = ?",
                    [_ts(time.time()), run.code_version, run.smoke_test, run.cases_selected or 0, run.variant,
                     _json(dict(run.variant_settings)), run.run_id],
                )
            else:
                self.conn.execute(
                    "INSERT INTO runs (run_id, benchmark, mode, config, model, judge_model, dataset_sha256, "
                    "code_version, task_version, status, smoke_test, cases_selected, started, finished, variant, "
                    "variant_settings) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, NULL, ?, ?)",
                    [run.run_id, run.benchmark, run.mode, _json(dict(run.config)), run.model, run.judge_model,
                     run.dataset_sha256, run.code_version, run.task_version, run.smoke_test,
                     run.cases_selected, _ts(time.time()), run.variant, _json(dict(run.variant_settings))],
                )

    def finish_run(self, run_id: str, status: str) -> None:
        with self._lock:
            self.conn.execute("UPDATE runs SET status = ?, finished = ? WHERE run_id = ?",
                              [status, _ts(time.time()), run_id])

    def run_status(self, run_id: str) -> str | None:
        with self._lock:
            row = self.conn.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
        return None if row is None else str(row[0])

    def completed_case_ids(self, run_id: str) -> set[str]:
        """Cases stored with status ``ok`` (a rerun skips them; failed ones are retried)."""
        with self._lock:
            rows = self.conn.execute("SELECT case_id FROM cases WHERE run_id = ? AND status = 'ok'", [run_id]).fetchall()
        return {r[0] for r in rows}

    # ----------------------------------------------------------------------------- cases

    def write_case(self, record: CaseRecord) -> None:
        """Case, calls, scores and compactions in one transaction (replacing an earlier attempt)."""
        key = [record.run_id, record.case_id]
        with self._lock:
            self.conn.execute("BEGIN TRANSACTION")
            try:
                for table in ("cases", "calls", "scores", "compactions"):
                    self.conn.execute(f"DELETE FROM {table} WHERE run_id = ? AND case_id = ?", key)
                self.conn.execute(
                    "INSERT INTO cases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [record.run_id, record.case_id, record.ordinal, record.status, record.prediction,
                     record.reference, record.error, record.error_code, _json(dict(record.metadata)),
                     record.latency_ms, _ts(time.time())],
                )
                if record.calls:
                    self.conn.executemany(
                        "INSERT INTO calls (run_id, case_id, seq, purpose, model, prompt_tokens, completion_tokens, "
                        "cached_tokens, latency_ms, cache_hit, error, attempts) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [[*key, i, c.purpose, c.model, c.usage.prompt_tokens, c.usage.completion_tokens,
                          c.usage.cached_tokens, c.latency_ms, c.cache_hit, c.error, c.attempts]
                         for i, c in enumerate(record.calls)],
                    )
                if record.scores:
                    seen: set[str] = set()
                    for s in record.scores:
                        if s.metric in seen:
                            raise ValueError(f"case {record.case_id}: metric {s.metric!r} scored twice")
                        seen.add(s.metric)
                    self.conn.executemany(
                        "INSERT INTO scores VALUES (?, ?, ?, ?, ?, ?)",
                        [[*key, s.metric, s.value, s.version, s.detail] for s in record.scores],
                    )
                if record.compactions:
                    self.conn.executemany(
                        "INSERT INTO compactions VALUES (?, ?, ?, ?, ?, ?)",
                        [[*key, i, c.results_compacted, c.tokens_before, c.tokens_after]
                         for i, c in enumerate(record.compactions)],
                    )
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    # ------------------------------------------------------------------------------ reads

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        with self._lock:
            return self.conn.execute(sql, params or []).fetchall()

    def df(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """A pandas DataFrame of a query."""
        with self._lock:
            return self.conn.execute(sql, params or []).df()

    def has_table(self, name: str) -> bool:
        rows = self.query("SELECT 1 FROM information_schema.tables WHERE table_name = ?", [name])
        return bool(rows)

    def write_frame(self, name: str, frame: Any) -> None:
        """Replace table ``name`` with a pandas DataFrame (a benchmark's own report tables)."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"table name {name!r}: letters, digits and underscores only")
        if name in RAW_TABLES or name in DERIVED_TABLES:
            raise ValueError(f"table name {name!r} is one of the store's own tables")
        with self._lock:
            self.conn.register("_agentlab_frame", frame)
            try:
                self.conn.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM _agentlab_frame')
            finally:
                self.conn.unregister("_agentlab_frame")

    # --------------------------------------------------------------------------- derived

    def rebuild_derived(self, roles: Mapping[str, ModeRoles] | None = None) -> None:
        """Recreate ``mode_roles``, ``report_runs``, ``token_savings``, ``quality_loss`` and ``recovery``.

        ``report_runs`` pairs every run with the run it is compared with (:func:`pair_runs`); the
        SQL of the other tables reads only that pairing, so which runs meet is decided in one place.
        Then each savings, loss and recovery row gets its paired interval and p-value (:mod:`stats`).
        """
        roles = dict(MODE_ROLES if roles is None else roles)
        with self._lock:
            self.conn.execute("BEGIN TRANSACTION")
            try:
                self.conn.execute(
                    "CREATE OR REPLACE TABLE mode_roles (benchmark VARCHAR PRIMARY KEY, baseline VARCHAR, "
                    "lossy VARCHAR, recovered VARCHAR, published_token_rule VARCHAR)"
                )
                if roles:
                    self.conn.executemany("INSERT INTO mode_roles VALUES (?, ?, ?, ?, ?)",
                                          [[b, r.baseline, r.lossy, r.recovered, PUBLISHED_TOKEN_RULES.get(b)]
                                           for b, r in roles.items()])
                self._write_report_runs(roles)
                for statement in _DERIVED_SQL:
                    self.conn.execute(statement)
                self._attach_stats()
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    def _write_report_runs(self, roles: Mapping[str, ModeRoles]) -> None:
        rows = self.conn.execute(
            "SELECT r.run_id, r.benchmark, r.mode, r.model, r.judge_model, r.dataset_sha256, r.task_version, "
            "r.status, r.started, r.variant, r.variant_settings, "
            "(SELECT count(*) FROM cases c WHERE c.run_id = r.run_id AND c.status = 'ok') AS n_ok "
            "FROM runs r").fetchall()
        names = ["run_id", "benchmark", "mode", "model", "judge_model", "dataset_sha256", "task_version", "status",
                 "started", "variant", "variant_settings", "n_ok"]
        runs = []
        for row in rows:
            run = dict(zip(names, row, strict=True))
            raw = run["variant_settings"]
            run["variant_settings"] = json.loads(raw) if isinstance(raw, str) and raw else (raw or {})
            runs.append(run)
        self.conn.execute(
            "CREATE OR REPLACE TABLE report_runs (run_id VARCHAR PRIMARY KEY, variant VARCHAR, role VARCHAR, "
            "baseline_run_id VARCHAR, baseline_variant VARCHAR, lossy_run_id VARCHAR, lossy_variant VARCHAR, "
            "pairing VARCHAR)")
        pairs = pair_runs(runs, roles)
        if pairs:
            self.conn.executemany(
                "INSERT INTO report_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [[p["run_id"], p["variant"], p["role"], p["baseline_run_id"], p["baseline_variant"],
                  p["lossy_run_id"], p["lossy_variant"], p["pairing"]] for p in pairs])

    def _attach_stats(self) -> None:
        """Add ``ci_low``, ``ci_high``, ``p_value``, ``n_pairs``, ``stats_*`` to the three tables."""
        from agentlab.bench import stats

        savings = self.conn.execute(
            "SELECT run_id, prompt_savings FROM token_savings WHERE level = 'case' AND prompt_savings IS NOT NULL"
        ).df()
        rows = [{"run_id": run_id, **stats.mean_with_ci(group["prompt_savings"].tolist()).as_columns()}
                for run_id, group in savings.groupby("run_id", sort=True)]
        self._join_stats("token_savings", ["run_id"], rows, "level = 'aggregate'")

        pairs = self.conn.execute(_QUALITY_PAIRS_SQL).df()
        rows = [{"run_id": run_id, "metric": metric,
                 **stats.paired_difference(g["baseline_value"].tolist(), g["mode_value"].tolist()).as_columns()}
                for (run_id, metric), g in pairs.groupby(["run_id", "metric"], sort=True)]
        self._join_stats("quality_loss", ["run_id", "metric"], rows)

        triples = self.conn.execute(_RECOVERY_TRIPLES_SQL).df()
        rows = []
        for (run_id, metric), g in triples.groupby(["run_id", "metric"], sort=True):
            result = stats.recovery_ratio(g["baseline_value"].tolist(), g["lossy_value"].tolist(),
                                          g["recovered_value"].tolist()).as_columns()
            if (g["baseline_status"] == "failed").all():
                # The table's recovery is undefined here (no baseline answered); so is its interval.
                result.update(ci_low=None, ci_high=None,
                              stats_note="no baseline case answered: recovery undefined, no interval")
            rows.append({"run_id": run_id, "metric": metric, **result})
        self._join_stats("recovery", ["run_id", "metric"], rows)

    def _join_stats(self, table: str, keys: list[str], rows: list[dict[str, Any]], only: str | None = None) -> None:
        import pandas as pd

        columns = [*keys, "ci_low", "ci_high", "p_value", "n_pairs", "stats_method", "stats_seed", "stats_note"]
        frame = pd.DataFrame(rows, columns=columns)
        self.conn.register("_agentlab_stats", frame)
        try:
            on = " AND ".join(f"s.{k} = t.{k}" for k in keys)
            when = f" AND t.{only}" if only else ""
            self.conn.execute(
                f"CREATE OR REPLACE TABLE {table} AS SELECT t.*, "
                "CAST(s.ci_low AS DOUBLE) AS ci_low, CAST(s.ci_high AS DOUBLE) AS ci_high, "
                "CAST(s.p_value AS DOUBLE) AS p_value, CAST(s.n_pairs AS BIGINT) AS n_pairs, "
                "CAST(s.stats_method AS VARCHAR) AS stats_method, CAST(s.stats_seed AS BIGINT) AS stats_seed, "
                "CAST(s.stats_note AS VARCHAR) AS stats_note "
                f"FROM {table} t LEFT JOIN _agentlab_stats s ON {on}{when}")
        finally:
            self.conn.unregister("_agentlab_stats")


# ------------------------------------------------------------------------------ pairing

#: Role of a run's mode in its benchmark's comparisons.
ROLE_BASELINE, ROLE_LOSSY, ROLE_RECOVERED, ROLE_OTHER = "baseline", "lossy", "recovered", "other"


def _role(mode: str, roles: ModeRoles | None) -> str:
    if roles is None:
        return ROLE_OTHER
    return {roles.baseline: ROLE_BASELINE, roles.lossy: ROLE_LOSSY, roles.recovered: ROLE_RECOVERED}.get(mode, ROLE_OTHER)


def _best_partner(run: Mapping[str, Any], mode: str | None, runs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The ``mode`` run ``run`` is compared with: same benchmark, model, judge (or either unjudged: the
    judge's metrics then simply do not pair), data and task version, whose variant settings are a subset of ``run``'s; the most specific such run wins (its own
    variant name first, then the most shared settings, then ``default``), and among equals the one
    with the most ok cases, then a finished one, then the newest — so a newer partial run never
    displaces a fuller one."""
    if mode is None:
        return None
    mine = dict(run["variant_settings"] or {})
    candidates = [
        r for r in runs
        if r["mode"] == mode and r["benchmark"] == run["benchmark"] and r["model"] == run["model"]
        and (r["judge_model"] == run["judge_model"] or r["judge_model"] is None or run["judge_model"] is None)
        and r["dataset_sha256"] == run["dataset_sha256"]
        and r["task_version"] == run["task_version"]
        and all(k in mine and mine[k] == v for k, v in (r["variant_settings"] or {}).items())
    ]
    if not candidates:
        return None

    def rank(r: Mapping[str, Any]) -> tuple[Any, ...]:
        return (r["variant"] == run["variant"], len(r["variant_settings"] or {}), r["judge_model"] == run["judge_model"],
                r["variant"] == DEFAULT_VARIANT,
                r["n_ok"], r["status"] == "finished", r["started"] or 0, r["run_id"])

    return max(candidates, key=rank)


def pair_runs(runs: Sequence[Mapping[str, Any]], roles: Mapping[str, ModeRoles]) -> list[dict[str, Any]]:
    """Every run, with the baseline run (and for a recovered run, the lossy run) it is compared with.

    Every run is its own row — nothing is replaced because a newer run exists. Two runs of the same
    (mode, variant, model, judge) can only differ in data or task version (``--limit`` is not part of
    a run's id), and each is paired with the baseline on its own data and version. ``pairing`` says
    which rule chose the partner, or why there is none.
    """
    runs = [{**r, "variant": r.get("variant") or LEGACY_VARIANT} for r in runs]
    out = []
    for run in runs:
        mode_roles = roles.get(run["benchmark"])
        role = _role(run["mode"], mode_roles)
        row: dict[str, Any] = {"run_id": run["run_id"], "variant": run["variant"], "role": role,
                               "baseline_run_id": None, "baseline_variant": None, "lossy_run_id": None,
                               "lossy_variant": None, "pairing": None}
        if mode_roles is None:
            row["pairing"] = "no mode roles for this benchmark"
        elif role != ROLE_BASELINE:
            base = _best_partner(run, mode_roles.baseline, runs)
            if base is None:
                row["pairing"] = (f"no {mode_roles.baseline} run of this model and judge on the same data and task "
                                  f"version whose settings are a subset of this variant's")
            else:
                row.update(baseline_run_id=base["run_id"], baseline_variant=base["variant"],
                           pairing="same variant" if base["variant"] == run["variant"] else
                           f"baseline variant {base['variant']!r} (the most specific one this variant extends)")
            if role == ROLE_RECOVERED:
                lossy = _best_partner(run, mode_roles.lossy, runs)
                if lossy is not None:
                    row.update(lossy_run_id=lossy["run_id"], lossy_variant=lossy["variant"])
        out.append(row)
    return out


# Every run with its variant and comparison partners (``report_runs``, written by pair_runs()).
# This is the one place that decides which runs the derived tables compare.
_CURRENT_RUNS = """
current_runs AS (
    SELECT r.* EXCLUDE (variant), p.variant, p.role, p.baseline_run_id, p.baseline_variant,
           p.lossy_run_id, p.lossy_variant
    FROM runs r JOIN report_runs p USING (run_id)
)"""

# Per (current run, case, metric): failed cases score 0; an ok case with a NULL score stays NULL.
# A run's metrics are the ones it scored; a run in which every case failed (e.g. a long context no
# case of which fits a small model's window) scored none, so it takes the metrics that every other
# scored run of the same benchmark and model has (the answer metrics, not a mode's own extras),
# and its failed cases count 0 on them like any failed case.
_CASE_METRIC = """
run_metrics AS (
    SELECT DISTINCT run_id, metric FROM scores
),
scored_runs AS (
    SELECT r.benchmark, r.model, count(*) AS n_runs
    FROM current_runs r WHERE r.run_id IN (SELECT run_id FROM run_metrics)
    GROUP BY ALL
),
shared_metrics AS (
    SELECT r.benchmark, r.model, m.metric
    FROM current_runs r
    JOIN run_metrics m ON m.run_id = r.run_id
    JOIN scored_runs s ON s.benchmark = r.benchmark AND s.model = r.model
    GROUP BY r.benchmark, r.model, m.metric, s.n_runs
    HAVING count(*) = s.n_runs
),
metrics_of_run AS (
    SELECT run_id, metric FROM run_metrics
    UNION ALL
    SELECT r.run_id, sm.metric
    FROM current_runs r JOIN shared_metrics sm ON sm.benchmark = r.benchmark AND sm.model = r.model
    WHERE r.run_id NOT IN (SELECT run_id FROM run_metrics)
      AND r.run_id NOT IN (SELECT run_id FROM cases WHERE status = 'ok')
),
case_metric AS (
    SELECT r.benchmark, r.model, r.mode, r.smoke_test, r.run_id, r.variant, r.baseline_run_id, r.baseline_variant,
           r.lossy_run_id, r.lossy_variant, c.case_id, m.metric, c.status,
           CASE WHEN c.status = 'ok' THEN s.value ELSE 0.0 END AS value
    FROM current_runs r
    JOIN cases c ON c.run_id = r.run_id
    JOIN metrics_of_run m ON m.run_id = r.run_id
    LEFT JOIN scores s ON s.run_id = r.run_id AND s.case_id = c.case_id AND s.metric = m.metric
)"""

_TOKEN_SAVINGS = f"""
CREATE OR REPLACE TABLE token_savings AS
WITH {_CURRENT_RUNS},
case_tokens AS (
    SELECT r.benchmark, r.model, r.mode, r.smoke_test, r.run_id, r.variant, r.baseline_run_id, r.baseline_variant,
        c.case_id, FALSE AS estimated,
        COALESCE(SUM(CASE WHEN k.purpose = 'answer' THEN k.prompt_tokens END), 0) AS answer_prompt,
        COALESCE(SUM(CASE WHEN k.purpose = 'answer' THEN k.prompt_tokens + k.completion_tokens END), 0) AS answer_total,
        COALESCE(arg_max(k.prompt_tokens, k.seq) FILTER (WHERE k.purpose = 'answer' AND k.error IS NULL), 0)
            AS answer_prompt_last,
        COALESCE(SUM(CASE WHEN k.purpose = 'summary' THEN k.prompt_tokens END), 0) AS summary_prompt,
        COALESCE(SUM(CASE WHEN k.purpose = 'summary' THEN k.prompt_tokens + k.completion_tokens END), 0) AS summary_total
    FROM current_runs r
    JOIN cases c ON c.run_id = r.run_id AND c.status = 'ok'
    LEFT JOIN calls k ON k.run_id = c.run_id AND k.case_id = c.case_id
    GROUP BY ALL
),
-- A baseline case whose prompt did not fit the model's window spent nothing, but the task stored
-- the prompt tokens it needed (counted with the toolkit's tokenizer): the savings of the other
-- modes are measured against that need, and the rows say how many such pairs they hold.
baseline_needed AS (
    SELECT r.benchmark, r.model, r.mode, r.smoke_test, r.run_id, r.variant, r.baseline_run_id, r.baseline_variant,
        c.case_id, TRUE AS estimated,
        TRY_CAST(json_extract_string(c.metadata, '$.prompt_tokens_needed') AS BIGINT) AS answer_prompt,
        NULL::BIGINT AS answer_total, 0 AS summary_prompt, NULL::BIGINT AS summary_total,
        TRY_CAST(json_extract_string(c.metadata, '$.prompt_tokens_needed') AS BIGINT) AS answer_prompt_last
    FROM current_runs r
    JOIN cases c ON c.run_id = r.run_id AND c.status = 'failed' AND c.error_code = 'context_length'
    WHERE r.role = 'baseline' AND TRY_CAST(json_extract_string(c.metadata, '$.prompt_tokens_needed') AS BIGINT) > 0
),
pairs AS (
    SELECT x.benchmark, x.model, x.mode, x.variant, x.run_id, b.mode AS baseline_mode, x.baseline_variant,
        x.baseline_run_id, x.case_id,
        (b.smoke_test OR x.smoke_test) AS smoke_test, b.estimated AS baseline_estimated,
        b.answer_prompt AS baseline_prompt_tokens, x.answer_prompt AS mode_prompt_tokens,
        b.answer_total AS baseline_total_tokens, x.answer_total AS mode_total_tokens,
        b.summary_prompt AS baseline_summary_prompt_tokens, x.summary_prompt AS mode_summary_prompt_tokens,
        b.summary_total AS baseline_summary_total_tokens, x.summary_total AS mode_summary_total_tokens,
        b.answer_prompt_last AS baseline_prompt_tokens_last, x.answer_prompt_last AS mode_prompt_tokens_last,
        mr.published_token_rule
    FROM case_tokens x
    JOIN (SELECT * FROM case_tokens UNION ALL BY NAME SELECT * FROM baseline_needed) b
      ON b.run_id = x.baseline_run_id AND b.case_id = x.case_id
    LEFT JOIN mode_roles mr ON mr.benchmark = x.benchmark
),
per_case AS (
    SELECT *,
        (baseline_prompt_tokens - mode_prompt_tokens) / NULLIF(baseline_prompt_tokens, 0) AS prompt_savings,
        (baseline_total_tokens - mode_total_tokens) / NULLIF(baseline_total_tokens, 0) AS total_savings,
        ((baseline_prompt_tokens + baseline_summary_prompt_tokens) - (mode_prompt_tokens + mode_summary_prompt_tokens))
            / NULLIF(baseline_prompt_tokens + baseline_summary_prompt_tokens, 0) AS prompt_savings_with_summary,
        ((baseline_total_tokens + baseline_summary_total_tokens) - (mode_total_tokens + mode_summary_total_tokens))
            / NULLIF(baseline_total_tokens + baseline_summary_total_tokens, 0) AS total_savings_with_summary,
        (baseline_prompt_tokens_last - mode_prompt_tokens_last) / NULLIF(baseline_prompt_tokens_last, 0)
            AS prompt_savings_last
    FROM pairs
)
SELECT benchmark, model, mode, variant, run_id, baseline_mode, baseline_variant, baseline_run_id,
    'case' AS level, case_id, 1 AS n_cases, smoke_test,
    CASE WHEN baseline_estimated THEN 1 ELSE 0 END AS n_baseline_estimated,
    baseline_prompt_tokens::DOUBLE AS baseline_prompt_tokens, mode_prompt_tokens::DOUBLE AS mode_prompt_tokens,
    baseline_total_tokens::DOUBLE AS baseline_total_tokens, mode_total_tokens::DOUBLE AS mode_total_tokens,
    mode_summary_prompt_tokens::DOUBLE AS mode_summary_prompt_tokens,
    mode_summary_total_tokens::DOUBLE AS mode_summary_total_tokens,
    prompt_savings, prompt_savings AS prompt_savings_ratio,
    total_savings, total_savings AS total_savings_ratio,
    prompt_savings_with_summary, prompt_savings_with_summary AS prompt_savings_with_summary_ratio,
    total_savings_with_summary, total_savings_with_summary AS total_savings_with_summary_ratio,
    CASE WHEN total_savings < 0 THEN 1.0 WHEN total_savings IS NULL THEN NULL ELSE 0.0 END AS negative_rate,
    baseline_prompt_tokens_last::DOUBLE AS baseline_prompt_tokens_last,
    mode_prompt_tokens_last::DOUBLE AS mode_prompt_tokens_last,
    prompt_savings_last, prompt_savings_last AS prompt_savings_last_ratio, published_token_rule
FROM per_case
UNION ALL
SELECT benchmark, model, mode, variant, run_id, baseline_mode, baseline_variant, baseline_run_id,
    'aggregate' AS level, NULL AS case_id, count(*) AS n_cases,
    bool_or(smoke_test) AS smoke_test, count(*) FILTER (WHERE baseline_estimated) AS n_baseline_estimated,
    avg(baseline_prompt_tokens), avg(mode_prompt_tokens),
    -- Totals need both sides' completions: pairs with an estimated baseline are left out of them.
    avg(baseline_total_tokens) FILTER (WHERE NOT baseline_estimated),
    avg(mode_total_tokens) FILTER (WHERE NOT baseline_estimated),
    avg(mode_summary_prompt_tokens), avg(mode_summary_total_tokens),
    avg(prompt_savings),
    (sum(baseline_prompt_tokens) - sum(mode_prompt_tokens)) / NULLIF(sum(baseline_prompt_tokens), 0),
    avg(total_savings),
    (sum(baseline_total_tokens) FILTER (WHERE NOT baseline_estimated)
        - sum(mode_total_tokens) FILTER (WHERE NOT baseline_estimated))
        / NULLIF(sum(baseline_total_tokens) FILTER (WHERE NOT baseline_estimated), 0),
    avg(prompt_savings_with_summary),
    (sum(baseline_prompt_tokens + baseline_summary_prompt_tokens) - sum(mode_prompt_tokens + mode_summary_prompt_tokens))
        / NULLIF(sum(baseline_prompt_tokens + baseline_summary_prompt_tokens), 0),
    avg(total_savings_with_summary),
    (sum(baseline_total_tokens + baseline_summary_total_tokens) FILTER (WHERE NOT baseline_estimated)
        - sum(mode_total_tokens + mode_summary_total_tokens) FILTER (WHERE NOT baseline_estimated))
        / NULLIF(sum(baseline_total_tokens + baseline_summary_total_tokens) FILTER (WHERE NOT baseline_estimated), 0),
    avg(CASE WHEN total_savings < 0 THEN 1.0 ELSE 0.0 END) FILTER (WHERE total_savings IS NOT NULL),
    avg(baseline_prompt_tokens_last), avg(mode_prompt_tokens_last), avg(prompt_savings_last),
    (sum(baseline_prompt_tokens_last) - sum(mode_prompt_tokens_last)) / NULLIF(sum(baseline_prompt_tokens_last), 0),
    any_value(published_token_rule)
FROM per_case
GROUP BY benchmark, model, mode, variant, run_id, baseline_mode, baseline_variant, baseline_run_id
"""

# Each (mode, variant) run's cases against its baseline run's, per metric: the cases both attempted.
_QUALITY_JOIN = """
FROM case_metric x
JOIN case_metric b ON b.run_id = x.baseline_run_id AND b.case_id = x.case_id AND b.metric = x.metric"""

_QUALITY_LOSS = f"""
CREATE OR REPLACE TABLE quality_loss AS
WITH {_CURRENT_RUNS}, {_CASE_METRIC}
SELECT x.benchmark, x.model, x.mode, x.variant, x.run_id, b.mode AS baseline_mode, x.baseline_variant,
    x.baseline_run_id, x.metric,
    count(*) AS n_cases,
    count(*) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL) AS n_scored,
    count(*) FILTER (WHERE b.status = 'failed') AS n_failed_baseline,
    count(*) FILTER (WHERE x.status = 'failed') AS n_failed_mode,
    bool_or(b.smoke_test OR x.smoke_test) AS smoke_test,
    avg(b.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL) AS baseline_mean,
    avg(x.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL) AS mode_mean,
    avg(x.value - b.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL) AS delta,
    (avg(b.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL)
      - avg(x.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL))
      / NULLIF(avg(b.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL), 0) AS relative_loss
{_QUALITY_JOIN}
GROUP BY x.benchmark, x.model, x.mode, x.variant, x.run_id, b.mode, x.baseline_variant, x.baseline_run_id, x.metric
"""

#: The scored (baseline, mode) pairs behind each quality_loss row: what its interval resamples.
_QUALITY_PAIRS_SQL = f"""
WITH {_CURRENT_RUNS}, {_CASE_METRIC}
SELECT x.run_id, x.metric, x.case_id, b.value AS baseline_value, x.value AS mode_value
{_QUALITY_JOIN}
WHERE b.value IS NOT NULL AND x.value IS NOT NULL
ORDER BY x.run_id, x.metric, x.case_id
"""

# Each recovered (mode, variant) run with its lossy and baseline partners, per case and metric.
_RECOVERY_SCORED = """
triples AS (
    SELECT r.benchmark, r.model, r.metric, b.mode AS baseline_mode, l.mode AS lossy_mode,
        r.mode AS recovered_mode, r.variant, r.run_id, r.lossy_variant, r.lossy_run_id, r.baseline_variant,
        r.baseline_run_id, r.case_id,
        (b.smoke_test OR l.smoke_test OR r.smoke_test) AS smoke_test, b.status AS baseline_status,
        b.value AS baseline_value, l.value AS lossy_value, r.value AS recovered_value
    FROM case_metric r
    JOIN case_metric l ON l.run_id = r.lossy_run_id AND l.case_id = r.case_id AND l.metric = r.metric
    JOIN case_metric b ON b.run_id = r.baseline_run_id AND b.case_id = r.case_id AND b.metric = r.metric
),
scored AS (
    SELECT * FROM triples
    WHERE baseline_value IS NOT NULL AND lossy_value IS NOT NULL AND recovered_value IS NOT NULL
)"""

_RECOVERY_TRIPLES_SQL = f"""
WITH {_CURRENT_RUNS}, {_CASE_METRIC}, {_RECOVERY_SCORED}
SELECT run_id, metric, case_id, baseline_status, baseline_value, lossy_value, recovered_value
FROM scored ORDER BY run_id, metric, case_id
"""

_RECOVERY = f"""
CREATE OR REPLACE TABLE recovery AS
WITH {_CURRENT_RUNS}, {_CASE_METRIC}, {_RECOVERY_SCORED}
SELECT benchmark, model, metric, baseline_mode, lossy_mode, recovered_mode, variant, run_id, lossy_variant,
    lossy_run_id, baseline_variant, baseline_run_id,
    count(*) AS n_cases, bool_or(smoke_test) AS smoke_test,
    count(*) FILTER (WHERE baseline_status = 'failed') AS n_failed_baseline,
    avg(baseline_value) AS baseline_mean, avg(lossy_value) AS lossy_mean, avg(recovered_value) AS recovered_mean,
    -- Undefined (NULL) when no baseline case produced an answer: there is no loss to recover.
    CASE WHEN count(*) FILTER (WHERE baseline_status = 'failed') < count(*) THEN
        (avg(recovered_value) - avg(lossy_value)) / NULLIF(avg(baseline_value) - avg(lossy_value), 0)
    END AS recovery,
    -- The same over the cases whose baseline answered: a failed baseline case counts 0 above,
    -- which shrinks the loss to recover and can push ``recovery`` past 100 %; this one cannot be
    -- moved by baseline failures.
    count(*) FILTER (WHERE baseline_status = 'ok') AS n_baseline_ok,
    (avg(recovered_value) FILTER (WHERE baseline_status = 'ok') - avg(lossy_value) FILTER (WHERE baseline_status = 'ok'))
        / NULLIF(avg(baseline_value) FILTER (WHERE baseline_status = 'ok')
                 - avg(lossy_value) FILTER (WHERE baseline_status = 'ok'), 0) AS recovery_baseline_ok,
    count(*) FILTER (WHERE recovered_value - lossy_value > {TIE_EPSILON}) AS wins,
    count(*) FILTER (WHERE lossy_value - recovered_value > {TIE_EPSILON}) AS losses,
    count(*) FILTER (WHERE abs(recovered_value - lossy_value) <= {TIE_EPSILON}) AS ties
FROM scored
GROUP BY benchmark, model, metric, baseline_mode, lossy_mode, recovered_mode, variant, run_id, lossy_variant,
    lossy_run_id, baseline_variant, baseline_run_id
"""

_DERIVED_SQL = (_TOKEN_SAVINGS, _QUALITY_LOSS, _RECOVERY)

#: Mean of each metric per run (failed cases count 0; NULL scores left out and counted).
#: Needs ``report_runs`` (written by :meth:`ResultStore.rebuild_derived`).
MODE_MEANS_SQL = f"""
WITH {_CURRENT_RUNS}, {_CASE_METRIC}
SELECT benchmark, model, mode, variant, run_id, metric, avg(value) AS mean, count(*) AS n_cases,
    count(*) FILTER (WHERE status = 'failed') AS n_failed,
    count(*) FILTER (WHERE value IS NULL) AS n_unscored, bool_or(smoke_test) AS smoke_test
FROM case_metric
WHERE benchmark = ?
GROUP BY benchmark, model, mode, variant, run_id, metric
ORDER BY model, mode, variant, metric
"""

#: Mean of each metric over all cases of one run (params: run_id twice), by the same rule:
#: failed cases count 0, NULL scores of ok cases are left out and counted.
RUN_MEANS_SQL = """
SELECT m.metric, avg(CASE WHEN c.status = 'ok' THEN s.value ELSE 0.0 END) AS mean, count(*) AS n_cases,
    count(*) FILTER (WHERE c.status = 'failed') AS n_failed,
    count(*) FILTER (WHERE c.status = 'ok' AND s.value IS NULL) AS n_unscored
FROM cases c
CROSS JOIN (SELECT DISTINCT metric FROM scores WHERE run_id = ?) m
LEFT JOIN scores s ON s.run_id = c.run_id AND s.case_id = c.case_id AND s.metric = m.metric
WHERE c.run_id = ?
GROUP BY m.metric
ORDER BY m.metric
"""


#: The one run per (model, mode) a benchmark's own published-style tables (``Task.report_tables``)
#: show, as a CTE named ``current_runs`` over ``runs`` with one ``?`` for the benchmark: the
#: ``default`` variant first, then the run with the most ok cases, then a finished one, then the
#: newest — so a newer partial or 0-case run never replaces a fuller one there either. Variants are
#: compared in the generic tables (token_savings, quality_loss, recovery, pareto).
PRIMARY_RUNS_CTE = """
current_runs AS (
    SELECT * EXCLUDE (rn, n_ok) FROM (
        SELECT r.*, COALESCE(k.n_ok, 0) AS n_ok, row_number() OVER (
            PARTITION BY r.benchmark, r.model, r.mode
            ORDER BY (COALESCE(r.variant, '') = 'default') DESC, COALESCE(k.n_ok, 0) DESC,
                     (r.status = 'finished') DESC, r.started DESC, r.run_id) AS rn
        FROM runs r
        LEFT JOIN (SELECT run_id, count(*) AS n_ok FROM cases WHERE status = 'ok' GROUP BY run_id) k
          ON k.run_id = r.run_id
        WHERE r.benchmark = ?
    ) WHERE rn = 1
)"""


def table_names(tables: Iterable[str] = RAW_TABLES + DERIVED_TABLES) -> list[str]:
    return list(tables)
