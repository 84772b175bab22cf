"""The results store: one DuckDB file (``results/agentlab.duckdb`` by default).

:class:`ResultStore` is the connection: the executor's writes (a run's row, its cases) and the
reads of ``report`` and the tasks' own tables. Its parts live beside it: the raw tables, their
migrations and the records written to them in :mod:`agentlab.bench.store.schema`; the derived
tables ``report`` rebuilds in :mod:`agentlab.bench.store.derived`; which run is compared with which
in :mod:`agentlab.bench.scoring.pairing`. Their public names are importable from here too.

A case and everything about it is written in ONE transaction; a retried case replaces its old
rows in that same transaction, so a case is never half-written or duplicated.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentlab.bench.facts import ModeRoles, registered_roles, registered_token_rules
from agentlab.bench.scoring.pairing import (
    LEGACY_VARIANT,
    ROLE_BASELINE,
    ROLE_LOSSY,
    ROLE_OTHER,
    ROLE_RECOVERED,
    pair_runs,
)
from agentlab.bench.scoring.queries import (
    CURRENT_RUNS_CTE,
    MODE_MEANS_SQL,
    RUN_MEANS_SQL,
    TIE_EPSILON,
    RunSelection,
    with_current_runs,
)
from agentlab.bench.store.derived import write_derived
from agentlab.bench.store.schema import (
    DERIVED_TABLES,
    MIGRATIONS,
    RAW_TABLES,
    RESULTS_SCHEMA,
    CaseRecord,
    CompactionRow,
    RunInfo,
    check_record,
)
from agentlab.duckdb_files import connect

DEFAULT_DB = Path("results") / "agentlab.duckdb"
#: The current-run CTE under its earlier name (the SQL itself lives in :mod:`agentlab.bench.scoring.queries`).
PRIMARY_RUNS_CTE = CURRENT_RUNS_CTE

# The names listed here that live in agentlab.bench.scoring.queries, agentlab.bench.store.schema and
# agentlab.bench.scoring.pairing are still imported from here.
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
    "check_record",
    "pair_runs",
]


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
            self.conn.execute(RESULTS_SCHEMA)
            self.conn.execute(MIGRATIONS)

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

        The CTE is :func:`agentlab.bench.scoring.queries.current_runs_cte` under :attr:`run_selection`; every
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
            write_derived(self.conn, roles, token_rules)
