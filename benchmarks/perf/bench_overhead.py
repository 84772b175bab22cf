"""Per-call context overhead as the history grows (prints figures; asserts nothing).

Workload: a session made of repeated 4-message units — user (~40 words), assistant with
one tool call (~10 words), tool result (~600 words), assistant answer (~60 words). Before each
model call one unit is finished and a new user input appended (4 messages per call), and
``LLMAgent.build_request`` projects the request: instruction, history, current input, compaction,
the 70 % pressure check. Two compaction policies:

* ``reference-default``: ``CompactionPolicy(enabled=True)`` (keep 1 recent unit, results over 1,024
  tokens compacted: here none is, so every message goes out);
* ``clear-old-results``: ``CompactionPolicy(enabled=True, keep_recent_requests=3,
  tool_result_max_tokens=64)`` (every tool result but the 3 most recent units' is replaced).

At each checkpoint (history of N messages) the next ``--calls`` growing calls are timed (fewer
at N = 100, so that the history stays near N; the table shows the range actually covered), through
the incremental projection and, on the same states, through the full processor chain
(``incremental_projection=False``, what every call cost before). Between checkpoints the session
grows without timing. Last, the first ``session_search`` after an append on a 10,000-event
session (the session of ``bench_recall.py``), in the in-memory store and in DuckDB. Run::

    .venv/bin/python benchmarks/perf/bench_overhead.py [--sizes 100,1000,5000,50000] [--calls 100] [--seed 7]

Times are ``time.perf_counter`` around one ``build_request`` (warm: the first call after a growth
phase is not timed). Text is drawn from ``bench_projection.py``'s vocabulary with a fixed seed;
token counts are tiktoken cl100k (the runtime's counter), printed with the results.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_projection import sentence  # noqa: E402  (a sibling script, not a package)
from bench_recall import APP, SESSION, USER, build_session  # noqa: E402

from agentlab.compaction import CompactionPolicy  # noqa: E402
from agentlab.events import Event, Message, ToolCall, user_event  # noqa: E402
from agentlab.model.base import ModelInfo  # noqa: E402
from agentlab.model.scripted import ScriptedModel  # noqa: E402
from agentlab.recall import RecallPolicy  # noqa: E402
from agentlab.recall.search import session_search  # noqa: E402
from agentlab.runtime import FunctionTool, Invocation, LLMAgent  # noqa: E402
from agentlab.session.base import Session, SessionService  # noqa: E402
from agentlab.session.duckdb import DuckDBSessionService  # noqa: E402
from agentlab.session.inmemory import InMemorySessionService  # noqa: E402

POLICIES = {
    "reference-default": CompactionPolicy(enabled=True),
    "clear-old-results": CompactionPolicy(enabled=True, keep_recent_requests=3, tool_result_max_tokens=64),
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def lookup(query: str) -> str:
    return query


class Workload:
    """One growing session and the agent that projects it."""

    def __init__(self, policy: CompactionPolicy, seed: int) -> None:
        self.rng = random.Random(seed)
        self.svc = InMemorySessionService()
        self.agent = LLMAgent("agent", ScriptedModel(default_reply="ok", info=ModelInfo("bench", 128_000)),
                              instruction="You are a logistics assistant.",
                              tools=[FunctionTool(lookup, name="lookup", description="look a record up")],
                              compaction=policy)
        self.session: Session | None = None
        self.units = 0
        self.current: Event | None = None

    async def start(self) -> None:
        self.session = await self.svc.create_session("bench", "u", "overhead")
        await self.new_input()

    @property
    def messages(self) -> int:
        assert self.session is not None
        return len(self.session.events)

    async def new_input(self) -> None:
        assert self.session is not None
        req = f"req-{self.units}"
        self.current = user_event(f"q{self.units}: {sentence(self.rng, 40)}", invocation_id=req, request_id=req)
        await self.svc.append_event(self.session, self.current)

    async def finish_unit(self) -> None:
        """The rest of the current unit: tool call, tool result, answer."""
        assert self.session is not None
        req = f"req-{self.units}"
        call = ToolCall(f"call-{self.units}", "lookup", json.dumps({"query": sentence(self.rng, 3)}))
        for event in (
            Event(author="agent", choices=[Message.assistant(sentence(self.rng, 7), [call])],
                  invocation_id=req, request_id=req),
            Event(author="agent", object="tool.response",
                  choices=[Message.tool(call.id, "lookup", self.tool_text())], invocation_id=req, request_id=req),
            Event(author="agent", choices=[Message.assistant(sentence(self.rng, 60))], invocation_id=req,
                  request_id=req),
        ):
            await self.svc.append_event(self.session, event)
        self.units += 1

    def tool_text(self) -> str:
        # A record dump of ~608 words, one in eight with an id (~810 cl100k tokens).
        return " ".join(f"{w} id={self.rng.randint(1000, 99999)}" if k % 8 == 0 else w
                        for k, w in enumerate(sentence(self.rng, 540).split()))

    async def step(self) -> None:
        await self.finish_unit()
        await self.new_input()

    def invocation(self) -> Invocation:
        assert self.session is not None and self.current is not None
        return Invocation(app_name="bench", user_id="u", session=self.session, session_service=self.svc,
                          agent=self.agent, message=self.current.message, id=self.current.invocation_id,
                          user_event=self.current)

    async def timed_call(self, incremental: bool) -> float:
        self.agent.incremental_projection = incremental
        inv = self.invocation()
        started = time.perf_counter()
        await self.agent.build_request(inv)
        elapsed = (time.perf_counter() - started) * 1000
        self.agent.incremental_projection = True
        return elapsed


async def run_policy(name: str, policy: CompactionPolicy, sizes: list[int], calls: int, full_calls: int,
                     seed: int) -> None:
    work = Workload(policy, seed)
    await work.start()
    print(f"\npolicy {name}: {policy}")
    print(f"{'checkpoint':>10} {'messages timed':>15} {'calls':>5} {'median ms':>9} {'p95 ms':>7} "
          f"{'full chain calls':>16} {'median ms':>9} {'p95 ms':>8} {'prompt tokens':>13} {'compacted':>9}")
    for size in sizes:
        n_calls = min(calls, max(10, size // 20))
        while work.messages + 4 <= size:
            await work.step()
        await work.agent.build_request(work.invocation())  # warm: absorbs the growth phase
        first = work.messages
        fast: list[float] = []
        full: list[float] = []
        for k in range(n_calls):
            await work.step()
            fast.append(await work.timed_call(incremental=True))
            if k < (full_calls if size < 20_000 else min(full_calls, 3)):
                full.append(await work.timed_call(incremental=False))
        request, draft = await work.agent.build_request(work.invocation())
        stat = next((s for s in draft.stats if s.get("kind") == "tool_results"), {})
        full_text = (f"{len(full):>16} {statistics.median(full):>9.2f} {percentile(full, 0.95):>8.2f}" if full
                     else f"{0:>16} {'-':>9} {'-':>8}")
        print(f"{size:>10,} {f'{first:,}-{work.messages:,}':>15} {len(fast):>5} {statistics.median(fast):>9.3f} "
              f"{percentile(fast, 0.95):>7.3f} {full_text} {draft.prompt_tokens(request):>13,} "
              f"{stat.get('results_compacted', 0):>9,}")
    counts = work.agent.projection_cache.counts
    assert work.session is not None
    results = [e.token_count or 0 for e in work.session.events if e.is_tool_result()]
    print(f"projection calls: {counts['incremental']} incremental, {counts['rebuilt']} rebuilt, "
          f"{counts['full_chain']} full chain; tool results average {statistics.mean(results):.0f} tokens")


async def first_search_after_append(events: int, appends: int, seed: int, backend: str) -> None:
    memory_svc, _words, ledger = await build_session(events, seed)
    svc: SessionService = memory_svc
    if backend == "duckdb":
        # The same events in a DuckDB store (in memory: the disk is not what is measured).
        svc = DuckDBSessionService(":memory:", token_counter=lambda e: len(e.text) // 4, fsync=False)
        copy = await svc.create_session(APP, USER, SESSION)
        for event in ledger:
            await svc.append_event(copy, Event.from_json(event.to_json()))
    session = await svc.get_session(APP, USER, SESSION)
    assert session is not None
    policy = RecallPolicy()
    inv = Invocation(app_name=APP, user_id=USER, session=session, session_service=svc,
                     agent=None, message=Message.user("bench"))  # type: ignore[arg-type]
    started = time.perf_counter()
    await session_search(inv, policy, "warm up the index", scope="current_session")
    cold = (time.perf_counter() - started) * 1000
    latencies = []
    clock = ledger[-1].timestamp
    for k in range(appends):
        clock += 1
        await svc.append_event(session, Event(author="user", choices=[Message.user(f"a brand new remark {k}")],
                                              timestamp=clock))
        started = time.perf_counter()
        out = await session_search(inv, policy, f"brand new remark {k}", scope="current_session")
        latencies.append((time.perf_counter() - started) * 1000)
        assert out["count"] > 0
    await svc.close()
    print(f"\nsession_search on a {events:,}-event session ({backend}, lexical, current_session): first search "
          f"{cold:.1f} ms (index built); first search after one append, {appends} appends: "
          f"median {statistics.median(latencies):.2f} ms, p95 {percentile(latencies, 0.95):.2f} ms, "
          f"max {max(latencies):.2f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000,50000", help="checkpoints, in messages")
    parser.add_argument("--calls", type=int, default=100, help="timed calls per checkpoint (at most)")
    parser.add_argument("--full-calls", type=int, default=20,
                        help="of those, how many are also timed through the full chain (0 = none)")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated: " + ", ".join(POLICIES))
    parser.add_argument("--search-events", type=int, default=10_000)
    parser.add_argument("--search-appends", type=int, default=50)
    parser.add_argument("--search-backends", default="inmemory,duckdb", help="session stores searched")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    sizes = sorted(int(s.replace("_", "")) for s in args.sizes.split(","))
    for name in args.policies.split(","):
        if name not in POLICIES:
            parser.error(f"unknown policy {name!r}: use one of {', '.join(POLICIES)}")
        await run_policy(name, POLICIES[name], sizes, args.calls, args.full_calls, args.seed)
    for backend in args.search_backends.split(",") if args.search_events > 0 else []:
        if backend not in ("inmemory", "duckdb"):
            parser.error(f"unknown backend {backend!r}: use inmemory or duckdb")
        await first_search_after_append(args.search_events, args.search_appends, args.seed, backend)


if __name__ == "__main__":
    asyncio.run(main())
