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

Derived tables (rebuilt by :meth:`ResultStore.rebuild_derived`, i.e. by ``report``), computed over
the *current* run of each (benchmark, model, mode) — the most recently started one:

* ``mode_roles``      the per-benchmark baseline / lossy / recovered mode names (from config).
* ``token_savings``   per case (``level = 'case'``) and per mode (``level = 'aggregate'``): prompt
                      tokens of the ``answer`` calls vs the baseline mode, as the mean of per-case
                      savings AND the ratio of totals; total (prompt + completion) savings; and the
                      same with summary-generation tokens added to both sides (the honest cost).
                      A case's answer tokens are the sum over all its answer calls; the ``*_last``
                      columns take only the last answer call's prompt, the rule of the published
                      summary benchmark; ``published_token_rule`` names the rule the benchmark's
                      published report uses (``config.PUBLISHED_TOKEN_RULES``).
                      Only cases that are ``ok`` in both runs are compared.
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

from agentlab.bench.config import MODE_ROLES, PUBLISHED_TOKEN_RULES, ModeRoles
from agentlab.bench.metrics import Score
from agentlab.duckdb_files import connect
from agentlab.model.base import CallRecord

DEFAULT_DB = Path("results") / "agentlab.duckdb"
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
    finished TIMESTAMP
);
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
DERIVED_TABLES = ("mode_roles", "token_savings", "quality_loss", "recovery")


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
                    "smoke_test = ?, cases_selected = GREATEST(COALESCE(cases_selected, 0), ?) WHERE run_id = ?",
                    [_ts(time.time()), run.code_version, run.smoke_test, run.cases_selected or 0, run.run_id],
                )
            else:
                self.conn.execute(
                    "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, NULL)",
                    [run.run_id, run.benchmark, run.mode, _json(dict(run.config)), run.model, run.judge_model,
                     run.dataset_sha256, run.code_version, run.task_version, run.smoke_test,
                     run.cases_selected, _ts(time.time())],
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
        """Recreate ``mode_roles``, ``token_savings``, ``quality_loss`` and ``recovery``."""
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
                for statement in _DERIVED_SQL:
                    self.conn.execute(statement)
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise


# The current run of each (benchmark, model, mode): the most recently started one.
_CURRENT_RUNS = """
current_runs AS (
    SELECT * FROM (
        SELECT r.*, row_number() OVER (PARTITION BY benchmark, model, mode ORDER BY started DESC, run_id) AS rn
        FROM runs r
    ) WHERE rn = 1
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
    SELECT r.benchmark, r.model, r.mode, r.smoke_test, c.case_id, m.metric, c.status,
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
    SELECT r.benchmark, r.model, r.mode, r.smoke_test, c.case_id, FALSE AS estimated,
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
    SELECT r.benchmark, r.model, r.mode, r.smoke_test, c.case_id, TRUE AS estimated,
        TRY_CAST(json_extract_string(c.metadata, '$.prompt_tokens_needed') AS BIGINT) AS answer_prompt,
        NULL::BIGINT AS answer_total, 0 AS summary_prompt, NULL::BIGINT AS summary_total,
        TRY_CAST(json_extract_string(c.metadata, '$.prompt_tokens_needed') AS BIGINT) AS answer_prompt_last
    FROM current_runs r
    JOIN mode_roles mr ON mr.benchmark = r.benchmark AND r.mode = mr.baseline
    JOIN cases c ON c.run_id = r.run_id AND c.status = 'failed' AND c.error_code = 'context_length'
    WHERE TRY_CAST(json_extract_string(c.metadata, '$.prompt_tokens_needed') AS BIGINT) > 0
),
pairs AS (
    SELECT x.benchmark, x.model, x.mode, mr.baseline AS baseline_mode, x.case_id,
        (b.smoke_test OR x.smoke_test) AS smoke_test, b.estimated AS baseline_estimated,
        b.answer_prompt AS baseline_prompt_tokens, x.answer_prompt AS mode_prompt_tokens,
        b.answer_total AS baseline_total_tokens, x.answer_total AS mode_total_tokens,
        b.summary_prompt AS baseline_summary_prompt_tokens, x.summary_prompt AS mode_summary_prompt_tokens,
        b.summary_total AS baseline_summary_total_tokens, x.summary_total AS mode_summary_total_tokens,
        b.answer_prompt_last AS baseline_prompt_tokens_last, x.answer_prompt_last AS mode_prompt_tokens_last,
        mr.published_token_rule
    FROM case_tokens x
    JOIN mode_roles mr ON mr.benchmark = x.benchmark AND x.mode <> mr.baseline
    JOIN (SELECT * FROM case_tokens UNION ALL BY NAME SELECT * FROM baseline_needed) b
      ON b.benchmark = x.benchmark AND b.model = x.model AND b.mode = mr.baseline AND b.case_id = x.case_id
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
SELECT benchmark, model, mode, baseline_mode, 'case' AS level, case_id, 1 AS n_cases, smoke_test,
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
SELECT benchmark, model, mode, baseline_mode, 'aggregate' AS level, NULL AS case_id, count(*) AS n_cases,
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
GROUP BY benchmark, model, mode, baseline_mode
"""

_QUALITY_LOSS = f"""
CREATE OR REPLACE TABLE quality_loss AS
WITH {_CURRENT_RUNS}, {_CASE_METRIC}
SELECT x.benchmark, x.model, x.mode, mr.baseline AS baseline_mode, x.metric,
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
FROM case_metric x
JOIN mode_roles mr ON mr.benchmark = x.benchmark AND x.mode <> mr.baseline
JOIN case_metric b ON b.benchmark = x.benchmark AND b.model = x.model AND b.mode = mr.baseline
                  AND b.case_id = x.case_id AND b.metric = x.metric
GROUP BY x.benchmark, x.model, x.mode, mr.baseline, x.metric
"""

_RECOVERY = f"""
CREATE OR REPLACE TABLE recovery AS
WITH {_CURRENT_RUNS}, {_CASE_METRIC},
triples AS (
    SELECT b.benchmark, b.model, b.metric, mr.baseline AS baseline_mode, mr.lossy AS lossy_mode,
        mr.recovered AS recovered_mode, b.case_id,
        (b.smoke_test OR l.smoke_test OR r.smoke_test) AS smoke_test, b.status AS baseline_status,
        b.value AS baseline_value, l.value AS lossy_value, r.value AS recovered_value
    FROM mode_roles mr
    JOIN case_metric b ON b.benchmark = mr.benchmark AND b.mode = mr.baseline
    JOIN case_metric l ON l.benchmark = b.benchmark AND l.model = b.model AND l.mode = mr.lossy
                      AND l.case_id = b.case_id AND l.metric = b.metric
    JOIN case_metric r ON r.benchmark = b.benchmark AND r.model = b.model AND r.mode = mr.recovered
                      AND r.case_id = b.case_id AND r.metric = b.metric
    WHERE mr.lossy IS NOT NULL AND mr.recovered IS NOT NULL
),
scored AS (
    SELECT * FROM triples
    WHERE baseline_value IS NOT NULL AND lossy_value IS NOT NULL AND recovered_value IS NOT NULL
)
SELECT benchmark, model, metric, baseline_mode, lossy_mode, recovered_mode,
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
GROUP BY benchmark, model, metric, baseline_mode, lossy_mode, recovered_mode
"""

_DERIVED_SQL = (_TOKEN_SAVINGS, _QUALITY_LOSS, _RECOVERY)

#: Mean of each metric per current run (failed cases count 0; NULL scores left out and counted).
MODE_MEANS_SQL = f"""
WITH {_CURRENT_RUNS}, {_CASE_METRIC}
SELECT benchmark, model, mode, metric, avg(value) AS mean, count(*) AS n_cases,
    count(*) FILTER (WHERE status = 'failed') AS n_failed,
    count(*) FILTER (WHERE value IS NULL) AS n_unscored, bool_or(smoke_test) AS smoke_test
FROM case_metric
WHERE benchmark = ?
GROUP BY benchmark, model, mode, metric
ORDER BY model, mode, metric
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


def table_names(tables: Iterable[str] = RAW_TABLES + DERIVED_TABLES) -> list[str]:
    return list(tables)
