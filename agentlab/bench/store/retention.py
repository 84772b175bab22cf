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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentlab.bench.retention.questions import RETENTION_VERSION, RetentionRow
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


@dataclass(frozen=True)
class KeyedTable:
    """A results-file table whose rows are replaced by key: its name, its columns in order, its primary key."""

    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]

    @property
    def names(self) -> list[str]:
        """The column names, in table order."""
        return [name for name, _ in self.columns]

    def create(self, con: Any) -> None:
        """``CREATE TABLE IF NOT EXISTS`` with the columns and the primary key, then ``ADD COLUMN`` for any it lacks."""
        columns = ", ".join(f"{name} {kind}" for name, kind in self.columns)
        con.execute(f"CREATE TABLE IF NOT EXISTS {self.name} ({columns}, PRIMARY KEY ({', '.join(self.key)}))")
        # A file made before columns were added to the table gets them (NULL in its old rows).
        have = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ?",
                                          [self.name]).fetchall()}
        for name, kind in self.columns:
            if name not in have:
                con.execute(f"ALTER TABLE {self.name} ADD COLUMN {name} {kind}")


RETENTION = KeyedTable(TABLE, COLUMNS, KEY)
#: ``chunk_turns`` as stored where it does not apply (a key column cannot be NULL); read back as missing.
NO_CHUNK = -1


def stored_chunk(chunk_turns: int | None) -> int:
    """``chunk_turns`` as a key column stores it: :data:`NO_CHUNK` for ``None`` (it does not apply)."""
    return NO_CHUNK if chunk_turns is None else chunk_turns


def chunk_turns_missing(frame: Any) -> Any:
    """``frame`` (rows read back) with its stored :data:`NO_CHUNK` ``chunk_turns`` as missing."""
    frame["chunk_turns"] = frame["chunk_turns"].where(frame["chunk_turns"] != NO_CHUNK)
    return frame


def replace_rows(db: str | Path, batches: Sequence[tuple[KeyedTable, Sequence[tuple[Any, ...]]]]) -> list[int]:
    """Store each batch's records (tuples in its table's column order) in its table, replacing the rows
    of the same key, all in one transaction; returns how many each batch wrote.

    The tables are created when missing. A failure leaves the file as it was.
    """
    import pandas as pd

    Path(db).parent.mkdir(parents=True, exist_ok=True)
    con = connect(db, what="results file", fix="pass another --db")
    try:
        for table, records in batches:
            table.create(con)
            con.register(f"{table.name}_rows", pd.DataFrame.from_records(list(records), columns=table.names))
        con.execute("BEGIN TRANSACTION")
        try:
            # INSERT OR REPLACE on the primary key: a re-measured row replaces its old one. One
            # statement over a registered frame (a row-by-row executemany took a minute for LoCoMo).
            for table, _ in batches:
                names = ", ".join(table.names)
                con.execute(f"INSERT OR REPLACE INTO {table.name} ({names}) SELECT {names} FROM {table.name}_rows")
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        return [len(records) for _, records in batches]
    finally:
        con.close()


def read_rows(con: Any, table: KeyedTable, filters: Sequence[tuple[str, Any]]) -> Any:
    """The rows of ``table`` whose columns equal the ``(column, value)`` filters given (``None``: any), in key order.

    Empty, with the columns, when the table does not exist yet.
    """
    import pandas as pd

    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if table.name not in tables:
        return pd.DataFrame(columns=table.names)
    where, params = [], []
    for column, value in filters:
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    sql = f"SELECT * FROM {table.name}" + (f" WHERE {' AND '.join(where)}" if where else "")
    return con.execute(sql + f" ORDER BY {', '.join(table.key)}", params).df()


def retention_records(rows: Sequence[RetentionRow], *, benchmark: str, chunk_turns: int | None,
                      context_budget: int, code_version: str) -> list[tuple[Any, ...]]:
    """``rows`` as records of the ``retention`` table (the arguments as :func:`write_retention`'s)."""
    now = time.time()
    records = []
    for r in rows:
        flat = r.as_dict()
        records.append((benchmark, r.delivery, stored_chunk(chunk_turns), context_budget,
                        r.arm, r.case_id, r.n_units, r.n_missing, r.retained,
                        flat.get("recoverable_at_5"), flat.get("recoverable_at_10"),
                        r.peak_prompt_tokens, r.total_prompt_tokens, r.final_prompt_tokens, r.n_requests,
                        r.n_hidden_events, r.evidence_rouge_recall, json.dumps(list(r.lost_units)),
                        RETENTION_VERSION, code_version, now))
    return records


def write_retention(db: str | Path, rows: Sequence[RetentionRow], *, benchmark: str, chunk_turns: int | None,
                    context_budget: int, code_version: str) -> int:
    """Store ``rows`` (replacing the rows of the same key) in one transaction; returns how many were written.

    ``chunk_turns`` is QMSum's turns per read in tool delivery (``None`` where it does not apply:
    turn delivery, or a benchmark that reads whole sessions). A failure leaves the file as it was.
    """
    (stored,) = replace_rows(db, [(RETENTION, retention_records(rows, benchmark=benchmark, chunk_turns=chunk_turns,
                                                                context_budget=context_budget,
                                                                code_version=code_version))])
    return stored


def read_retention(con: Any, *, benchmark: str | None = None, arm: str | None = None,
                   delivery: str | None = None) -> Any:
    """The stored rows as a DataFrame (empty, with the columns, when nothing was measured yet).

    ``chunk_turns`` reads as missing where it does not apply (stored as -1).
    """
    return chunk_turns_missing(read_rows(con, RETENTION, (("benchmark", benchmark), ("arm", arm),
                                                          ("delivery", delivery))))


__all__ = ["COLUMNS", "KEY", "NO_CHUNK", "RETENTION", "TABLE", "KeyedTable", "chunk_turns_missing", "read_retention",
           "read_rows", "replace_rows", "retention_records", "stored_chunk", "write_retention"]
