"""Latency the serve proxy adds, and its throughput, against the local test server (prints figures).

    .venv/bin/python benchmarks/perf/bench_serve.py [--concurrency 1,16,64] [--turns 6] [--rounds 3]
                                                    [--arms passthrough,compaction] [--proxy-args '...']
    .venv/bin/python benchmarks/perf/bench_serve.py --large 20 [--large-mb 60]

The upstream is ``agentlab.testing.openai_server`` and the proxy ``python -m agentlab.serve``, each
in its own process (so neither shares an interpreter lock with the load generator). For each arm
and each number C of concurrent conversations, C conversations of ``--turns`` turns run at once,
straight to the upstream and through the proxy (prefix-keyed: no conversation header, the proxy
finds each conversation by its history), alternating ``--rounds`` times (direct, proxy, direct,
proxy, ...) so that both sides see the same machine load; the percentiles pool the rounds. A turn is a user question, a tool round the client
already ran (a ~1,400-token result, so compaction has something to do from the third turn on) and
the model's answer; the history grows every turn.

Printed per arm and C:

* ``direct p50/p99`` and ``proxy p50/p99``: client-side latency of one call, ms;
* ``added p50/p99``: proxy percentile minus the direct one (what a client notices);
* ``in-proxy p50/p99``: per call, the proxy's own latency minus the time it waited on the upstream
  (from ``serve_calls``: ``latency_ms - upstream_ms``), the overhead without client-side noise;
* ``calls/s``: calls / wall time, direct and through the proxy;
* ``cpu ms/call``: CPU time the proxy process spent per proxied call (all its threads, from
  ``/proc``); it rises too when the machine's host is busy, so compare trees by alternating them;
  ``loop``: the part of it on the proxy's main thread, where its event loop runs (the rest is the
  ledger writer and the worker threads).

The goal lines also give the added p50 of each (direct, proxy) round pair, lowest to highest: how
far one round moves the figure on this machine, and how many commits stored the ledger's events.
``--arms bare-relay,passthrough`` adds ``bare_relay.py``, a relay that only forwards bytes: what any
Python proxy costs here (its in-proxy columns are NaN: it logs nothing).

``--large N`` measures something else: N accepted requests of 60 MB (each a new conversation, 4 MB
messages) to a stub upstream that answers at once, with ``/health`` polled every 10 ms meanwhile
by a process of its own:
the worst ``/health`` latency per request (how long the large one held up other calls) and the
proxy's RSS after each (the idle conversations' ledger text is bounded by ``--max-conversation-bytes``;
the RSS is what the whole process holds, the database's buffers and the allocator's free lists included).

The goal (on this machine): added p50 <= 5 ms and p99 <= 25 ms at 16 conversations. The load
average is printed before and after; on a shared machine everything else running inflates the
figures.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
GOAL_P50_MS = 5.0
GOAL_P99_MS = 25.0
GOAL_CONCURRENCY = 16
#: The pseudo-arm that runs ``bare_relay.py`` instead of the proxy: the floor to read the arms against.
BARE_RELAY = "bare-relay"
RESULT = " ".join(f"Row {i}: the Lisbon office logged {i * 7} visits on day {i}." for i in range(110))


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def start(args: list[str], pattern: str) -> tuple[subprocess.Popen[str], str]:
    """Start a server process; return it and the base URL it prints."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(pattern, line)
    if match is None:
        proc.kill()
        raise RuntimeError(f"{args[1]} did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, match.group(1)


def stop(proc: subprocess.Popen[str]) -> None:
    """End a server as a supervisor does: SIGTERM (the proxy commits its queued writes), then wait.

    Not SIGINT: a shell without job control (``nohup ... &``, a CI step's ``&``) starts its background
    commands with SIGINT ignored, which the proxy then rightly keeps, so a SIGINT waited 30 s and
    the kill after it left the file locked for the next read. A server that outlives 30 s is
    killed and waited for, so its lock is gone when this returns.
    """
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        print(f"note: {' '.join(proc.args[1:3])} did not end 30 s after SIGTERM; killed", file=sys.stderr)
        proc.kill()
        proc.wait()


async def conversation(client: httpx.AsyncClient, url: str, index: int, turns: int, run: str,
                       latencies: list[float]) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are assistant {index} of run {run}; answer about the offices."}]
    for turn in range(turns):
        call_id = f"call_{run}_{index}_{turn}"
        messages += [
            {"role": "user", "content": f"Conversation {index}, question {turn}: how busy was Lisbon?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "search_logs", "arguments": '{"query": "Lisbon visits"}'}}]},
            {"role": "tool", "tool_call_id": call_id, "content": RESULT},
        ]
        began = time.perf_counter()
        response = await client.post(url + "/chat/completions", json={"model": "test-model", "messages": messages})
        latencies.append((time.perf_counter() - began) * 1000)
        response.raise_for_status()
        messages.append({"role": "assistant", "content": response.json()["choices"][0]["message"]["content"]})


async def load(url: str, concurrency: int, turns: int, run: str) -> tuple[list[float], float]:
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits, headers={"authorization": "Bearer bench"}) as client:
        began = time.perf_counter()
        await asyncio.gather(*(conversation(client, url, i, turns, run, latencies) for i in range(concurrency)))
        wall = time.perf_counter() - began
    return latencies, wall


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds the threads of a process have run so far, and those of its main thread alone
    (Linux ``/proc``; NaN elsewhere).

    The sum of each thread's ``schedstat`` (nanoseconds), not ``stat``'s user + system time, which
    counts in clock ticks (10 ms): over the 18 calls of one conversation of 6 turns, 3 rounds,
    one tick is 0.56 ms a call. A thread that ends between two readings is left out of the second;
    the proxy's threads (the event loop, the writer, the executors' workers) live as long as it does.
    """
    total = main = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                ns = int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # the thread ended meanwhile
            total += ns
            main += ns if task.name == str(pid) else 0
    except OSError:
        return float("nan"), float("nan")
    return total / 1e9, main / 1e9


def ledger_commits(db: str) -> tuple[int, int]:
    """Ledger events and the commits that stored them (one ``appended_at`` per group commit)."""
    import duckdb

    with duckdb.connect(db, read_only=True) as con:
        row = con.execute("SELECT count(*), count(DISTINCT appended_at) FROM events").fetchone()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


def in_proxy_ms(db: str) -> list[float]:
    from agentlab.serve.analysis import serve_calls_df

    calls = serve_calls_df(db)
    return [float(x) for x in calls.loc[calls["status"] == 200, "proxy_ms"]]


class StubUpstream:
    """A chat-completions upstream that reads each body and answers at once (it costs the large
    mode nothing: the test server would tokenize every 60 MB prompt)."""

    def __init__(self) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        answer = json.dumps({"id": "c", "object": "chat.completion", "created": 1, "model": "test-model",
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": "ok"}}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MB (Linux ``/proc``; NaN elsewhere)."""
    try:
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return float("nan")
    return int(line.split()[1]) / 1024


