"""Compaction passes 0/1/2, placeholders, protected units, copy-on-write and stats."""

from __future__ import annotations

import itertools
import json

import pytest

from agentlab.compaction import (
    POLICY_PLACEHOLDER,
    RECOVERABLE_HEADER,
    CompactionPolicy,
    CompactionProcessor,
    protected_units,
)
from agentlab.core.mechanism import RequestDraft
from agentlab.events import Event, Message, ToolCall, user_event
from agentlab.model import tokens
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import FunctionTool, Invocation, LLMAgent, Runner
from agentlab.session.inmemory import InMemorySessionService

_clock = itertools.count(1)
BIG = "row " + "alpha beta gamma delta " * 400  # ~1,600 tokens
HUGE = "".join(f"line {i}: status ok, latency {i % 97} ms\n" for i in range(1500))  # ~18,000 tokens


def _t() -> float:
    return 1_700_000_000.0 + next(_clock)


def request_unit(req: str, tool: str, content: str, *, final: bool = True, call_id: str | None = None) -> list[Event]:
    cid = call_id or f"call-{req}"
    events = [
        user_event(f"please run {tool} for {req}", invocation_id=req, request_id=req, timestamp=_t()),
        Event(author="agent", choices=[Message.assistant("", [ToolCall(cid, tool, '{"q": 1}')])],
              invocation_id=req, request_id=req, timestamp=_t()),
        Event(author="agent", object="tool.response", choices=[Message.tool(cid, tool, content)],
              invocation_id=req, request_id=req, timestamp=_t()),
    ]
    if final:
        events.append(Event(author="agent", choices=[Message.assistant(f"done with {req}")],
                            invocation_id=req, request_id=req, timestamp=_t()))
    return events


async def ledger(events: list[Event]):
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    for e in events:
        await svc.append_event(session, e)
    return svc, session


class _Tool:
    def __init__(self, name: str) -> None:
        self.name = name
        self.description = name

    def declaration(self):
        return {"type": "function", "function": {"name": self.name, "parameters": {"type": "object"}}}

    async def call(self, arguments, ctx):  # pragma: no cover - never called here
        return ""


def draft_of(session, tools=()) -> RequestDraft:
    return RequestDraft(events=[e for e in session.events if e.message is not None], tools=[_Tool(t) for t in tools])


def tool_texts(draft: RequestDraft) -> dict[str, str]:
    return {e.request_id: e.text for e in draft.events if e.is_tool_result()}


async def test_pass1_replaces_only_unprotected_big_results_with_a_recoverable_placeholder():
    events = request_unit("r1", "fetch", BIG) + request_unit("r2", "fetch", BIG) + request_unit(
        "r3", "fetch", BIG, final=False)
    _, session = await ledger(events)
    draft = draft_of(session)
    stat = CompactionProcessor(CompactionPolicy(enabled=True)).compact(draft, current_unit="r3")
    texts = tool_texts(draft)
    assert texts["r2"] == BIG and texts["r3"] == BIG  # most recent completed unit + current unit
    placeholder = texts["r1"]
    assert placeholder.startswith(RECOVERABLE_HEADER)
    r1_result = next(e for e in session.events if e.is_tool_result() and e.request_id == "r1")
    assert f"event_id: {r1_result.id}" in placeholder
    assert "tool_call_id: call-r1" in placeholder and "tool_name: fetch" in placeholder
    assert "reason: historical_compaction" in placeholder
    assert "session_load" not in placeholder  # the tool is not offered in this request
    assert "cannot be fetched with the tools available" in placeholder
    assert stat["results_compacted"] == 1 and stat["pass1"] == 1 and stat["pass0"] == stat["pass2"] == 0
    assert stat["tokens_after"] < stat["tokens_before"]
    expected_before = sum(tokens.count_event(e) for e in session.events if e.message is not None)
    assert stat["tokens_before"] == expected_before
    assert stat["tokens_after"] == sum(tokens.count_event(e) for e in draft.events)


async def test_pass1_points_to_session_load_only_when_offered():
    _, session = await ledger(request_unit("r1", "fetch", BIG) + request_unit("r2", "fetch", "small")
                              + request_unit("r3", "x", "y", final=False))
    draft = draft_of(session, tools=["session_load"])
    CompactionProcessor(CompactionPolicy(enabled=True)).compact(draft, current_unit="r3")
    assert "call session_load with this event_id" in tool_texts(draft)["r1"]


async def test_keep_recent_requests_widens_protection():
    events = request_unit("r1", "fetch", BIG) + request_unit("r2", "fetch", BIG) + request_unit(
        "r3", "fetch", BIG) + request_unit("r4", "fetch", "small", final=False)
    _, session = await ledger(events)
    draft = draft_of(session)
    CompactionProcessor(CompactionPolicy(enabled=True, keep_recent_requests=2)).compact(draft, current_unit="r4")
    texts = tool_texts(draft)
    assert texts["r1"].startswith(RECOVERABLE_HEADER) and texts["r2"] == BIG and texts["r3"] == BIG


