"""The serve proxy's RSS over large requests, sampled every 50 ms: its peak while each request is
handled, and 1 s and 3 s after its answer (what ``bench_serve.py --large`` prints once, at 1 s).

    .venv/bin/python benchmarks/perf/large_rss_trace.py [--watchdog DUMPS.txt] 8 [proxy args, e.g. --max-conversation-bytes 1000000]

Each request is a new conversation of fifteen 3.9 MB messages (about 60 MB), as in
``bench_serve.py --large``, sent to the same stub upstream. With ``--watchdog`` the proxy runs
under ``loop_watchdog.py`` (every stall of its event loop over 40 ms dumps the threads' stacks),
and the number of stalls is printed at the end.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_serve as bench  # noqa: E402


def main(argv: list[str]) -> int:
    dumps = None
    if argv[:1] == ["--watchdog"]:
        dumps, argv = argv[1], argv[2:]
    count, proxy_args = int(argv[0]), argv[1:]
    command = ["-m", "agentlab.serve"] if dumps is None else [str(Path(__file__).parent / "loop_watchdog.py"), dumps]
    upstream = bench.StubUpstream()
    with tempfile.TemporaryDirectory() as tmp:
        proxy, url = bench.start([*command, "--upstream", upstream.base_url, "--arm", "passthrough",
                                  "--port", "0", "--db", str(Path(tmp) / "large.duckdb"), "--no-fsync",
                                  "--context-window", "131072", *proxy_args], r"serving (\S+/v1)")
        samples: list[tuple[float, float]] = []
        done = threading.Event()
        began = time.perf_counter()

        def sample() -> None:
            while not done.is_set():
                samples.append((time.perf_counter() - began, bench.rss_mb(proxy.pid)))
                time.sleep(0.05)

        threading.Thread(target=sample, daemon=True).start()
        try:
            print(f"{'#':>3}{'seconds':>9}{'worst /health ms':>18}{'peak MB':>9}{'+1 s MB':>9}{'+3 s MB':>9}")
            for i in range(count):
                raw, _ = bench.large_body(i)
                start = time.perf_counter() - began
                _, took, worst = asyncio.run(bench.one_large(url, raw))  # ends 1 s after the answer
                one = bench.rss_mb(proxy.pid)
                time.sleep(2.0)
                peak = max(r for t, r in samples if t >= start)
                print(f"{i + 1:>3}{took:>9.1f}{worst:>18.0f}{peak:>9.0f}{one:>9.0f}{bench.rss_mb(proxy.pid):>9.0f}",
                      flush=True)
        finally:
            done.set()
            bench.stop(proxy)
            upstream.close()
    if dumps is not None:
        stalls = Path(dumps).read_text().count("Timeout (")
        print(f"event loop stalls over 40 ms: {stalls} (stacks in {dumps})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
