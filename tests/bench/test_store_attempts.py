"""The ``calls.attempts`` column: written for every call, added to files made before it existed."""

from __future__ import annotations

from pathlib import Path

import duckdb

from agentlab.bench.store.results import CaseRecord, ResultStore
from agentlab.events import Usage
from agentlab.model.base import CallRecord

OLD_CALLS = """
CREATE TABLE calls (
    run_id VARCHAR NOT NULL, case_id VARCHAR NOT NULL, seq INTEGER NOT NULL, purpose VARCHAR, model VARCHAR,
    prompt_tokens BIGINT, completion_tokens BIGINT, cached_tokens BIGINT, latency_ms DOUBLE, cache_hit BOOLEAN,
    error VARCHAR, PRIMARY KEY (run_id, case_id, seq)
)"""


def _call(attempts: int, cache_hit: bool = False) -> CallRecord:
    return CallRecord(model="m", purpose="answer", usage=Usage(10, 2), latency_ms=1.0, cache_hit=cache_hit,
                      attempts=attempts)


def test_old_file_gains_the_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute(OLD_CALLS)
    conn.execute("INSERT INTO calls VALUES ('r0', 'c0', 0, 'answer', 'm', 5, 1, 0, 2.0, false, NULL)")
    conn.close()
    with ResultStore(path) as store:
        store.write_case(CaseRecord("r1", "c1", "ok", calls=[_call(3), _call(0, cache_hit=True)]))
        rows = store.query("SELECT run_id, seq, prompt_tokens, attempts FROM calls ORDER BY run_id, seq")
    assert rows == [("r0", 0, 5, None), ("r1", 0, 10, 3), ("r1", 1, 10, 0)]
    with ResultStore(path) as store:  # opening again is a no-op
        assert store.query("SELECT count(*) FROM calls") == [(3,)]
