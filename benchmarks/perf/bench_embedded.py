"""Speed of the embedded model and of the demo (prints figures; asserts nothing).

Two parts, so the next change to the demo path can be measured against this one::

    .venv/bin/python benchmarks/perf/bench_embedded.py [--sizes 2000,6000] [--generate 64] [--no-demo]

1. **Server throughput.** One request at a time on the embedded llama.cpp server: a prompt of
   about N tokens of meeting-like text (a fresh nonce first, so no cached prefix is reused) and
   ``--generate`` tokens generated with end-of-sequence ignored. Prompt and generation tok/s are
   the server's own ``timings`` (``prompt_per_second``, ``predicted_per_second``).
2. **The demo.** ``python -m agentlab.bench qmsum --mode recall`` in a subprocess, on a fresh
   results DB and an empty call cache (both in a temporary folder), timed end to end; then its
   model time split by call purpose (summary / answer / judge) and by mode, from the ``calls``
   table. The demo's calls run one after another (its cases are one meeting's questions), so the
   purposes' latencies add up to the model's share of the wall time; the rest is start-up, loading
   the data and choosing the cases.

The machine's load average is printed before and after: on a shared machine the figures are
inflated by everything else running.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FILLER = ("Speaker A: I think the remote control should have fewer buttons and a rubber case. "
          "Speaker B: The marketing report says young users want a fancy look and voice control. ")


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def post(url: str, body: dict[str, Any], timeout: float = 900.0) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # 127.0.0.1 only
        return json.loads(response.read())


def prompt_of(address: str, target_tokens: int) -> str:
    """Meeting-like text of about ``target_tokens`` tokens (the model's count), after a fresh nonce."""
    text = f"[{uuid.uuid4().hex}] " + FILLER
    while True:
        n = len(post(f"{address}/tokenize", {"content": text})["tokens"])
        if n >= target_tokens:
            return text
        text += FILLER * max(1, (target_tokens - n) // 40)


def server_throughput(sizes: list[int], generate: int) -> None:
    from agentlab.model.embedded import EmbeddedServer

    server = EmbeddedServer.shared().start()
    assert server.address is not None
    print(f"embedded server: {server.parallel_slots} slots x {server.context_window} tokens, "
          f"{server.threads} generation thread(s), {server.batch_threads} prompt thread(s), "
          f"started in {server.startup_seconds:.1f} s")
    print(f"{'prompt tokens':>14} {'prompt tok/s':>13} {'generated':>10} {'gen tok/s':>10} {'wall s':>8}")
    for size in sizes:
        text = prompt_of(server.address, size)
        started = time.perf_counter()
        out = post(f"{server.address}/v1/chat/completions",
                   {"messages": [{"role": "user", "content": text}], "max_tokens": generate,
                    "temperature": 0.0, "ignore_eos": True})
        wall = time.perf_counter() - started
        timings = out.get("timings") or {}
        print(f"{timings.get('prompt_n', 0):>14} {timings.get('prompt_per_second', 0.0):>13.1f} "
              f"{timings.get('predicted_n', 0):>10} {timings.get('predicted_per_second', 0.0):>10.1f} {wall:>8.1f}")
    server.stop()


def demo_split() -> None:
    import duckdb

    with tempfile.TemporaryDirectory(prefix="bench-embedded-") as folder:
        db = Path(folder) / "demo.duckdb"
        env = {**os.environ, "AGENTLAB_CACHE_DB": str(Path(folder) / "cache.duckdb")}
        command = [sys.executable, "-m", "agentlab.bench", "qmsum", "--mode", "recall", "--db", str(db),
                   "--no-progress"]
        print(f"\ndemo: {' '.join(command[1:])} (fresh DB, empty call cache)")
        started = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            print(f"the demo failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
            return
        con = duckdb.connect(str(db), read_only=True)
        rows = con.execute(
            "SELECT r.mode, k.purpose, count(*), sum(k.latency_ms) / 1000, sum(k.prompt_tokens), "
            "sum(k.cached_tokens), sum(k.completion_tokens) FROM calls k JOIN runs r USING (run_id) "
            "WHERE NOT k.cache_hit GROUP BY ALL ORDER BY r.mode, k.purpose").fetchall()
        replayed = con.execute("SELECT count(*) FROM calls WHERE cache_hit").fetchone()
        con.close()
    print(f"wall time {wall:.1f} s")
    print(f"{'mode':<13} {'purpose':<8} {'calls':>5} {'model s':>8} {'prompt tok':>10} {'cached':>8} "
          f"{'generated':>9}")
    by_purpose: dict[str, float] = {}
    for mode, purpose, calls, seconds, prompt, cached, completion in rows:
        by_purpose[purpose] = by_purpose.get(purpose, 0.0) + float(seconds or 0.0)
        print(f"{mode:<13} {purpose:<8} {calls:>5} {float(seconds or 0):>8.1f} {int(prompt or 0):>10} "
              f"{int(cached or 0):>8} {int(completion or 0):>9}")
    model_time = sum(by_purpose.values())
    split = ", ".join(f"{p} {s:.1f} s" for p, s in sorted(by_purpose.items()))
    print(f"split: {split}; other (start-up, data, case choice) {wall - model_time:.1f} s")
    print(f"calls replayed from the call cache within the run: {replayed[0] if replayed else 0}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,6000", help="prompt sizes in tokens (comma-separated)")
    parser.add_argument("--generate", type=int, default=64, help="tokens generated per request")
    parser.add_argument("--no-demo", action="store_true", help="only the server throughput")
    args = parser.parse_args(argv)
    print(f"load average before: {load_average()}")
    server_throughput([int(s) for s in args.sizes.split(",") if s.strip()], args.generate)
    if not args.no_demo:
        demo_split()
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
