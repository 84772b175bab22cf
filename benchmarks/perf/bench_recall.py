"""Speed of lexical ``session_search`` over one large session (prints figures; asserts nothing).

Targets from the issue: index build under 1 s per 10,000 events, and p50 under 10 ms per search
once the index is built. Run::

    .venv/bin/python benchmarks/perf/bench_recall.py [--events 10000] [--queries 300] [--seed 7]

The session is synthetic but shaped like a tool-using chat: user questions, assistant answers
and tool results (one in ten is several KB), drawn from a fixed vocabulary with a fixed seed.
Queries are 2-4 words from the same vocabulary (hits), plus a set of words that occur nowhere
(misses: they exercise the query expansion and the in-session scan fallback, the slow path).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from agentlab.core.invocation import Invocation
from agentlab.events import Event, Message, ToolCall
from agentlab.recall import RecallPolicy
from agentlab.recall.search import index_for, session_search
from agentlab.session.base import Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService

APP, USER, SESSION = "bench", "user", "big"


def vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


def sentence(rng: random.Random, words: list[str], n: int) -> str:
    # Zipf-like choice: a few words are common, most are rare (as in real text).
    return " ".join(words[min(int(rng.paretovariate(1.1)) - 1, len(words) - 1)] if rng.random() < 0.5
                    else rng.choice(words) for _ in range(n))


async def build_session(n_events: int, seed: int) -> tuple[InMemorySessionService, list[str], list[Event]]:
    rng = random.Random(seed)
    words = vocabulary(rng)
    # A cheap token counter: the benchmark measures recall, not tiktoken.
    svc = InMemorySessionService(token_counter=lambda e: len(e.text) // 4)
    session = await svc.create_session(APP, USER, SESSION)
    clock = 1_700_000_000.0
    events: list[Event] = []
    i = 0
    while len(events) < n_events:
        clock += 1
        kind = i % 4
        if kind == 0:
            msg = Message.user(sentence(rng, words, rng.randint(8, 30)))
        elif kind == 1:
            msg = Message.assistant("", tool_calls=(ToolCall(f"c{i}", "lookup", '{"q": "x"}'),))
        elif kind == 2:
            size = rng.randint(300, 900) if rng.random() < 0.1 else rng.randint(20, 80)
            msg = Message.tool(f"c{i - 1}", "lookup", sentence(rng, words, size))
        else:
            msg = Message.assistant(sentence(rng, words, rng.randint(10, 40)))
        events.append(await svc.append_event(session, Event(author=msg.role, choices=[msg], timestamp=clock)))
        i += 1
    return svc, words, events


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    started = time.perf_counter()
    svc, words, events = await build_session(args.events, args.seed)
    print(f"session: {len(events)} events appended in {time.perf_counter() - started:.2f} s (setup, not measured)")

    session = await svc.get_session(APP, USER, SESSION)
    assert session is not None
    policy = RecallPolicy()
    index = index_for(svc, APP, USER)

    t0 = time.perf_counter()
    await index.refresh()
    t1 = time.perf_counter()
    index.index.lexical.build()
    t2 = time.perf_counter()
    print(f"index build: {t2 - t0:.3f} s for {index.indexed_events} searchable events "
          f"(tokenise+add {t1 - t0:.3f} s, fold into the BM25 index {t2 - t1:.3f} s); target < 1 s per 10,000 events")

    inv = Invocation(app_name=APP, user_id=USER, session=session, session_service=svc,
                     agent=None, message=Message.user("bench"))  # type: ignore[arg-type]
    rng = random.Random(args.seed + 1)
    hit_queries = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 4))) for _ in range(args.queries)]
    miss_queries = [f"zzq{n}x unknownterm{n}" for n in range(max(20, args.queries // 10))]

    for q in hit_queries[:5]:  # warm caches (numpy, the index) before timing
        await session_search(inv, policy, q, scope="current_session")

    async def timed(queries: list[str], scope: str) -> tuple[list[float], int]:
        latencies, results = [], 0
        for q in queries:
            s = time.perf_counter()
            out = await session_search(inv, policy, q, scope=scope)
            latencies.append((time.perf_counter() - s) * 1000)
            results += out["count"]
        return latencies, results

    lat, found = await timed(hit_queries, "current_session")
    print(f"session_search current_session (lexical), {len(lat)} queries: p50 {statistics.median(lat):.2f} ms, "
          f"p95 {percentile(lat, 0.95):.2f} ms, max {max(lat):.2f} ms, mean hits {found / len(lat):.1f}; "
          "target p50 < 10 ms")

    midpoint = events[len(events) // 2]
    boundary = SummaryBoundary(cutoff_at=midpoint.timestamp, last_event_id=midpoint.id)
    await svc.write_summary(session, "", Summary(text="first half summarised", boundary=boundary))
    lat, found = await timed(hit_queries, "current_hidden")
    print(f"session_search current_hidden (half the session hidden): p50 {statistics.median(lat):.2f} ms, "
          f"p95 {percentile(lat, 0.95):.2f} ms, mean hits {found / len(lat):.1f}")

    lat, found = await timed(miss_queries, "current_session")
    print(f"session_search misses (expansion + 10,000-event scan fallback), {len(lat)} queries: "
          f"p50 {statistics.median(lat):.2f} ms, p95 {percentile(lat, 0.95):.2f} ms, hits {found}")

    # Incremental cost: one new event, then the next search indexes it (no rebuild of the BM25 index).
    await svc.append_event(session, Event(author="user", choices=[Message.user("a brand new remark")],
                                          timestamp=events[-1].timestamp + 1))
    s = time.perf_counter()
    await session_search(inv, policy, "brand new remark", scope="current_session")
    print(f"first search after one append (incremental add): {(time.perf_counter() - s) * 1000:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
