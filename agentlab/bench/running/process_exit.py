"""Ending ``python -m agentlab.bench`` as soon as its work is stored, without the interpreter's teardown.

After a run, Python's own shutdown — freeing every module and object one by one (the sessions of
hundreds of cases, the tokenizer's tables, the HTTP clients) — took 0.3 s of the command's wall
time and up to 0.7 s on a loaded machine, after every result was already stored. :func:`finish`
does what a normal exit does that matters, in the same order, and then ends the process at once:

1. the standard streams are flushed;
2. every open call cache is written out and closed (its file checkpointed, as a normal exit leaves
   it) — the results file is closed by the command itself;
3. the ``atexit`` handlers run (Ray's shutdown, logging's flush, ...);
4. ``os._exit(code)``: the freeing of memory, which the operating system does anyway, is skipped.

When another non-daemon thread is still alive (a normal exit would wait for it) or a step fails,
the exit is the normal one (``SystemExit``), so nothing that waits for the end is cut short.
Only the command line uses it; :func:`agentlab.bench.cli.main.main` itself returns as before.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def finish(code: int) -> NoReturn:
    """End the process with ``code`` once streams, call caches and ``atexit`` handlers are done."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if others:
        raise SystemExit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        from agentlab.model.cache import close_open_caches

        close_open_caches()
    except Exception:  # e.g. a closed pipe: the normal exit reports it as it always did
        raise SystemExit(code) from None
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


__all__ = ["finish"]
