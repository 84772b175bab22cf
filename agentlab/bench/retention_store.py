"""The ``retention`` table: one row per (benchmark, delivery, budget, arm, case) of an LLM-free retention run.

``python -m agentlab.bench retention`` writes it (:func:`write_retention`) into the results file;
``agentlab.bench.analysis.retention_df()`` reads it back. A row is keyed by what its figures
depend on — benchmark, delivery, QMSum's turns per read, the context budget the mechanisms saw,
the arm and the case — so measuring again replaces the rows of that key instead of adding a
second copy, and rows measured under another budget or delivery stay beside them. Each row also
keeps the retention definitions' version and the code version that measured it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentlab.bench.retention import RETENTION_VERSION, RetentionRow
from agentlab.duckdb_files import connect

TABLE = "retention"

#: Columns in table order: the key, the figures (``RetentionRow``), then provenance.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("benchmark", "VARCHAR"), ("delivery", "VARCHAR"), ("chunk_turns", "INTEGER"), ("context_budget", "INTEGER"),
    ("arm", "VARCHAR"), ("case_id", "VARCHAR"),
    ("n_units", "INTEGER"), ("n_missing", "INTEGER"), ("retained", "DOUBLE"),
    ("recoverable_at_5", "DOUBLE"), ("recoverable_at_10", "DOUBLE"),
    ("peak_prompt_tokens", "INTEGER"), ("total_prompt_tokens", "INTEGER"), ("final_prompt_tokens", "INTEGER"),
    ("n_requests", "INTEGER"), ("n_hidden_events", "INTEGER"), ("evidence_rouge_recall", "DOUBLE"),
    ("lost_units", "VARCHAR"), ("retention_version", "VARCHAR"), ("code_version", "VARCHAR"),
    ("measured_at", "DOUBLE"),
)
KEY = ("benchmark", "delivery", "chunk_turns", "context_budget", "arm", "case_id")


def _create(con: Any) -> None:
    columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
    con.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} ({columns}, PRIMARY KEY ({', '.join(KEY)}))")


def write_retention(db: str | Path, rows: Sequence[RetentionRow], *, benchmark: str, chunk_turns: int | None,
                    context_budget: int, code_version: str) -> int:
    """Store ``rows`` (replacing the rows of the same key) in one transaction; returns how many were written.

    ``chunk_turns`` is QMSum's turns per read in tool delivery (``None`` where it does not apply:
    turn delivery, or a benchmark that reads whole sessions). A failure leaves the file as it was.
    """
    Path(db).parent.mkdir(parents=True, exist_ok=True)
    con = connect(db, what="results file", fix="pass another --db")
    try:
        _create(con)
        now = time.time()
        records = []
        for r in rows:
            flat = r.as_dict()
            records.append((benchmark, r.delivery, chunk_turns if chunk_turns is not None else -1, context_budget,
                            r.arm, r.case_id, r.n_units, r.n_missing, r.retained,
                            flat.get("recoverable_at_5"), flat.get("recoverable_at_10"),
                            r.peak_prompt_tokens, r.total_prompt_tokens, r.final_prompt_tokens, r.n_requests,
                            r.n_hidden_events, r.evidence_rouge_recall, json.dumps(list(r.lost_units)),
                            RETENTION_VERSION, code_version, now))
        import pandas as pd

        frame = pd.DataFrame.from_records(records, columns=[name for name, _ in COLUMNS])
        con.register("retention_rows", frame)
        con.execute("BEGIN TRANSACTION")
        try:
            # INSERT OR REPLACE on the primary key: a re-measured case replaces its row. One
            # statement over a registered frame (a row-by-row executemany took a minute for LoCoMo).
            con.execute(f"INSERT OR REPLACE INTO {TABLE} SELECT * FROM retention_rows")
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        return len(records)
    finally:
        con.close()


def read_retention(con: Any, *, benchmark: str | None = None, arm: str | None = None,
                   delivery: str | None = None) -> Any:
    """The stored rows as a DataFrame (empty, with the columns, when nothing was measured yet).

    ``chunk_turns`` reads as missing where it does not apply (stored as -1).
    """
    import pandas as pd

    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if TABLE not in tables:
        return pd.DataFrame(columns=[name for name, _ in COLUMNS])
    where, params = [], []
    for column, value in (("benchmark", benchmark), ("arm", arm), ("delivery", delivery)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    sql = f"SELECT * FROM {TABLE}" + (f" WHERE {' AND '.join(where)}" if where else "")
    frame = con.execute(sql + f" ORDER BY {', '.join(KEY)}", params).df()
    frame["chunk_turns"] = frame["chunk_turns"].where(frame["chunk_turns"] >= 0)
    return frame


__all__ = ["COLUMNS", "KEY", "TABLE", "read_retention", "write_retention"]