#: The ``/health`` poller, a process of its own: in the benchmark's event loop, which also sends the
#: 60 MB body, a poll waited for that loop as well as for the proxy.
_HEALTH_POLLER = r"""
import http.client, os, sys, threading, time
host, port = sys.argv[1], int(sys.argv[2])
state = {"worst": 0.0, "active": False, "began": None}
lock = threading.Lock()
def control():
    for line in sys.stdin:
        with lock:
            if line.strip() == "start":
                state["worst"], state["active"] = 0.0, True
            else:  # a poll still waiting counts for as long as it has waited
                waited = 0.0 if state["began"] is None else time.perf_counter() - state["began"]
                state["active"] = False
                print(f"{max(state['worst'], waited) * 1000:.3f}", flush=True)
    os._exit(0)
con = http.client.HTTPConnection(host, port, timeout=600)
con.request("GET", "/health"); con.getresponse().read()
print("ready", flush=True)
threading.Thread(target=control, daemon=True).start()
while True:
    began = state["began"] = time.perf_counter()
    con.request("GET", "/health"); con.getresponse().read()
    took = time.perf_counter() - began
    with lock:
        state["began"] = None
        if state["active"]:
            state["worst"] = max(state["worst"], took)
    time.sleep(0.01)
"""


class HealthPoller:
    """Polls ``/health`` every 10 ms from a process of its own; :meth:`worst_ms` is the slowest
    answer between :meth:`start` and it.
    """

    def __init__(self, url: str) -> None:
        address = url.split("://", 1)[1].split("/", 1)[0]
        host, port = address.rsplit(":", 1)
        self.process = subprocess.Popen([sys.executable, "-c", _HEALTH_POLLER, host, port], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        if self.stdout.readline().strip() != "ready":
            raise RuntimeError("the /health poller did not start")

    def start(self) -> None:
        self.stdin.write("start\n")
        self.stdin.flush()

    def worst_ms(self) -> float:
        self.stdin.write("stop\n")
        self.stdin.flush()
        line = self.stdout.readline()
        if not line:
            raise RuntimeError("the /health poller stopped (did the proxy stop answering?)")
        return float(line)

    def close(self) -> None:
        self.stdin.close()
        self.process.wait(timeout=10)


async def one_large(url: str, raw: bytes) -> tuple[int, float, float]:
    """Send one large body while ``/health`` is polled every 10 ms by another process: (status,
    seconds, worst /health ms).
    """
    poller = HealthPoller(url)
    try:
        async with httpx.AsyncClient(timeout=600) as client:
            poller.start()
            began = time.perf_counter()
            response = await client.post(url + "/chat/completions", content=raw,
                                         headers={"content-type": "application/json"})
            took = time.perf_counter() - began
            await asyncio.sleep(1.0)  # what the proxy does after the answer (its ledger write) counts too
            worst = poller.worst_ms()
    finally:
        poller.close()
    return response.status_code, took, worst


def large_body(index: int, megabytes: float = 60.0) -> tuple[bytes, int]:
    """The body of large request ``index`` (a new conversation of 3.9 MB messages, about
    ``megabytes`` MB in all) and how many messages it has.
    """
    import json

    per_message = 3_900_000
    words = f"request {index} " + "word " * (per_message // 5)
    messages = [{"role": "user" if k % 2 == 0 else "assistant", "content": f"{k} {words}"}
                for k in range(max(1, round(megabytes * 1e6 / per_message)))]
    return json.dumps({"model": "test-model", "messages": messages}).encode(), len(messages)


def large_requests(count: int, megabytes: float, proxy_args: list[str], rss_budget: float = 1024.0) -> None:
    """``count`` accepted requests of ``megabytes`` MB each (new conversations, 4 MB messages), each
    with ``/health`` polled meanwhile; the proxy's RSS after each. Prints one line per request."""
    upstream = StubUpstream()
    with tempfile.TemporaryDirectory() as tmp:
        proxy, url = start(["-m", "agentlab.serve", "--upstream", upstream.base_url, "--arm", "passthrough",
                            "--port", "0", "--db", str(Path(tmp) / "large.duckdb"), "--no-fsync",
                            "--context-window", "131072", *proxy_args], r"serving (\S+/v1)")
        try:
            print(f"large requests: {count} of {megabytes:g} MB (passthrough, new conversation each); "
                  f"RSS at start {rss_mb(proxy.pid):.0f} MB")
            print(f"{'#':>3}{'status':>8}{'seconds':>9}{'worst /health ms':>18}{'RSS MB':>9}")
            worsts: list[float] = []
            rsss: list[float] = []
            sent = 0  # messages sent
            for i in range(count):
                raw, messages = large_body(i, megabytes)
                sent += messages
                status, took, worst = asyncio.run(one_large(url, raw))
                worsts.append(worst)
                rsss.append(rss_mb(proxy.pid))
                print(f"{i + 1:>3}{status:>8}{took:>9.1f}{worst:>18.0f}{rss_mb(proxy.pid):>9.0f}", flush=True)
            print(f"worst /health: median {statistics.median(worsts):.0f} ms, max {max(worsts):.0f} ms; "
                  f"RSS after {count}: {rss_mb(proxy.pid):.0f} MB")
            half = rsss[len(rsss) // 2:]
            flat = len(rsss) < 4 or max(half) <= max(rsss[:len(rsss) // 2]) * 1.1
            print(f"RSS budget {rss_budget:.0f} MB (the idle conversations' --max-conversation-bytes, 256 MiB by "
                  f"default, + the copies of the requests in flight or being written, + DuckDB's buffers, + the "
                  f"interpreter): max {max(rsss):.0f} MB -> {'within' if max(rsss) <= rss_budget else 'OVER'}; "
                  f"second half's max {max(half):.0f} MB vs first half's {max(rsss[:max(1, len(rsss) // 2)]):.0f} MB "
                  f"-> {'flat' if flat else 'GROWING'}")
        finally:
            stop(proxy)
            upstream.close()
        stored_events, stored_chars, outcomes = ledger_stored(str(Path(tmp) / "large.duckdb"))
        # The ledger's text folder (``agentlab.session.duckdb_texts.texts_folder``), named here so that
        # this script also measures a commit from before it.
        text_files = list((Path(tmp) / "large.duckdb.texts").glob("*/*.txt"))
        print(f"ledger: {stored_events} events stored of the {sent} messages sent + {count} answers "
              f"({stored_chars / 1e6:.1f} M characters of event JSON in the table, "
              f"{sum(f.stat().st_size for f in text_files) / 1e6:.0f} MB in {len(text_files)} text files beside it); "
              f"call outcomes {outcomes} -> "
              f"{'complete' if stored_events == sent + count else 'INCOMPLETE'}")


def ledger_stored(db: str) -> tuple[int, int, dict[str, int]]:
    """Events in the ledger, their JSON's characters and the call outcomes of a stopped proxy's file."""
    import duckdb

    with duckdb.connect(db, read_only=True) as con:
        row = con.execute("SELECT count(*), coalesce(sum(length(event_json)), 0) FROM events").fetchone()
        outcomes = dict(con.execute("SELECT outcome, count(*) FROM serve_calls GROUP BY outcome").fetchall())
    assert row is not None
    return int(row[0]), int(row[1]), {str(k): int(v) for k, v in outcomes.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", default="1,16,64", help="conversations at once (default 1,16,64)")
    p.add_argument("--turns", type=int, default=6, help="turns per conversation (default 6)")
    p.add_argument("--arms", default="passthrough,compaction", help="arms to measure (default passthrough,compaction)")
    p.add_argument("--latency", type=float, default=0.02, help="upstream seconds per completion (default 0.02)")
    p.add_argument("--rounds", type=int, default=3, help="direct/proxy alternations per arm and level (default 3)")
    p.add_argument("--no-fsync", action="store_true", help="run the proxy with --no-fsync")
    p.add_argument("--writer-nice", type=int, help="run the proxy with --writer-nice N (default: the proxy's)")
    p.add_argument("--proxy-args", default="", help="more options for the proxy, quoted ('--ledger-linger 0.1')")
    p.add_argument("--large", type=int, default=0, metavar="N",
                   help="instead: N accepted requests of --large-mb MB each, /health polled meanwhile, RSS after each")
    p.add_argument("--large-mb", type=float, default=60.0, help="size of each --large request, MB (default 60)")
    p.add_argument("--rss-budget-mb", type=float, default=1024.0,
                   help="--large: the proxy's RSS must stay under this, MB (default 1024)")
    args = p.parse_args()
    if args.large:
        print(f"load average before: {load_average()} ({os.cpu_count()} cores)")
        large_requests(args.large, args.large_mb, shlex.split(args.proxy_args), args.rss_budget_mb)
        print(f"load average after: {load_average()}")
        return 0
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    levels = [int(c) for c in args.concurrency.split(",")]
    if GOAL_CONCURRENCY not in levels:
        print(f"note: --concurrency has no {GOAL_CONCURRENCY}: the goal is not checked")
    print(f"load average before: {load_average()} ({os.cpu_count()} cores)")
    try:
        busy_before = os.getloadavg()[0] if os.getloadavg()[0] > (os.cpu_count() or 1) / 2 else 0.0
    except OSError:
        busy_before = 0.0
    print(f"upstream latency {args.latency * 1000:.0f} ms, {args.turns} turns per conversation, "
          f"fsync {'off' if args.no_fsync else 'on'}, writer niceness "
          f"{'the default' if args.writer_nice is None else args.writer_nice}")
    upstream, upstream_url = start(["-m", "agentlab.testing.openai_server", "--latency", str(args.latency),
                                    "--no-tool-calls"], r"serving (\S+/v1)")
    header = (f"{'arm':<12}{'C':>4}{'calls':>7}{'direct p50':>11}{'p99':>8}{'proxy p50':>11}{'p99':>8}"
              f"{'added p50':>11}{'p99':>8}{'in-proxy p50':>14}{'p99':>8}{'direct/s':>10}{'proxy/s':>9}"
              f"{'cpu ms/call':>13}{'loop':>6}")
    rows: list[str] = []
    verdict: list[str] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for arm in args.arms.split(","):
                for concurrency in levels:
                    db = str(Path(tmp) / f"{arm.replace('+', '_')}-{concurrency}.duckdb")
                    relay = arm == BARE_RELAY
                    command = ["-m", "agentlab.serve", "--upstream", upstream_url, "--arm", arm, "--port", "0",
                               "--db", db, "--context-window", "131072"]
                    command += ["--no-fsync"] if args.no_fsync else []
                    command += [] if args.writer_nice is None else ["--writer-nice", str(args.writer_nice)]
                    command += shlex.split(args.proxy_args)
                    if relay:
                        command = [str(Path(__file__).with_name("bare_relay.py")), "--upstream", upstream_url]
                    proxy, proxy_url = start(command,
                                             r"serving (\S+/v1)")
                    try:
                        asyncio.run(load(proxy_url, 2, 2, "warm"))  # imports, tokenizer, first DuckDB writes
                        direct, proxied, direct_wall, proxy_wall, cpu, loop_cpu = [], [], 0.0, 0.0, 0.0, 0.0
                        pairs: list[float] = []  # added p50 of each (direct, proxy) round pair
                        for r in range(args.rounds):
                            lat, wall = asyncio.run(load(upstream_url, concurrency, args.turns, f"d{r}"))
                            pairs.append(-percentile(lat, 0.5))
                            direct, direct_wall = direct + lat, direct_wall + wall
                            cpu_before, loop_before = cpu_seconds(proxy.pid)
                            lat, wall = asyncio.run(load(proxy_url, concurrency, args.turns, f"p{r}"))
                            pairs[-1] += percentile(lat, 0.5)
                            cpu_after, loop_after = cpu_seconds(proxy.pid)
                            cpu, loop_cpu = cpu + cpu_after - cpu_before, loop_cpu + loop_after - loop_before
                            proxied, proxy_wall = proxied + lat, proxy_wall + wall
                        cpu_ms, loop_ms = cpu * 1000 / len(proxied), loop_cpu * 1000 / len(proxied)
                    finally:
                        stop(proxy)
                    # The warm-up calls left out; a bare relay logs nothing (its own time is not known).
                    inside = [math.nan] if relay else in_proxy_ms(db)[4:]
                    events, commits = (0, 0) if relay else ledger_commits(db)
                    added50 = percentile(proxied, 0.5) - percentile(direct, 0.5)
                    added99 = percentile(proxied, 0.99) - percentile(direct, 0.99)
                    rows.append(
                        f"{arm:<12}{concurrency:>4}{len(proxied):>7}{percentile(direct, .5):>11.1f}"
                        f"{percentile(direct, .99):>8.1f}{percentile(proxied, .5):>11.1f}{percentile(proxied, .99):>8.1f}"
                        f"{added50:>11.1f}{added99:>8.1f}{statistics.median(inside):>14.1f}"
                        f"{percentile(inside, .99):>8.1f}{len(direct) / direct_wall:>10.1f}{len(proxied) / proxy_wall:>9.1f}"
                        f"{cpu_ms:>13.2f}{loop_ms:>6.2f}")
                    print(rows[-1] if len(rows) > 1 else header + "\n" + rows[-1], flush=True)
                    if concurrency == GOAL_CONCURRENCY:
                        met = added50 <= GOAL_P50_MS and added99 <= GOAL_P99_MS
                        verdict.append(f"{arm}: added p50 {added50:.1f} ms, p99 {added99:.1f} ms -> "
                                       f"{'met' if met else 'NOT met'} (in-proxy p50 {statistics.median(inside):.1f} "
                                       f"ms, p99 {percentile(inside, .99):.1f} ms; {cpu_ms:.2f} ms CPU per call; "
                                       f"added p50 per round pair {min(pairs):.1f} to {max(pairs):.1f} ms, "
                                       f"median {statistics.median(pairs):.1f}"
                                       + ("" if relay else f"; {events} ledger events in {commits} commits, warm-up included")
                                       + ")")
    finally:
        stop(upstream)
    print(f"goal at {GOAL_CONCURRENCY} conversations: added p50 <= {GOAL_P50_MS:.0f} ms and p99 <= "
          f"{GOAL_P99_MS:.0f} ms")
    for line in verdict:
        print(f"  {line}")
    print(f"load average after: {load_average()} (this benchmark's three processes count in it)")
    if busy_before:
        print(f"note: the machine was busy before the run (1-minute load {busy_before:.2f} on "
              f"{os.cpu_count()} cores): other work inflated these latencies and the CPU per call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
