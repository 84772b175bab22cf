"""``python -m agentlab.serve`` with a watchdog of its event loop, to find what holds the loop.

    .venv/bin/python benchmarks/perf/loop_watchdog.py DUMPS.txt [agentlab.serve arguments]

A callback on the loop re-arms ``faulthandler.dump_traceback_later(0.04)`` every 10 ms; when the
loop has not run for 40 ms, faulthandler's own thread writes every thread's stack to DUMPS.txt
without the interpreter lock, so the holder is caught in the act. ``large_rss_trace.py --watchdog
DUMPS.txt`` runs the proxy this way.
"""

from __future__ import annotations

import asyncio
import faulthandler
import sys
from typing import Any

import agentlab.serve.server as server
from agentlab.serve.__main__ import main

#: Seconds without the loop running that make a dump.
STALL = 0.04
#: Seconds between re-arms.
EVERY = 0.01


def watched(dumps: Any) -> Any:
    """``serve_forever`` with the watchdog writing to ``dumps``."""
    serve_forever = server.serve_forever

    async def run(config: Any, ready: Any = None) -> None:
        loop = asyncio.get_running_loop()

        def arm() -> None:
            faulthandler.dump_traceback_later(STALL, file=dumps)
            loop.call_later(EVERY, arm)

        arm()
        await serve_forever(config, ready)

    return run


if __name__ == "__main__":
    out = open(sys.argv[1], "w")  # noqa: SIM115 - open for the process's life
    server.serve_forever = watched(out)  # main() imports it from the module when it runs
    raise SystemExit(main(sys.argv[2:]))
