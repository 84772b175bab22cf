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
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlab.bench.config import DEFAULT_VARIANT
from agentlab.bench.facts import ModeRoles, registered_roles, registered_token_rules
from agentlab.bench.metrics import Score
from agentlab.bench.queries import (
    CURRENT_RUNS_CTE,
    DERIVED_TABLES_SQL,
    MODE_MEANS_SQL,
    QUALITY_PAIRS_SQL,
    RECOVERY_TRIPLES_SQL,
    RUN_MEANS_SQL,
    TIE_EPSILON,
    RunSelection,
    with_current_runs,
)
from agentlab.duckdb_files import connect
from agentlab.model.base import CallRecord

DEFAULT_DB = Path("results") / "agentlab.duckdb"
#: The variant of a run stored before variants existed (rerunning its command labels it).
LEGACY_VARIANT = "legacy"
#: The current-run CTE under its earlier name (the SQL itself lives in :mod:`agentlab.bench.queries`).
PRIMARY_RUNS_CTE = CURRENT_RUNS_CTE

# The SQL names listed here live in agentlab.bench.queries and are still imported from here.
__all__ = [
    "DEFAULT_DB",
    "DERIVED_TABLES",
    "LEGACY_VARIANT",
    "MODE_MEANS_SQL",
    "PRIMARY_RUNS_CTE",
    "RAW_TABLES",
    "ROLE_BASELINE",
    "ROLE_LOSSY",
    "ROLE_OTHER",
    "ROLE_RECOVERED",
    "RUN_MEANS_SQL",
    "TIE_EPSILON",
    "CaseRecord",
    "CompactionRow",
    "ResultStore",
    "RunInfo",
    "RunSelection",
    "pair_runs",
]

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
    mechanism VARCHAR,
    PRIMARY KEY (run_id, case_id, seq)
);
"""

# Columns added after a table's first release: files written before them gain the column (NULL for
# old rows) when they are opened for writing.
_MIGRATIONS = """
ALTER TABLE calls ADD COLUMN IF NOT EXISTS attempts INTEGER;
ALTER TABLE compactions ADD COLUMN IF NOT EXISTS mechanism VARCHAR;
"""

RAW_TABLES = ("runs", "cases", "calls", "scores", "compactions")
DERIVED_TABLES = ("mode_roles", "report_runs", "token_savings", "quality_loss", "recovery")


@dataclass(frozen=True)
class RunInfo:
    """What identifies and describes a run, as the executor starts it (one ``runs`` row)."""

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
    """One request-side compaction of a case: how many tool results it cut, and the tokens saved."""

    results_compacted: int
    tokens_before: int
    tokens_after: int
    #: What compacted: ``compaction`` (the seed's passes), ``compaction_sync_summary``, or a peer policy's name.
    mechanism: str = ""


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


#: Rows per INSERT statement of :meth:`ResultStore.write_cases`.
_INSERT_CHUNK = 64


def _insert_rows(conn: Any, table: str, columns: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """``rows`` into ``table`` with a few multi-row INSERTs (one row per statement costs ~1 ms each)."""
    if not rows:
        return
    placeholders = "(" + ", ".join("?" for _ in rows[0]) + ")"
    for i in range(0, len(rows), _INSERT_CHUNK):
        chunk = rows[i:i + _INSERT_CHUNK]
        conn.execute(f"INSERT INTO {table} {columns} VALUES " + ", ".join([placeholders] * len(chunk)),
                     [value for row in chunk for value in row])


def check_record(record: CaseRecord) -> None:
    """Raise ``ValueError`` for a record the store would refuse (a metric scored twice)."""
    seen: set[str] = set()
    for s in record.scores:
        if s.metric in seen:
            raise ValueError(f"case {record.case_id}: metric {s.metric!r} scored twice")
        seen.add(s.metric)


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
        #: The runs a report is narrowed to (``report --run`` / ``--variant``); the tasks' own tables
        #: honour it through :meth:`current_runs_df`. Empty: every run is a candidate.
        self.run_selection = RunSelection()
        if not read_only:
            self.conn.execute(_SCHEMA)
            self.conn.execute(_MIGRATIONS)

    # ------------------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close the connection (DuckDB releases the file's lock for other processes)."""
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
        """Record how a run ended (``finished`` / ``interrupted`` / ``failed``) and when."""
        with self._lock:
            self.conn.execute("UPDATE runs SET status = ?, finished = ? WHERE run_id = ?",
                              [status, _ts(time.time()), run_id])

    def run_status(self, run_id: str) -> str | None:
        """The stored status of a run, or ``None`` if no such run was started."""
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
        self.write_cases([record])

    def write_cases(self, records: Sequence[CaseRecord]) -> None:
        """Several cases with their calls, scores and compactions in ONE transaction, each replacing
        an earlier attempt of the same case: all of them are stored, or none.

        One statement per table for the whole batch: the executor writes finished cases in batches,
        since a DuckDB commit per case cost more of the event loop than the case's own calls.
        """
        latest = {(r.run_id, r.case_id): r for r in records}  # a case twice in a batch: the last attempt
        if not latest:
            return
        for record in latest.values():
            check_record(record)
        batch = list(latest.values())
        now = _ts(time.time())
        cases, calls, scores, compactions = [], [], [], []
        for r in batch:
            cases.append((r.run_id, r.case_id, r.ordinal, r.status, r.prediction, r.reference, r.error, r.error_code,
                          _json(dict(r.metadata)), r.latency_ms, now))
            calls += [(r.run_id, r.case_id, i, c.purpose, c.model, c.usage.prompt_tokens, c.usage.completion_tokens,
                       c.usage.cached_tokens, c.latency_ms, c.cache_hit, c.error, c.attempts)
                      for i, c in enumerate(r.calls)]
            scores += [(r.run_id, r.case_id, x.metric, x.value, x.version, x.detail) for x in r.scores]
            compactions += [(r.run_id, r.case_id, i, c.results_compacted, c.tokens_before, c.tokens_after,
                             c.mechanism or None) for i, c in enumerate(r.compactions)]
        by_run: dict[str, list[str]] = {}
        for run_id, case_id in latest:
            by_run.setdefault(run_id, []).append(case_id)
        with self._lock:
            self.conn.execute("BEGIN TRANSACTION")
            try:
                for run_id, case_ids in by_run.items():
                    for table in ("cases", "calls", "scores", "compactions"):
                        self.conn.execute(f"DELETE FROM {table} WHERE run_id = ? AND case_id IN "
                                          "(SELECT unnest(?::VARCHAR[]))", [run_id, case_ids])
                _insert_rows(self.conn, "cases", "", cases)
                _insert_rows(self.conn, "calls", "(run_id, case_id, seq, purpose, model, prompt_tokens, "
                             "completion_tokens, cached_tokens, latency_ms, cache_hit, error, attempts)", calls)
                _insert_rows(self.conn, "scores", "", scores)
                _insert_rows(self.conn, "compactions", "(run_id, case_id, seq, results_compacted, tokens_before, "
                             "tokens_after, mechanism)", compactions)
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    # ------------------------------------------------------------------------------ reads

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Rows of a query, serialised with the writers on this connection."""
        with self._lock:
            return self.conn.execute(sql, params or []).fetchall()

    def df(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """A pandas DataFrame of a query."""
        with self._lock:
            return self.conn.execute(sql, params or []).df()

    def select_runs(self, run_ids: Iterable[str] | None = None, variants: Iterable[str] | None = None) -> None:
        """Narrow the tasks' own tables to these runs/variants and their partners (``None``: no narrowing).

        Reads ``report_runs``: call :meth:`rebuild_derived` first, as ``report`` does.
        """
        self.run_selection = RunSelection.of(list(run_ids or ()), list(variants or ()))

    def current_runs_df(self, select_sql: str, benchmark: str) -> Any:
        """``select_sql`` over ``current_runs``, the one run per (model, mode) a task's table shows.

        The CTE is :func:`agentlab.bench.queries.current_runs_cte` under :attr:`run_selection`; every
        task's ``report_tables`` reads its runs through here, so they cannot disagree on which run
        stands for a mode. ``select_sql`` takes no parameters.
        """
        return self.df(*with_current_runs(select_sql, benchmark, self.run_selection))

    def current_runs(self, benchmark: str) -> Any:
        """The run shown per (model, mode) of ``benchmark``: ``model, mode, variant, run_id, status``."""
        return self.current_runs_df("SELECT model, mode, variant, run_id, status FROM current_runs "
                                    "ORDER BY model, mode", benchmark)

    def has_table(self, name: str) -> bool:
        """Whether the file holds table ``name`` (derived tables exist only after a report)."""
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

    def rebuild_derived(self, roles: Mapping[str, ModeRoles] | None = None,
                        token_rules: Mapping[str, str] | None = None) -> None:
        """Recreate ``mode_roles``, ``report_runs``, ``token_savings``, ``quality_loss`` and ``recovery``.

        ``roles``: benchmark → its mode roles; ``token_rules``: benchmark → its published token rule.
        By default every registered task's (``Task.mode_roles``, ``Task.published_token_rule``, read
        through :mod:`agentlab.bench.facts`), so a plugin benchmark's runs pair wherever the tables are built.

        ``report_runs`` pairs every run with the run it is compared with (:func:`pair_runs`); the
        SQL of the other tables reads only that pairing, so which runs meet is decided in one place.
        Then each savings, loss and recovery row gets its paired interval and p-value (:mod:`stats`).
        """
        roles = dict(registered_roles() if roles is None else roles)
        token_rules = dict(registered_token_rules() if token_rules is None else token_rules)
        with self._lock:
            self.conn.execute("BEGIN TRANSACTION")
            try:
                self.conn.execute(
                    "CREATE OR REPLACE TABLE mode_roles (benchmark VARCHAR PRIMARY KEY, baseline VARCHAR, "
                    "lossy VARCHAR, recovered VARCHAR, published_token_rule VARCHAR)"
                )
                if roles:
                    self.conn.executemany("INSERT INTO mode_roles VALUES (?, ?, ?, ?, ?)",
                                          [[b, r.baseline, r.lossy, r.recovered, token_rules.get(b)]
                                           for b, r in roles.items()])
                self._write_report_runs(roles)
                for statement in DERIVED_TABLES_SQL:
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
        import agentlab.bench.stats as stats
        from agentlab.bench.recovery_rule import recovery_columns

        savings = self.conn.execute(
            # Ordered: a seeded bootstrap resamples by position, so its interval depends on the order of the values.
            "SELECT run_id, prompt_savings FROM token_savings WHERE level = 'case' AND prompt_savings IS NOT NULL "
            "ORDER BY run_id, case_id").df()
        rows = [{"run_id": run_id, **stats.mean_with_ci(group["prompt_savings"].tolist()).as_columns()}
                for run_id, group in savings.groupby("run_id", sort=True)]
        self._join_stats("token_savings", ["run_id"], rows, "level = 'aggregate'")

        pairs = self.conn.execute(QUALITY_PAIRS_SQL).df()
        rows = [{"run_id": run_id, "metric": metric,
                 **stats.paired_difference(g["baseline_value"].tolist(), g["mode_value"].tolist()).as_columns()}
                for (run_id, metric), g in pairs.groupby(["run_id", "metric"], sort=True)]
        self._join_stats("quality_loss", ["run_id", "metric"], rows)

        triples = self.conn.execute(RECOVERY_TRIPLES_SQL).df()
        rows = []
        for (run_id, metric), g in triples.groupby(["run_id", "metric"], sort=True):
            result = recovery_columns(g["baseline_value"].tolist(), g["lossy_value"].tolist(),
                                      g["recovered_value"].tolist(), "the lossy run")
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


def _role(mode: str, roles: ModeRoles | None) -> tuple[str, str | None]:
    """(role, lossy partner) of ``mode``: the task's named roles, else the registered arm's (:mod:`arms`)."""
    if roles is None:
        return ROLE_OTHER, None
    from agentlab.bench.arms import role_of

    return role_of(mode, roles.baseline, roles.lossy, roles.recovered)


def _best_partner(run: Mapping[str, Any], mode: str | None, runs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The ``mode`` run ``run`` is compared with: same benchmark, model, context window (which prompts
    fit depends on it; ``--context-window`` is not a setting, so the variant does not show it) and
    context budget (the pressure the mechanisms were under), judge
    (or either unjudged: the judge's metrics then simply do not pair), data and task version, whose
    variant settings are a subset of ``run``'s; the most specific such run wins (its own
    variant name first, then the most shared settings, then ``default``), and among equals the one
    with the most ok cases, then a finished one, then the newest — so a newer partial run never
    displaces a fuller one.
    """
    if mode is None:
        return None
    mine = dict(run["variant_settings"] or {})
    candidates = [
        r for r in runs
        if r["mode"] == mode and r["benchmark"] == run["benchmark"] and r["model"] == run["model"]
        and r.get("context_window") == run.get("context_window")
        and r.get("context_budget") == run.get("context_budget")
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
    """Every run, with the baseline run (and for a recovered run, its lossy partner's run) it is compared with.

    A run's role and partner come from the benchmark's mode roles, then the registered arms
    (:func:`agentlab.bench.arms.role_of`): any number of lossy and recovered arms per benchmark.

    Every run is its own row — nothing is replaced because a newer run exists. Two runs of the same
    (mode, variant, model, judge) can only differ in data or task version (``--limit`` is not part of
    a run's id), and each is paired with the baseline on its own data and version. ``pairing`` says
    which rule chose the partner, or why there is none.
    """
    runs = [{**r, "variant": r.get("variant") or LEGACY_VARIANT} for r in runs]
    out = []
    for run in runs:
        mode_roles = roles.get(run["benchmark"])
        role, partner = _role(run["mode"], mode_roles)
        row: dict[str, Any] = {"run_id": run["run_id"], "variant": run["variant"], "role": role,
                               "baseline_run_id": None, "baseline_variant": None, "lossy_run_id": None,
                               "lossy_variant": None, "pairing": None}
        if mode_roles is None:
            row["pairing"] = "no mode roles for this benchmark"
        elif role != ROLE_BASELINE:
            base = _best_partner(run, mode_roles.baseline, runs)
            if base is None:
                row["pairing"] = (f"no {mode_roles.baseline} run of this model, context window and judge on the "
                                  f"same data and task version whose settings are a subset of this variant's")
            else:
                row.update(baseline_run_id=base["run_id"], baseline_variant=base["variant"],
                           pairing="same variant" if base["variant"] == run["variant"] else
                           f"baseline variant {base['variant']!r} (the most specific one this variant extends)")
            if role == ROLE_RECOVERED:
                lossy = _best_partner(run, partner, runs)
                if lossy is not None:
                    row.update(lossy_run_id=lossy["run_id"], lossy_variant=lossy["variant"])
        out.append(row)
    return out


