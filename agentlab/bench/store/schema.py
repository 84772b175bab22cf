"""The raw tables of the results store, the migrations of older files, and the records written to them.

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

:class:`RunInfo` is a ``runs`` row as the executor starts it; :class:`CaseRecord` is one case with
its calls, scores and compactions (:class:`CompactionRow`), written by
:meth:`agentlab.bench.store.results.ResultStore.write_cases`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlab.bench.config import DEFAULT_VARIANT
from agentlab.bench.scoring.metrics import Score
from agentlab.model.base import CallRecord

RESULTS_SCHEMA = """
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
MIGRATIONS = """
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
    #: What compacted: ``compaction`` (tRPC-Agent-Go's passes), ``compaction_sync_summary``, or a peer policy's name.
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


def check_record(record: CaseRecord) -> None:
    """Raise ``ValueError`` for a record the store would refuse (a metric scored twice)."""
    seen: set[str] = set()
    for s in record.scores:
        if s.metric in seen:
            raise ValueError(f"case {record.case_id}: metric {s.metric!r} scored twice")
        seen.add(s.metric)