async def test_incomplete_older_units_are_not_counted_as_recent():
    # r2 never got a final answer: it is not "completed", so protection goes to r1 instead
    events = request_unit("r1", "fetch", BIG) + request_unit("r2", "fetch", BIG, final=False) + request_unit(
        "r3", "fetch", "small", final=False)
    _, session = await ledger(events)
    assert protected_units(session.events, "r3", 1) == {"r1", "r3"}
    draft = draft_of(session)
    CompactionProcessor(CompactionPolicy(enabled=True)).compact(draft, current_unit="r3")
    assert tool_texts(draft)["r2"].startswith(RECOVERABLE_HEADER) and tool_texts(draft)["r1"] == BIG


async def test_results_under_the_limit_or_with_a_bigger_placeholder_stay():
    medium = "word " * 60  # ~60 tokens: over a limit of 10, but smaller than the placeholder
    events = request_unit("r1", "fetch", medium) + request_unit("r2", "a", "b") + request_unit(
        "r3", "a", "b", final=False)
    _, session = await ledger(events)
    draft = draft_of(session)
    assert CompactionProcessor(CompactionPolicy(enabled=True, tool_result_max_tokens=10)).compact(
        draft, current_unit="r3") is None
    assert tool_texts(draft)["r1"] == medium
    assert CompactionProcessor(CompactionPolicy(enabled=True)).compact(draft_of(session), current_unit="r3") is None


async def test_pass1_needs_a_current_unit():
    _, session = await ledger(request_unit("r1", "fetch", BIG) + request_unit("r2", "fetch", BIG))
    assert CompactionProcessor(CompactionPolicy(enabled=True, keep_recent_requests=0)).compact(
        draft_of(session), current_unit=None) is None
    assert CompactionProcessor(CompactionPolicy(enabled=True, keep_recent_requests=0)).compact(
        draft_of(session), current_unit="r9") is not None


async def test_events_without_a_unit_are_never_pass0_or_pass1_compacted():
    # request_id and invocation_id both empty: the events belong to no unit
    events = request_unit("", "fetch", BIG) + request_unit("r2", "a", "b") + request_unit("r3", "a", "b", final=False)
    _, session = await ledger(events)
    draft = draft_of(session)
    policy = CompactionPolicy(enabled=True, force_clean_tools=("fetch",))
    assert CompactionProcessor(policy).compact(draft, current_unit="r3") is None


async def test_pass0_force_cleans_named_tools_whatever_their_size_unless_kept():
    events = (request_unit("r1", "secrets", "tiny") + request_unit("r1b", "notes", "tiny too")
              + request_unit("r2", "x", "y") + request_unit("r3", "secrets", "current", final=False))
    _, session = await ledger(events)
    draft = draft_of(session)
    policy = CompactionPolicy(enabled=True, force_clean_tools=("secrets", "notes"), keep_tools=("notes",))
    stat = CompactionProcessor(policy).compact(draft, current_unit="r3")
    texts = tool_texts(draft)
    assert texts["r1"] == POLICY_PLACEHOLDER
    assert texts["r1b"] == "tiny too"  # keep_tools wins over force_clean_tools
    assert texts["r3"] == "current"  # the current unit is protected
    assert stat["pass0"] == 1 and stat["results_compacted"] == 1


async def test_pass2_cuts_oversized_results_to_head_and_tail_even_in_the_current_unit():
    events = request_unit("r1", "a", "b") + request_unit("r2", "logs", HUGE, final=False)
    _, session = await ledger(events)
    draft = draft_of(session)
    stat = CompactionProcessor(CompactionPolicy(enabled=True, oversized_tool_result_max_tokens=500)).compact(
        draft, current_unit="r2")
    cut = tool_texts(draft)["r2"]
    assert tokens.count_text(cut) <= 500
    assert tokens.count_text(cut) > 400  # the budget is used, not wasted
    assert cut.startswith("line 0: status ok") and cut.rstrip().endswith("line 1499: status ok, latency 44 ms")
    assert "characters truncated ..." in cut and "session_load" not in cut
    assert stat["pass2"] == 1


async def test_pass2_marker_names_the_ids_when_session_load_is_offered():
    events = request_unit("r1", "logs", HUGE, final=False)
    _, session = await ledger(events)
    draft = draft_of(session, tools=["session_load"])
    CompactionProcessor(CompactionPolicy(enabled=True, oversized_tool_result_max_tokens=500)).compact(
        draft, current_unit="r1")
    cut = tool_texts(draft)["r1"]
    result_event = next(e for e in session.events if e.is_tool_result())
    assert f"event_id={result_event.id}" in cut and "tool_call_id=call-r1" in cut and "tool_name=logs" in cut


async def test_pass2_skips_session_load_results_and_pass1_placeholders():
    events = (request_unit("r1", "fetch", HUGE) + request_unit("r2", "a", "b")
              + request_unit("r3", "session_load", HUGE, final=False))
    _, session = await ledger(events)
    draft = draft_of(session)
    stat = CompactionProcessor(CompactionPolicy(enabled=True, oversized_tool_result_max_tokens=200)).compact(
        draft, current_unit="r3")
    texts = tool_texts(draft)
    assert texts["r1"].startswith(RECOVERABLE_HEADER)  # pass 1, not cut again by pass 2
    assert texts["r3"] == HUGE
    assert (stat["pass1"], stat["pass2"]) == (1, 0)


