"""The incremental projection gives exactly the request the full processor chain gives.

A seeded random walk grows sessions event by event (user turns, tool rounds, unanswered calls,
orphan results, failed and partial events, other branches' events, other runs interleaved) and,
between steps, moves the summary boundary (forward, back, onto a tool round, time-only), changes
the compaction policy, offers or withdraws ``session_load``, and builds a request from a current
input that is or is not in the ledger. Every request is built twice by the same agent — through
the cache and through the full chain — and the two must agree in every message, event and stat.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from agentlab.compaction import CompactionPolicy
from agentlab.core.invocation import Invocation
from agentlab.events import Event, Message, ToolCall, user_event
from agentlab.model import tokens
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import FunctionTool, LLMAgent
from agentlab.runtime.projection_cache import plan_for
from agentlab.session.base import Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import SummaryPolicy

WORDS = "alpha beta gamma delta parcel route depot invoice latency backlog ticket driver".split()


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def session_load_tool() -> FunctionTool:
    async def session_load(event_id: str) -> str:
        return event_id

    return FunctionTool(session_load, name="session_load", description="load an event")


def random_policy(rng: random.Random) -> CompactionPolicy:
    return CompactionPolicy(
        enabled=True,
        keep_recent_requests=rng.choice([0, 1, 2, 3]),
        tool_result_max_tokens=rng.choice([8, 64, 1024]),
        oversized_tool_result_max_tokens=rng.choice([0, 0, 40]),
        force_clean_tools=tuple(rng.sample(["lookup", "search"], rng.randint(0, 1))),
        keep_tools=tuple(rng.sample(["search", "fetch"], rng.randint(0, 1))),
    )


class Walk:
    """One random session and the agent that projects it."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.svc = InMemorySessionService()
        self.session: Any = None
        self.runs = 0
        self.open_calls: list[tuple[str, str, str]] = []  # (call id, tool name, run id)
        self.early_results: list[str] = []  # results appended before their call
        self.with_summary = self.rng.random() < 0.6
        self.agent = LLMAgent("a", ScriptedModel([]), instruction="be brief",
                              summary=SummaryPolicy(injection=self.rng.choice(["system", "user"]))
                              if self.with_summary else None,
                              compaction=random_policy(self.rng) if self.rng.random() < 0.85 else None)
        self.filter_key = self.rng.choice(["", "", "a", "a/b"])

    async def start(self) -> None:
        self.session = await self.svc.create_session("app", "u", f"s{self.rng.random()}")

    def new_run(self) -> str:
        self.runs += 1
        return f"run-{self.runs}"

    async def append(self, event: Event) -> None:
        await self.svc.append_event(self.session, event)

    async def grow(self, run: str) -> None:
        """Append one random event (mostly well-formed turns, sometimes oddities)."""
        rng = self.rng
        key = rng.choice([self.filter_key] * 6 + ["", "a", "a/b", "c"])
        roll = rng.random()
        if roll < 0.2:
            await self.append(user_event(words(rng, 5), invocation_id=run, request_id=run, filter_key=key))
        elif roll < 0.45:
            calls = [ToolCall(f"c{rng.random():.12f}", rng.choice(["lookup", "search", "fetch"]), "{}")
                     for _ in range(rng.choice([1, 1, 2]))]
            if self.early_results and rng.random() < 0.5:
                calls.append(ToolCall(self.early_results.pop(0), "lookup", "{}"))
            await self.append(Event(author="a", choices=[Message.assistant(rng.choice(["", "checking"]), calls)],
                                    invocation_id=run, request_id=run, filter_key=key))
            self.open_calls.extend((c.id, c.name, run) for c in calls)
        elif roll < 0.7 and self.open_calls:
            call_id, name, owner = self.open_calls.pop(rng.randrange(len(self.open_calls)))
            size = rng.choice([3, 30, 150])
            await self.append(Event(author="a", object="tool.response",
                                    choices=[Message.tool(call_id, name, words(rng, size))],
                                    invocation_id=owner, request_id=owner, filter_key=key))
        elif roll < 0.85:
            await self.append(Event(author="a", choices=[Message.assistant(words(rng, 8))],
                                    invocation_id=run, request_id=run, filter_key=key))
        elif roll < 0.88:
            # A result that arrives before its call (which a later tool round may bring).
            call_id = f"early{rng.random()}"
            self.early_results.append(call_id)
            await self.append(Event(author="a", choices=[Message.tool(call_id, "lookup", words(rng, 90))],
                                    invocation_id=run, request_id=run, filter_key=key))
        elif roll < 0.9:
            # A result whose call never appears, and a failed answer: both stay out of requests.
            await self.append(Event(author="a", choices=[Message.tool(f"ghost{rng.random()}", "lookup", "x y")],
                                    invocation_id=run, request_id=run, filter_key=key))
            await self.append(Event(author="a", choices=[Message.assistant("oops")], error="boom",
                                    invocation_id=run, request_id=run, filter_key=key))
        elif roll < 0.95:
            # An event of an unrelated run (no request id: its unit is the invocation).
            await self.append(Event(author="a", choices=[Message.assistant(words(rng, 4))],
                                    invocation_id=f"other-{rng.randint(0, 3)}", filter_key=key))
        else:
            await self.append(Event(author="a", state_delta={"k": rng.random()}, invocation_id=run))

    def perturb(self) -> None:
        """Move the summary boundary, change the policy or the tools, between two calls."""
        rng = self.rng
        roll = rng.random()
        events = self.session.events
        if self.with_summary and events and roll < 0.25:
            anchor = rng.choice(events)
            kind = rng.random()
            boundary = (SummaryBoundary("", anchor.timestamp, anchor.id) if kind < 0.8
                        else SummaryBoundary("", anchor.timestamp, "") if kind < 0.9 else None)
            key = rng.choice(["", self.filter_key])
            self.session.summaries[key] = Summary(f"summary {rng.random()}", anchor.timestamp, boundary)
        elif self.with_summary and roll < 0.3:
            self.session.summaries.clear()
        elif roll < 0.35 and self.agent.compaction is not None:
            self.agent.compaction = random_policy(rng)
            self.agent.processors = self.agent.default_processors()
        elif roll < 0.4:
            self.agent.tools = [session_load_tool()] if not self.agent.tools else []


