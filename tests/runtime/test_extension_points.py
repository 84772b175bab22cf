"""Declared extension points: mechanisms contribute staged processors, tools and a request revision;
the projection cache finds the summary step by its declared role, not by a name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentlab.compaction import CompactionPolicy
from agentlab.core.mechanism import (
    CURRENT_INPUT,
    HISTORY,
    INJECT_SUMMARY,
    INSTRUCTION,
    PRELOAD_RECALL,
    STAGES,
    TOOL_GUIDE,
    ContextMechanism,
    EventsRole,
    PendingRequest,
    RequestDraft,
    Stage,
    StagedProcessor,
    order_by_stage,
)
from agentlab.core.steps import projection_start
from agentlab.events import Event, Message, ToolCall, user_event
from agentlab.memory import MemoryPolicy
from agentlab.model.base import ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.recall import RecallPolicy
from agentlab.runtime import FunctionTool, Invocation, LLMAgent, Runner
from agentlab.runtime.projection_cache import plan_for
from agentlab.session.base import Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import SummaryInjectionProcessor, SummaryPolicy

#: A stage of our own between the summary and preload recall: declared here, nowhere else.
NOTES = Stage("notes", (INJECT_SUMMARY.order + PRELOAD_RECALL.order) // 2)


class NoteProcessor:
    """Adds one line of system text; leaves the events alone (and says so)."""

    events_role = EventsRole.UNTOUCHED

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        draft.system_parts.append(self.text)


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"about {topic}"


class NotesMechanism(ContextMechanism):
    """A mechanism the agent has never heard of: a note at its own stage, one at a built-in stage, a tool."""

    def __init__(self) -> None:
        self.revised = 0

    def request_processors(self) -> Sequence[StagedProcessor]:
        return [StagedProcessor(TOOL_GUIDE, NoteProcessor("notes_guide", "NOTE: guide")),
                StagedProcessor(NOTES, NoteProcessor("notes", "NOTE: own stage"))]

    def request_tools(self, inv: Invocation) -> Sequence[Any]:
        return [FunctionTool(lookup)]


def names(agent: LLMAgent) -> list[str]:
    return [p.name for p in agent.processors]


def all_policies(**kwargs: Any) -> LLMAgent:
    return LLMAgent("a", ScriptedModel([]), summary=SummaryPolicy(), compaction=CompactionPolicy(enabled=True),
                    recall=RecallPolicy(preload_limit=2), memory=MemoryPolicy(preload_limit=3), **kwargs)


def test_the_policies_chain_follows_the_declared_stage_order() -> None:
    assert [s.order for s in STAGES] == sorted(s.order for s in STAGES)
    assert names(all_policies()) == ["instruction", "memory_preload", "history", "summary", "preload_recall",
                                     "recall_overview", "current_input", "compaction"]
    assert names(LLMAgent("a", ScriptedModel([]))) == ["instruction", "history", "current_input"]
    # switched-off parts contribute nothing
    assert names(LLMAgent("a", ScriptedModel([]), compaction=CompactionPolicy(),
                          recall=RecallPolicy(tools_enabled=False))) == ["instruction", "history", "current_input"]


def test_a_new_mechanism_lands_at_its_stages_without_editing_the_agent() -> None:
    agent = all_policies(mechanisms=[NotesMechanism()])
    assert names(agent) == ["instruction", "memory_preload", "history", "summary", "notes", "preload_recall",
                            "recall_overview", "notes_guide", "current_input", "compaction"]
    assert plan_for(agent.processors) is not None  # declared untouched: the cache still mirrors the chain


def test_ties_keep_the_contribution_order() -> None:
    a, b, c = (NoteProcessor(n, n) for n in "abc")
    ordered = order_by_stage([StagedProcessor(TOOL_GUIDE, a), StagedProcessor(NOTES, b), StagedProcessor(TOOL_GUIDE, c)])
    assert [p.name for p in ordered] == ["b", "a", "c"]


async def test_mechanism_tools_and_text_reach_the_request() -> None:
    svc = InMemorySessionService()
    model = ScriptedModel(["done"])
    agent = LLMAgent("a", model, instruction="be brief", recall=RecallPolicy(), mechanisms=[NotesMechanism()])
    runner = Runner("app", agent, svc)
    answer, _ = await runner.ask("u", "s", "hello")
    assert answer == "done"
    request = model.requests[0]
    assert [t["function"]["name"] for t in request.tools] == ["session_search", "session_load", "lookup"]
    system = request.messages[0].content
    assert system.index("be brief") < system.index("NOTE: own stage") < system.index("## Session recall") \
        < system.index("NOTE: guide")


class ShortenRequests(ContextMechanism):
    """Revises the finished request: keeps only its last message."""

    async def before_request(self, inv: Invocation, pending: PendingRequest) -> tuple[ModelRequest, RequestDraft] | None:
        request = pending.request
        return ModelRequest(messages=request.messages[-1:], tools=request.tools, config=request.config), pending.draft


async def test_a_mechanism_can_revise_the_finished_request() -> None:
    model = ScriptedModel(["ok"])
    runner = Runner("app", LLMAgent("a", model, instruction="system text", mechanisms=[ShortenRequests()]),
                    InMemorySessionService())
    await runner.ask("u", "s", "hi")
    assert [m.content for m in model.requests[0].messages] == ["hi"]


# ---------------------------------------------------------------------------- the summary step


class RenamedSummary(SummaryInjectionProcessor):
    """The summary step under another name: still found, because it declares its role."""

    name = "rolling_summary"


class NamedLikeSummary:
    """Called "summary" but declaring no role: not the summary step, and not mirrored by the cache."""

    name = "summary"

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        return None


async def _session_with_summary() -> tuple[InMemorySessionService, Any]:
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    for turn in range(4):
        run = f"inv-{turn}"
        call = ToolCall(f"c{turn}", "lookup", "{}")
        for event in (user_event(f"question {turn}", invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.assistant("", [call])], invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.tool(call.id, "lookup", f"result {turn}")],
                            invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.assistant(f"answer {turn}")], invocation_id=run,
                            request_id=run)):
            await svc.append_event(session, event)
    anchor = session.events[11]  # the answer of turn 2: its round is whole
    await svc.write_summary(session, "", Summary("the story so far", anchor.timestamp,
                                                 SummaryBoundary("", anchor.timestamp, anchor.id)))
    return svc, session


def _agent_with(processor: Any) -> LLMAgent:
    agent = LLMAgent("a", ScriptedModel([]))
    instruction, history, current_input = agent.processors
    agent.processors = order_by_stage([StagedProcessor(INSTRUCTION, instruction), StagedProcessor(HISTORY, history),
                                       StagedProcessor(INJECT_SUMMARY, processor),
                                       StagedProcessor(CURRENT_INPUT, current_input)])
    return agent


async def test_the_summary_step_is_found_by_its_declared_role_not_its_name() -> None:
    svc, session = await _session_with_summary()
    current = session.events[12]
    renamed = _agent_with(RenamedSummary(SummaryPolicy()))
    inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=renamed,
                     message=current.message, id="inv-3", user_event=current)
    plan = plan_for(renamed.processors)
    assert plan is not None and plan.summary is renamed.processors[2]
    assert projection_start(inv) == 8  # the user turn of the round the boundary falls in
    fast = (await renamed.build_draft(inv)).to_model_request().messages
    assert renamed.projection_cache.counts == {"incremental": 0, "rebuilt": 1, "full_chain": 0}
    renamed.incremental_projection = False
    full = (await renamed.build_draft(inv)).to_model_request().messages
    assert fast == full and "the story so far" in fast[0].content
    # only turn 3 (after the boundary) is left raw
    assert [(m.role, m.content) for m in fast[1:]] == [("user", "question 3"), ("assistant", ""),
                                                     ("tool", "result 3"), ("assistant", "answer 3")]

    impostor = _agent_with(NamedLikeSummary())
    inv.agent = impostor
    assert plan_for(impostor.processors) is None
    assert projection_start(inv) == 0
