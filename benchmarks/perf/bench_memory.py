"""Speed of memory search over one user's store (prints figures; asserts nothing).

The issue asks for memory search p50 over 5,000 memories. Measured here for ``lexical`` (BM25)
and ``hybrid`` (BM25 + dense, RRF) with the deterministic hash embedder, on the in-memory and the
DuckDB backends. The first search of a user builds the index (and, for hybrid, embeds every
memory once); that cost is printed separately, then ``--queries`` searches are timed. Run::

    .venv/bin/python benchmarks/perf/bench_memory.py [--memories 5000] [--queries 300] [--seed 7]
        [--backends in-memory,duckdb]

Dense scoring is one matrix-vector product; on a busy small machine a multi-threaded BLAS can
make it much slower than single-threaded (try ``OPENBLAS_NUM_THREADS=1``).

Memories are synthetic one-sentence facts and episodes ("The user ...") drawn from a fixed
vocabulary with a fixed seed; queries are 2-5 words from the same vocabulary.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from agentlab.memory import InMemoryMemoryService
from agentlab.memory.duckdb import DuckDBMemoryService
from agentlab.recall.embed import HashEmbedder

APP, USER = "bench", "user"


def vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


def phrase(rng: random.Random, words: list[str], n: int) -> str:
    # Zipf-like: a few words are common, most are rare, as in real memories.
    return " ".join(words[min(int(rng.paretovariate(1.1)) - 1, len(words) - 1)] if rng.random() < 0.5
                    else rng.choice(words) for _ in range(n))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def fill(service, rng: random.Random, words: list[str], count: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        episode = i % 3 == 0
        await service.add(APP, USER, f"The user {phrase(rng, words, rng.randint(6, 18))}",
                          kind="episode" if episode else "fact", topics=[rng.choice(words)],
                          event_time=f"2023-{1 + i % 12:02d}-{1 + i % 28:02d}" if episode else None)
    return time.perf_counter() - started


async def measure(label: str, service, mode: str, queries: list[str]) -> None:
    started = time.perf_counter()
    await service.search(APP, USER, queries[0], top_k=10, mode=mode)
    first = (time.perf_counter() - started) * 1000
    timings = []
    hits = 0
    for query in queries:
        t0 = time.perf_counter()
        found = await service.search(APP, USER, query, top_k=10, mode=mode)
        timings.append((time.perf_counter() - t0) * 1000)
        hits += bool(found)
    print(f"{label:<10} {mode:<8} first search (index build{', embed all' if mode != 'lexical' else ''}) "
          f"{first:8.1f} ms | p50 {statistics.median(timings):6.2f} ms  p95 {percentile(timings, 0.95):6.2f} ms"
          f"  mean {statistics.fmean(timings):6.2f} ms | queries with hits {hits}/{len(queries)}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--backends", default="in-memory,duckdb",
                        help="comma-separated subset of: in-memory, duckdb")
    args = parser.parse_args()
    wanted = {b.strip() for b in args.backends.split(",") if b.strip()}
    unknown = wanted - {"in-memory", "duckdb"}
    if unknown:
        parser.error(f"--backends: unknown backend(s) {', '.join(sorted(unknown))} (use in-memory, duckdb)")

    rng = random.Random(args.seed)
    words = vocabulary(rng)
    queries = [phrase(rng, words, rng.randint(2, 5)) for _ in range(args.queries)]
    print(f"memory search over {args.memories:,} memories of one user, {args.queries} queries, top_k 10")

    with tempfile.TemporaryDirectory() as tmp:
        backends = [("in-memory", lambda: InMemoryMemoryService(HashEmbedder())),
                    ("duckdb", lambda: DuckDBMemoryService(Path(tmp) / "bench.duckdb", HashEmbedder()))]
        for label, make in backends:
            if label not in wanted:
                continue
            for mode in ("lexical", "hybrid"):
                service = make()
                await service.clear(APP, USER)
                fill_s = await fill(service, random.Random(args.seed + 1), words, args.memories)
                print(f"{label:<10} {mode:<8} stored {args.memories:,} memories in {fill_s:.2f} s")
                await measure(label, service, mode, queries)
                await service.close()


if __name__ == "__main__":
    asyncio.run(main())