def snapshot(request: Any, draft: Any) -> dict[str, Any]:
    return {
        "wire": json.dumps([m.to_openai() for m in request.messages], sort_keys=True),
        "messages": request.messages,
        "tools": request.tools,
        "events": [e.to_dict() for e in draft.events],
        "stats": draft.stats,
        "summary": draft.summary,
        "system": draft.system_parts,
        "prefix": draft.user_prefix,
        "prompt_tokens": draft.prompt_tokens(request),
    }


async def build_both(walk: Walk, inv: Invocation) -> tuple[dict[str, Any], dict[str, Any]]:
    agent = walk.agent
    agent.incremental_projection = True
    fast = snapshot(*await agent.build_request(inv))
    agent.incremental_projection = False
    full = snapshot(*await agent.build_request(inv))
    agent.incremental_projection = True
    return fast, full


@pytest.mark.parametrize("seed", range(24))
async def test_incremental_projection_equals_full_rebuild(seed: int) -> None:
    walk = Walk(seed)
    await walk.start()
    ledger_before: list[str] = []
    for _turn in range(24):
        run = walk.new_run()
        current = user_event(words(walk.rng, 6), invocation_id=run, request_id=run, filter_key=walk.filter_key)
        if walk.rng.random() < 0.85:
            await walk.append(current)  # the runner persists the input first; sometimes it is not there
        for _ in range(walk.rng.randint(0, 8)):
            await walk.grow(run)
            if walk.rng.random() < 0.3:
                walk.perturb()
            inv = Invocation(app_name="app", user_id="u", session=walk.session, session_service=walk.svc,
                             agent=walk.agent, message=current.message, id=run, filter_key=walk.filter_key,
                             user_event=current)
            ledger_before = [e.to_json() for e in walk.session.events]
            fast, full = await build_both(walk, inv)
            assert fast == full
            # The cache's token count reuses its history count; it must equal a count of the whole request.
            assert fast["prompt_tokens"] == tokens.count_messages(fast["messages"], fast["tools"] or None)
            # The ledger is untouched by either path.
            assert [e.to_json() for e in walk.session.events] == ledger_before
    counts = walk.agent.projection_cache.counts
    assert counts["incremental"] > 0, counts


