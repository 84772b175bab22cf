"""The CPU of the serve proxy's DuckDB statements, each on its own (median of 100, ms).

    .venv/bin/python benchmarks/perf/duckdb_statement_cost.py

The proxy's writer thread commits the ledger every ``--ledger-linger`` and its call log every
``--flush-interval``; at one conversation those commits, not their rows, are most of its CPU.
This prints what one statement of each kind costs in a file-backed database with one DuckDB
thread (as the proxy opens it): a trivial ``SELECT 1``, a plain insert, the same with a primary
key and ``ON CONFLICT`` (``serve_conversations`` and ``serve_prefixes`` use it), the ledger's
event insert (14 columns bound as lists) and the call log's (34 columns), for a few row counts.
The call log's statements are read from :mod:`agentlab.serve.store` (its private names), so this
measures the SQL the proxy runs.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import duckdb

from agentlab.serve import store
from agentlab.session.duckdb_tables import SESSION_SCHEMA, insert_event_rows


def median_ms(work: Callable[[int], object], repeat: int = 100) -> float:
    """Median thread CPU of ``work(i)`` over ``repeat`` calls, ms."""
    times = []
    for i in range(repeat):
        began = time.thread_time()
        work(i)
        times.append(time.thread_time() - began)
    times.sort()
    return 1000 * times[repeat // 2]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        con = duckdb.connect(str(Path(tmp) / "cost.duckdb"), config={"threads": 1})
        for sql in (*SESSION_SCHEMA, *store._SCHEMA):
            con.execute(sql)
        con.execute("CREATE TABLE plain (a VARCHAR, b BIGINT, c VARCHAR)")
        seq = iter(range(10**9))

        def events(n: int) -> Callable[[int], object]:
            return lambda i: insert_event_rows(con, [
                ["app", "u", "s", next(seq), uuid.uuid4().hex, "", "user", "", "user", "", 1.0, 10, 2.0,
                 '{"content": "' + "word " * 300 + '"}'] for _ in range(n)])

        empty_call = [None] * len(store.CALL_COLUMNS)
        rows = [
            ("SELECT 1", lambda i: con.execute("SELECT 1")),
            ("insert 1 row, 3 columns, no key", lambda i: con.execute("INSERT INTO plain VALUES (?, ?, ?)",
                                                                      ["x", i, "y"])),
            ("serve_conversations, 1 row, ON CONFLICT", lambda i: con.execute(
                store._UPSERT_CONVERSATIONS, [["t"], [f"c{i}"], [f"s{i}"], ["new"], [1.0]])),
            ("serve_prefixes, 8 rows, ON CONFLICT", lambda i: con.execute(
                store._INSERT_PREFIXES, [["t"] * 8, [uuid.uuid4().hex for _ in range(8)], ["c"] * 8, list(range(8))])),
            ("events (ledger), 1 row", events(1)),
            ("events (ledger), 8 rows", events(8)),
            ("serve_calls, 1 row", lambda i: con.execute(store._INSERT_CALLS, store._columns([empty_call]))),
            ("serve_calls, 20 rows", lambda i: con.execute(store._INSERT_CALLS, store._columns([empty_call] * 20))),
        ]
        print(f"duckdb {duckdb.__version__}, one thread, a file; CPU per statement (median of 100)")
        for name, work in rows:
            print(f"  {name:42s} {median_ms(work):6.2f} ms")
        con.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
