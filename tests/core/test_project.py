"""``agentlab.core.project``: the request a set of mechanisms builds, without an Agent or a Runner."""

from __future__ import annotations

from typing import Any

import pytest

from agentlab.compaction import CompactionPolicy
from agentlab.core import Invocation, ledger_events, project
from agentlab.events import Event, Message, ToolCall, user_event
from agentlab.memory import InMemoryMemoryService, MemoryPolicy
from agentlab.model.base import ModelInfo
from agentlab.model.scripted import ScriptedModel
from agentlab.recall import RecallPolicy
from agentlab.runtime import LLMAgent
from agentlab.session.base import Session, Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import SummaryPolicy

BIG = " ".join(f"line{i} status=ok latency={i % 97}ms" for i in range(120))  # ~1,000 tokens


async def seeded(turns: int = 5, *, summary_at: int | None = 2) -> tuple[InMemorySessionService, Session]:
    """A session of tool-using turns (each with a large tool result); a summary covering turns < ``summary_at``."""
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    for turn in range(turns):
        run = f"run-{turn}"
        call = ToolCall(f"call-{turn}", "fetch_logs", "{}")
        for event in (user_event(f"question {turn}", invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.assistant("", [call])], invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.tool(call.id, "fetch_logs", f"{turn}: {BIG}")],
                            invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.assistant(f"answer {turn}")], invocation_id=run,
                            request_id=run)):
            await svc.append_event(session, event)
    if summary_at is not None:
        anchor = session.events[4 * summary_at - 1]  # the answer closing turn summary_at - 1
        await svc.write_summary(session, "", Summary(f"turns 0..{summary_at - 1} were about logs", anchor.timestamp,
                                                     SummaryBoundary("", anchor.timestamp, anchor.id)))
    current = user_event("new question", invocation_id="now", request_id="now")
    await svc.append_event(session, current)
    return svc, session


COMBINATIONS: dict[str, dict[str, Any]] = {
    "none": {},
    "summary": {"summary": SummaryPolicy()},
    "compaction": {"compaction": CompactionPolicy(enabled=True, tool_result_max_tokens=64)},
    "summary+compaction+recall": {"summary": SummaryPolicy(injection="user"),
                                  "compaction": CompactionPolicy(enabled=True, tool_result_max_tokens=64,
                                                                 oversized_tool_result_max_tokens=200),
                                  "recall": RecallPolicy()},
    "recall-only": {"recall": RecallPolicy(search_tool=False)},
}


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
async def test_project_builds_the_request_llmagent_builds(name: str) -> None:
    svc, session = await seeded()
    model = ScriptedModel([], info=ModelInfo("scripted", 100_000))
    agent = LLMAgent("a", model, instruction="Answer briefly.", **COMBINATIONS[name])
    current = session.events[-1]
    inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=agent,
                     message=current.message, id="now", user_event=current)
    expected, _ = await agent.build_request(inv)
    result = await project(session, agent.context_mechanisms(), current, model=model, session_service=svc,
                           instruction="Answer briefly.")
    assert result.request.messages == expected.messages
    assert result.request.tools == expected.tools
    assert result.prompt_tokens == result.draft.prompt_tokens(expected)
    assert len(session.events) == 21  # the session handed in is not changed


async def test_each_mechanism_reports_what_it_did() -> None:
    svc, session = await seeded()
    summary, compaction = SummaryPolicy(), CompactionPolicy(enabled=True, tool_result_max_tokens=64)
    result = await project(session, [summary, compaction, RecallPolicy()], session.events[-1],
                           ModelInfo("m", 100_000), session_service=svc)
    by_name = {r.mechanism: r for r in result.reports}
    assert list(by_name) == ["summary", "compaction", "recall"]
    # the summary covers turns 0 and 1: their 8 events are out, and its text is in
    hidden = by_name["summary"].hidden_event_ids
    assert hidden == [e.id for e in session.events[:8]]
    assert by_name["summary"].summary is not None and by_name["summary"].summary.text.startswith("turns 0..1")
    # turns 2 and 3 are historical (turn 4 is the kept recent unit): their tool results are replaced
    replaced = by_name["compaction"].replaced
    assert replaced == {session.events[10].id: "pass1", session.events[14].id: "pass1"}
    assert [s["kind"] for s in by_name["compaction"].stats] == ["tool_results"]
    assert by_name["compaction"].hidden_event_ids == [] and by_name["compaction"].summary is None
    assert any(t.startswith("## Session recall") for t in by_name["recall"].system_text)
    assert not by_name["recall"].replaced and not by_name["recall"].hidden_event_ids
    assert result.hidden_event_ids == hidden
    ids = [e.id for e in result.draft.events]
    assert ids == [e.id for e in session.events[8:]]