@pytest.mark.parametrize("reread", [False, True])
async def test_cache_serves_the_growing_workload_incrementally(reread: bool) -> None:
    """In a plain growing session every call after the first is incremental, not rebuilt, also
    when each run reads the session afresh (new objects for the same ledger, as a Runner gets)."""
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    agent = LLMAgent("a", ScriptedModel([]), compaction=CompactionPolicy(enabled=True, keep_recent_requests=3,
                                                                         tool_result_max_tokens=8))
    assert plan_for(agent.processors) is not None
    rng = random.Random(3)
    for turn in range(20):
        run = f"r{turn}"
        current = user_event(words(rng, 5), invocation_id=run, request_id=run)
        if reread:
            session = await svc.get_session("app", "u", "s")
            assert session is not None
        await svc.append_event(session, current)
        inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=agent,
                         message=current.message, id=run, user_event=current)
        request, draft = await agent.build_request(inv)
        agent.incremental_projection = False
        full_request, full_draft = await agent.build_request(inv)
        agent.incremental_projection = True
        assert request.messages == full_request.messages and draft.stats == full_draft.stats
        call = ToolCall(f"c{turn}", "lookup", "{}")
        for event in (Event(author="a", choices=[Message.assistant("", [call])], invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.tool(call.id, "lookup", words(rng, 40))],
                            invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.assistant(words(rng, 6))], invocation_id=run,
                            request_id=run)):
            await svc.append_event(session, event)
    assert agent.projection_cache.counts == {"incremental": 19, "rebuilt": 1, "full_chain": 0}


def test_chains_with_unknown_processors_use_the_full_chain() -> None:
    class Custom:
        name = "custom"

        async def process(self, inv: Invocation, draft: Any) -> None:
            draft.events = draft.events[-2:]

    agent = LLMAgent("a", ScriptedModel([]), compaction=CompactionPolicy(enabled=True))
    assert plan_for(agent.processors) is not None
    assert plan_for([*agent.processors, Custom()]) is None  # type: ignore[list-item]
    assert plan_for(list(reversed(agent.processors))) is None


async def test_requests_with_and_without_tools_keep_their_own_projection() -> None:
    """Once the tool budget is spent, requests alternate with and without tools: no rebuilds."""
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    agent = LLMAgent("a", ScriptedModel([]), tools=[session_load_tool()],
                     compaction=CompactionPolicy(enabled=True, keep_recent_requests=1, tool_result_max_tokens=8))
    rng = random.Random(4)
    for turn in range(12):
        run = f"r{turn}"
        current = user_event(words(rng, 5), invocation_id=run, request_id=run)
        await svc.append_event(session, current)
        call = ToolCall(f"c{turn}", "lookup", "{}")
        await svc.append_event(session, Event(author="a", choices=[Message.assistant("", [call])],
                                              invocation_id=run, request_id=run))
        await svc.append_event(session, Event(author="a", choices=[Message.tool(call.id, "lookup", words(rng, 30))],
                                              invocation_id=run, request_id=run))
        inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=agent,
                         message=current.message, id=run, user_event=current)
        for allow_tools in (True, False):
            request, _ = await agent.build_request(inv, allow_tools=allow_tools)
            agent.incremental_projection = False
            full, _ = await agent.build_request(inv, allow_tools=allow_tools)
            agent.incremental_projection = True
            assert request.messages == full.messages
        await svc.append_event(session, Event(author="a", choices=[Message.assistant(words(rng, 4))],
                                              invocation_id=run, request_id=run))
    assert agent.projection_cache.counts == {"incremental": 22, "rebuilt": 2, "full_chain": 0}
