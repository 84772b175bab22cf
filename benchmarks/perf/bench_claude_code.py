"""Wall time of the LLM-free trajectory replay on the 300 Claude Code sessions (every arm, one budget).

Runs, as a subprocess so the timing includes start-up and loading,

    python -m agentlab.bench retention trajectories --set 'dataset.datasets=["claude_code"]' --arms all \
        --context-budget 65536 --cache-profile anthropic --json --no-store

and prints the wall time, the user + system CPU time of the child, the machine's load average
before and after (the machine is shared: a wall time means little without it), the number of
worker processes and the time the command reports for its own measuring. The target is five
minutes of wall time on a 2-core machine. Data from ``$AGENTLAB_DATA_DIR``.

    .venv/bin/python benchmarks/perf/bench_claude_code.py [--budget 65536] [--limit 0] [--workers N] [--json out.json] [--output tables.json] [--db rows.duckdb]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

TARGET_SECONDS = 300.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=65536, help="--context-budget of the run")
    parser.add_argument("--limit", type=int, default=0, help="the first N sessions (0 = all 300)")
    parser.add_argument("--workers", type=int, default=0, help="AGENTLAB_REPLAY_WORKERS (0 = the default)")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    parser.add_argument("--output", default="", help="also write the command's own JSON output (the tables) here")
    parser.add_argument("--db", default="", help="store the rows in this DuckDB file (default: --no-store)")
    args = parser.parse_args()
    command = [sys.executable, "-m", "agentlab.bench", "retention", "trajectories",
               "--set", 'dataset.datasets=["claude_code"]', "--arms", "all", "--context-budget", str(args.budget),
               "--cache-profile", "anthropic", "--json", "--limit", str(args.limit),
               *(["--db", args.db] if args.db else ["--no-store"])]
    env = dict(os.environ)
    if args.workers:
        env["AGENTLAB_REPLAY_WORKERS"] = str(args.workers)
    load_before = os.getloadavg()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    load_after = os.getloadavg()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        return done.returncode
    doc = json.loads(done.stdout)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(done.stdout)
    figures = {"command": " ".join(command[1:]), "wall_seconds": round(wall, 1),
               "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1), "measured_seconds": doc["seconds"],
               "sessions": doc["cases"], "arms": len({s["arm"] for s in doc["summaries"]}),
               "workers": env.get("AGENTLAB_REPLAY_WORKERS", "default"), "cpus": os.cpu_count(),
               "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
               "target_seconds": TARGET_SECONDS, "within_target": wall <= TARGET_SECONDS}
    for key, value in figures.items():
        print(f"{key:17s} {value}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
