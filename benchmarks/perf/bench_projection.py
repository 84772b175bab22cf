"""Speed of request projection, and the size of rolling summary inputs (prints figures; asserts nothing).

Two claims from the summary/compaction issue are measured here:

1. Projecting the request for one model call from a 1,000-event session with compaction on takes
   under 5 ms, and its cost grows with the events *after the summary boundary*, not with the whole
   history. ``build_request`` is timed end to end (instruction, history, summary injection, current
   input, compaction passes, the 70 % pressure check). Two sweeps: events after the boundary varied
   with the history fixed at 1,000 events, and the history varied with 100 events after the boundary.
2. Over 100 rolling updates, the summariser's input stays bounded by the delta plus the previous
   summary (plus the fixed prompt), however long the ledger gets.

Run::

    .venv/bin/python benchmarks/perf/bench_projection.py [--repeats 200] [--updates 100] [--seed 7]

Sessions are synthetic tool-using chats with a fixed seed: user questions, assistant answers, tool
calls, and tool results of which one in five is a ~1,500-token log dump (so pass 1 has work). The
summariser in part 2 is a scripted model whose summary is a fixed ~60-word text, so only the input
side is measured. Times are warm medians (the token counter's cache is filled by the first build,
which is printed separately as "cold").
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from agentlab.compaction import CompactionPolicy
from agentlab.core.mechanism import RequestDraft
from agentlab.core.steps import HistoryProcessor
from agentlab.events import Event, Message, ToolCall, user_event
from agentlab.model import tokens
from agentlab.model.base import ModelInfo
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import Invocation, LLMAgent, RunOptions
from agentlab.session.base import Session, Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import Summarizer, SummaryPolicy, SummaryWorker

WORDS = ("parcel depot invoice refund route driver customer warehouse pallet scanner delay "
         "battery label address courier manifest ticket outage latency backlog").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def log_dump(rng: random.Random, lines: int = 90) -> str:
    return "\n".join(f"{k:04d} {rng.choice(WORDS)} {rng.choice(WORDS)} ok latency={rng.randint(1, 999)}ms "
                     f"id={rng.randint(10**6, 10**7)}" for k in range(lines))


def unit(rng: random.Random, i: int) -> list[Event]:
    """One request unit: 2 events (chat) or 4 events (tool round), alternating."""
    req = f"req-{i}"
    events = [user_event(f"q{i}: {sentence(rng, 12)}", invocation_id=req, request_id=req)]
    if i % 2 == 0:
        call_id = f"call-{i}"
        big = i % 10 == 0
        events.append(Event(author="agent", choices=[Message.assistant("", [ToolCall(call_id, "lookup", '{"k": 1}')])],
                            invocation_id=req, request_id=req))
        content = log_dump(rng) if big else sentence(rng, 40)
        events.append(Event(author="agent", object="tool.response", choices=[Message.tool(call_id, "lookup", content)],
                            invocation_id=req, request_id=req))
    events.append(Event(author="agent", choices=[Message.assistant(f"a{i}: {sentence(rng, 15)}")],
                        invocation_id=req, request_id=req))
    return events


async def build_session(rng: random.Random, n_events: int) -> tuple[InMemorySessionService, Session]:
    svc = InMemorySessionService()
    session = await svc.create_session("bench", "u", "s")
    i = 0
    while len(session.events) < n_events:
        for e in unit(rng, i):
            if len(session.events) < n_events:
                await svc.append_event(session, e)
        i += 1
    return svc, session


def agent(summary: bool) -> LLMAgent:
    return LLMAgent("agent", ScriptedModel(default_reply="ok", info=ModelInfo("bench", 128_000)),
                    instruction="You are a logistics assistant.",
                    summary=SummaryPolicy() if summary else None,
                    compaction=CompactionPolicy(enabled=True))


async def time_projection(n_events: int, after_boundary: int | None, repeats: int, seed: int) -> dict:
    rng = random.Random(seed)
    svc, session = await build_session(rng, n_events)
    if after_boundary is not None:
        anchor = session.events[len(session.events) - after_boundary - 1]
        await svc.write_summary(session, "", Summary("Earlier: " + sentence(rng, 60), time.time(),
                                                     SummaryBoundary("", anchor.timestamp, anchor.id)))
    current = user_event("what is the status of parcel 42?", invocation_id="now", request_id="now")
    await svc.append_event(session, current)
    a = agent(summary=after_boundary is not None)
    inv = Invocation(app_name="bench", user_id="u", session=session, session_service=svc, agent=a,
                     message=current.message, options=RunOptions(), id="now", user_event=current)
    t0 = time.perf_counter()
    request, draft = await a.build_request(inv)
    cold = (time.perf_counter() - t0) * 1000
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        request, draft = await a.build_request(inv)
        samples.append((time.perf_counter() - t0) * 1000)
    # The runtime's HistoryProcessor scans the whole ledger once per build (a cheap filter);
    # timed alone so the part that depends on the boundary can be read off.
    history = HistoryProcessor()
    scan = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        await history.process(inv, RequestDraft())
        scan.append((time.perf_counter() - t0) * 1000)
    stat = next((s for s in draft.stats if s.get("kind") == "tool_results"), {})
    return {
        "history": len(session.events),
        "after": len(draft.events),
        "cold_ms": cold,
        "p50_ms": statistics.median(samples),
        "p95_ms": sorted(samples)[int(0.95 * (len(samples) - 1))],
        "scan_ms": statistics.median(scan),
        "compacted": stat.get("results_compacted", 0),
        "prompt_tokens": tokens.count_messages(request.messages, request.tools or None),
    }


def print_rows(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'history':>8} {'projected':>9} {'cold ms':>8} {'p50 ms':>7} {'p95 ms':>7} {'ledger scan':>11} "
          f"{'p50 - scan':>10} {'compacted':>9} {'prompt tok':>10}")
    for r in rows:
        print(f"{r['history']:>8} {r['after']:>9} {r['cold_ms']:>8.2f} {r['p50_ms']:>7.3f} {r['p95_ms']:>7.3f} "
              f"{r['scan_ms']:>11.3f} {r['p50_ms'] - r['scan_ms']:>10.3f} {r['compacted']:>9} {r['prompt_tokens']:>10}")


async def rolling_updates(updates: int, seed: int) -> None:
    rng = random.Random(seed)
    svc = InMemorySessionService()
    session = await svc.create_session("bench", "u", "rolling")
    summary_text = "Summary: " + sentence(rng, 60)
    model = ScriptedModel(default_reply=summary_text, info=ModelInfo("summariser", 8192))
    policy = SummaryPolicy()
    worker = SummaryWorker(svc, Summarizer(model, policy), policy)
    template_tokens = tokens.count_messages(worker.summarizer.render_prompt([], ""))
    rows = []
    i = 0
    for step in range(updates):
        for _ in range(3):  # three request units (~10 events) between updates
            for e in unit(rng, i):
                await svc.append_event(session, e)
            i += 1
        await worker.summarize(session)
        run = worker.stats.runs[-1]
        ledger_tokens = sum(e.token_count or 0 for e in session.events)
        rows.append((step, len(session.events), ledger_tokens, run["delta_events"], run["delta_tokens"],
                     run["previous_summary_tokens"], run["input_tokens"]))
    print(f"\nRolling updates: {updates} updates, ~10 new events each; fixed prompt = {template_tokens} tokens")
    print(f"{'update':>6} {'ledger ev':>9} {'ledger tok':>10} {'delta ev':>8} {'delta tok':>9} {'prev sum':>8} "
          f"{'input tok':>9} {'input-(delta+prev+prompt)':>26}")
    shown = list(range(5)) + list(range(updates - 5, updates))
    for step, n_ev, ledger, d_ev, d_tok, prev, inp in rows:
        if step in shown:
            slack = inp - (d_tok + prev + template_tokens)
            print(f"{step:>6} {n_ev:>9} {ledger:>10} {d_ev:>8} {d_tok:>9} {prev:>8} {inp:>9} {slack:>26}")
        if step == 4:
            print(f"{'...':>6}")
    inputs = [r[6] for r in rows]
    bounds = [r[4] + r[5] + template_tokens for r in rows]
    ratios = [i / b for i, b in zip(inputs, bounds, strict=True)]
    per_event = max((i - b) / r[3] for i, b, r in zip(inputs, bounds, rows, strict=True))
    print(f"max input {max(inputs)} tokens vs final ledger {rows[-1][2]} tokens "
          f"(first-half max {max(inputs[: updates // 2])}, second-half max {max(inputs[updates // 2:])}); "
          f"input / (delta + previous summary + prompt): max {max(ratios):.3f}, mean {statistics.mean(ratios):.3f} "
          f"(the excess is line framing, at most {per_event:.1f} tokens per delta event); model calls {model.calls}")


async def main(repeats: int, updates: int, seed: int) -> None:
    headline = await time_projection(1000, None, repeats, seed)
    print_rows("Projection of a 1,000-event session, compaction on, no summary (everything projected)", [headline])
    headline_sum = await time_projection(1000, 100, repeats, seed)
    print_rows("Projection of a 1,000-event session, compaction on, summary boundary 100 events from the end",
               [headline_sum])
    print_rows("Events after the boundary varied, history fixed at 1,000 events",
               [await time_projection(1000, k, repeats, seed) for k in (25, 50, 100, 200, 400, 800)])
    print_rows("History varied, 100 events after the boundary",
               [await time_projection(n, 100, repeats, seed) for n in (1000, 2000, 4000, 8000, 16000)])
    await rolling_updates(updates, seed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200, help="timed builds per configuration")
    parser.add_argument("--updates", type=int, default=100, help="rolling summary updates")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.repeats, args.updates, args.seed))