async def test_copy_on_write_never_touches_the_ledger():
    events = (request_unit("r1", "fetch", BIG) + request_unit("r0", "secrets", "s")
              + request_unit("r2", "logs", HUGE) + request_unit("r3", "logs", HUGE, final=False))
    svc, session = await ledger(events)
    before_objects = [json.dumps(e.to_dict(), sort_keys=True) for e in session.events]
    stored = await svc.get_session("app", "u", "s")
    stored_before = [e.to_json() for e in stored.events]
    draft = draft_of(session)
    original_list = draft.events
    original_entries = list(draft.events)
    policy = CompactionPolicy(enabled=True, force_clean_tools=("secrets",), oversized_tool_result_max_tokens=300)
    stat = CompactionProcessor(policy).compact(draft, current_unit="r3")
    assert stat["pass0"] == 1 and stat["pass1"] == 1 and stat["pass2"] >= 1
    # the ledger events (and their nested messages) are byte-for-byte what they were
    assert [json.dumps(e.to_dict(), sort_keys=True) for e in session.events] == before_objects
    assert [e.to_json() for e in (await svc.get_session("app", "u", "s")).events] == stored_before
    # the draft got a new list; the caller's list is unchanged; changed entries are new objects
    assert draft.events is not original_list and original_list == original_entries
    changed = [i for i, (a, b) in enumerate(zip(original_entries, draft.events, strict=True)) if a is not b]
    assert len(changed) == stat["results_compacted"]
    for i in changed:
        assert draft.events[i].id == original_entries[i].id  # same identity for recall
        assert draft.events[i].message is not original_entries[i].message


async def test_processor_appends_stats_only_when_something_changed():
    _, session = await ledger(request_unit("r1", "a", "b", final=False))
    inv = type("Inv", (), {"request_id": "r1"})()
    draft = draft_of(session)
    await CompactionProcessor(CompactionPolicy(enabled=True)).process(inv, draft)
    assert draft.stats == []


def test_policy_round_trip_and_validation():
    p = CompactionPolicy(enabled=True, keep_recent_requests=2, force_clean_tools=("a",), keep_tools=("b",),
                         oversized_tool_result_max_tokens=8192)
    assert CompactionPolicy.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    d = CompactionPolicy()
    assert (d.enabled, d.keep_recent_requests, d.tool_result_max_tokens, d.oversized_tool_result_max_tokens) == (
        False, 1, 1024, 0)
    assert (d.sync_summary_ratio, d.sync_summary_floor_tokens, d.fallback_context_window) == (0.7, 2000, 8192)
    assert d.sync_threshold(8192) == 5734 and d.sync_threshold(1000) == 1000 and d.sync_threshold(2500) == 2000
    with pytest.raises(ValueError, match="sync_summary_ratio"):
        CompactionPolicy(sync_summary_ratio=0)
    with pytest.raises(ValueError, match="force_clean_tools"):
        CompactionPolicy(force_clean_tools="abc")
    with pytest.raises(ValueError, match="keep_recnt"):
        CompactionPolicy.from_dict({"keep_recnt": 1})


def fetch(q: int) -> str:
    """Fetch a big report.

    Args:
        q: Which report.
    """
    return BIG


async def test_agent_emits_compaction_events_and_records_the_last_stats_in_state():
    model = ScriptedModel(default_reply="noted")
    calls = [ScriptedModel.tool_call("fetch", {"q": i}, id=f"c{i}") for i in range(3)]
    model.replies = [calls[0], "first", calls[1], "second", calls[2], "third"]
    agent = LLMAgent("agent", model, tools=[FunctionTool(fetch)], compaction=CompactionPolicy(enabled=True))
    svc = InMemorySessionService()
    runner = Runner("app", agent, svc)
    all_events = []
    for text in ("one", "two", "three"):
        all_events += [e async for e in runner.run("u", "s", text)]
    compaction_events = [e for e in all_events if e.object == "context.compaction"]
    assert compaction_events, "the third run must compact the first run's result"
    stat = compaction_events[-1].metadata["compaction"]
    assert stat["results_compacted"] == 1
    session = await svc.get_session("app", "u", "s")
    assert session.state["compaction:last"] == stat
    # the model never saw the first result raw in the third run, but the ledger still has it
    third_run_prompts = [r for r in model.requests if any(m.content == "three" for m in r.messages)]
    assert all(BIG not in [m.content for m in r.messages][:4] for r in third_run_prompts)
    assert sum(1 for e in session.events if e.text == BIG) == 3


async def test_invocation_request_id_is_the_current_unit():
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    agent = LLMAgent("a", ScriptedModel(["x"]))
    inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=agent,
                     message=Message.user("hi"))
    assert inv.request_id == inv.id
