"""``python -m agentlab.serve`` as a child process, for tests that drive the real command line.

:func:`served_proxy` starts the proxy with ``--port 0`` in front of an upstream, reads the
``serving URL`` line it prints once it listens, yields that base URL, and stops it with SIGTERM
(then waits for it to exit), so a test sees exactly what a user who types the command sees: the
arm resolved by name, the user's extensions loaded from ``$AGENTLAB_EXTENSIONS`` in that process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

#: Seconds the stopped proxy may take to exit before the test fails.
STOP_TIMEOUT = 30.0


@contextmanager
def served_proxy(upstream: str, arm: str, db: str | Path, *, env: Mapping[str, str] | None = None,
                 args: tuple[str, ...] = ()) -> Iterator[str]:
    """Run ``python -m agentlab.serve --upstream UPSTREAM --arm ARM`` on a free port: yields its base URL.

    ``env`` is added to this process's environment (``AGENTLAB_EXTENSIONS``, say); ``args`` are
    further options. The store is ``db``, without fsync (a throwaway file). A proxy that exits
    before it listens is an ``AssertionError`` carrying its stderr.
    """
    command = [sys.executable, "-m", "agentlab.serve", "--upstream", upstream, "--arm", arm, "--port", "0",
               "--db", str(db), "--no-fsync", *args]
    served = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert served.stdout is not None
        line = served.stdout.readline()
        if not line.startswith("serving http://"):
            served.kill()
            _, err = served.communicate(timeout=STOP_TIMEOUT)
            raise AssertionError(f"python -m agentlab.serve --arm {arm} did not start: {line!r} {err}")
        yield line.split()[1]
    finally:
        if served.poll() is None:
            served.send_signal(signal.SIGTERM)
        served.communicate(timeout=STOP_TIMEOUT)