async def test_the_pressure_path_summarises_and_the_report_says_so() -> None:
    svc, session = await seeded(summary_at=None)
    summariser = ScriptedModel(["everything so far was about logs"], info=ModelInfo("s", 100_000))
    no_pass1 = CompactionPolicy(enabled=True, tool_result_max_tokens=100_000)
    result = await project(session, [SummaryPolicy(), no_pass1], session.events[-1],
                           ModelInfo("small", 6_000), model=summariser, session_service=svc)
    # 5 results of ~1,000 tokens are over 70 % of 6,000: a synchronous summary runs and the request is rebuilt
    summary_report, compaction_report = result.reports
    assert compaction_report.rebuilt_request and not summary_report.rebuilt_request
    assert [s["kind"] for s in compaction_report.stats if s["kind"] == "sync_summary"] == ["sync_summary"]
    assert summariser.calls == 1
    assert summary_report.summary is not None and "about logs" in summary_report.summary.text
    assert [m.content for m in result.request.messages[1:]] == ["new question"]
    assert len(summary_report.hidden_event_ids) == 20
    assert result.prompt_tokens < 1_000


async def test_a_plain_message_list_is_projected_in_request_units() -> None:
    messages: list[Message] = []
    for turn in range(4):
        call = ToolCall(f"c{turn}", "fetch_logs", "{}")
        messages += [Message.system("ignored: the instruction comes from project()"), Message.user(f"q{turn}"),
                     Message.assistant("", [call]), Message.tool(call.id, "fetch_logs", BIG),
                     Message.assistant(f"a{turn}")]
    result = await project(messages, [CompactionPolicy(enabled=True, tool_result_max_tokens=64)], "next",
                           ModelInfo("m", 100_000), instruction="Be short.")
    sent = result.request.messages
    assert sent[0] == Message.system("Be short.")
    assert [m.content for m in sent if m.role == "user"] == ["q0", "q1", "q2", "q3", "next"]
    tool_contents = [m.content for m in sent if m.role == "tool"]
    # units q0..q2 are historical; q3 is the most recent completed unit and stays whole
    assert [c == BIG for c in tool_contents] == [False, False, False, True]
    assert len(result.report("compaction").replaced) == 3
    events = ledger_events(messages)
    assert len({e.request_id for e in events}) == 4 and all(e.role != "system" for e in events)


async def test_memory_preload_reaches_its_store_through_the_services() -> None:
    memories = InMemoryMemoryService()
    await memories.add("agentlab", "user", "The user prefers tea")
    from agentlab.core import ServiceRegistry

    services = ServiceRegistry()
    services.add(memories)
    result = await project([Message.user("hi"), Message.assistant("hello")], [MemoryPolicy(preload_limit=3)],
                           "what do I drink?", ModelInfo("m", 100_000), services=services)
    assert "The user prefers tea" in result.request.messages[0].content
    assert [t["function"]["name"] for t in result.request.tools] == ["memory_search"]
    without = await project([Message.user("hi")], [MemoryPolicy(preload_limit=3)], "x", ModelInfo("m", 100_000))
    assert without.request.tools == [] and without.request.messages[0].role == "user"


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
async def test_without_step_reports_the_request_is_the_same(name: str) -> None:
    svc, session = await seeded()
    model = ScriptedModel([], info=ModelInfo("scripted", 100_000))
    mechanisms = LLMAgent("a", model, **COMBINATIONS[name]).context_mechanisms()
    full = await project(session, mechanisms, session.events[-1], model=model, session_service=svc, instruction="x")
    bare = await project(session, mechanisms, session.events[-1], model=model, session_service=svc, instruction="x",
                         report_steps=False)
    assert bare.request.messages == full.request.messages and bare.request.tools == full.request.tools
    assert [e.id for e in bare.draft.events] == [e.id for e in full.draft.events]
    assert bare.prompt_tokens == full.prompt_tokens
    assert bare.reports == [] and len(full.reports) == len(mechanisms)
