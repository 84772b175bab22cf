"""What a DuckDB checkpoint costs as a table of large strings grows (prints one line per step).

    .venv/bin/python benchmarks/perf/duckdb_checkpoint_growth.py [--steps 10] [--no-key]
    .venv/bin/python benchmarks/perf/duckdb_checkpoint_growth.py --ledger rows|files [--steps 10]

Each step inserts fifteen 3.9 MB strings (one at a time, each its own commit, as the proxy's
ledger writes a 60 MB request row by row) into a table shaped like the ledger's (a text key, a
sequence number, the text; a primary key on the first two unless ``--no-key``), then runs
``CHECKPOINT``. It prints the CPU seconds of the inserts (DuckDB checkpoints on its own once its
write-ahead log passes ``checkpoint_threshold``, 16 MB by default, so they include checkpoints)
and of the explicit checkpoint, and the process's resident and peak memory. When a checkpoint
rewrites the whole last row group (DuckDB keeps up to 122,880 rows in one, so a few hundred large
rows are all in it), both times and the peak grow with every step.

``--ledger rows`` appends the same texts as events through the session store
(``DuckDBSessionService``, each text in its row), ``--ledger files`` through the session store as
the serve proxy opens it (``text_file_over``: texts over 64 Ki characters in files beside the
database, :mod:`agentlab.session.duckdb_texts`).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path

import duckdb


def rss_mb() -> int:
    """Resident memory of this process, MB (Linux ``/proc``)."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10, help="steps of fifteen 3.9 MB strings (default 10)")
    p.add_argument("--no-key", action="store_true", help="the table without its primary key")
    p.add_argument("--ledger", choices=("rows", "files"),
                   help="append events through the session store instead, texts in their rows or in files")
    args = p.parse_args()
    if args.ledger:
        return asyncio.run(ledger_steps(args.steps, args.ledger == "files"))
    key = "" if args.no_key else ", PRIMARY KEY (k, seq)"
    text = "word " * (3_900_000 // 5)
    print(f"duckdb {duckdb.__version__}, one worker thread, primary key {'no' if args.no_key else 'yes'}")
    print(f"{'step':>4}{'insert cpu s':>14}{'checkpoint cpu s':>18}{'RSS MB':>8}{'peak MB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        con = duckdb.connect(str(Path(tmp) / "growth.duckdb"), config={"threads": 1})
        con.execute(f"CREATE TABLE t (k VARCHAR, seq BIGINT, body VARCHAR{key})")
        seq = 0
        for step in range(args.steps):
            began = time.thread_time()
            for m in range(15):
                con.execute("INSERT INTO t VALUES (?, ?, ?)", [f"s{step}", seq, f"{step} {m} {text}"])
                seq += 1
            inserted = time.thread_time()
            con.execute("CHECKPOINT")
            done = time.thread_time()
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            print(f"{step + 1:>4}{inserted - began:>14.2f}{done - inserted:>18.2f}{rss_mb():>8}{peak:>9}", flush=True)
        con.close()
    return 0


async def ledger_steps(steps: int, files: bool) -> int:
    """The same steps through the session store: fifteen events a step, each its own commit."""
    from agentlab.events import user_event
    from agentlab.session import DuckDBSessionService
    from agentlab.session.duckdb_texts import TEXT_FILE_OVER

    text = "word " * (3_900_000 // 5)
    print(f"duckdb {duckdb.__version__}, one worker thread, the session store's ledger, "
          f"texts {'in files' if files else 'in their rows'}")
    print(f"{'step':>4}{'insert cpu s':>14}{'checkpoint cpu s':>18}{'RSS MB':>8}{'peak MB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        service = DuckDBSessionService(Path(tmp) / "ledger.duckdb", token_counter=lambda event: 1, threads=1,
                                       text_file_over=TEXT_FILE_OVER if files else None)
        session = await service.create_session("bench", "u", "s")
        for step in range(steps):
            # The store's work runs in worker threads: count the whole process's CPU.
            began = time.process_time()
            for m in range(15):
                await service.append_event(session, user_event(f"{step} {m} {text}"))
                session.events.clear()  # the store's memory, not the caller's copy of the events
            inserted = time.process_time()
            await service._run(lambda con: con.execute("CHECKPOINT"))
            done = time.process_time()
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            print(f"{step + 1:>4}{inserted - began:>14.2f}{done - inserted:>18.2f}{rss_mb():>8}{peak:>9}", flush=True)
        await service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
