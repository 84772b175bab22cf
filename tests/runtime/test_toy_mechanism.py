"""A mechanism written outside ``agentlab/`` plugs into the Runner, LLMAgent and ``project`` unchanged.

``KeepLastN`` keeps only the last N events of each request (the current input always among them)
and logs every lifecycle hook it receives. Nothing in the library knows it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from agentlab.core import (
    ContextMechanism,
    FunctionTool,
    Invocation,
    PendingRequest,
    RequestDraft,
    ServiceRegistry,
    Stage,
    StagedProcessor,
    Tool,
    project,
)
from agentlab.events import Event
from agentlab.model.base import ModelInfo, ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import LLMAgent, Runner
from agentlab.session.inmemory import InMemorySessionService

#: Between the current input (700) and compaction (800): a stage the library does not define.
KEEP_LAST = Stage("keep_last", 750)


class HookLog:
    """A service the mechanism registers and writes to: proves the typed registry reaches the hooks."""

    def __init__(self) -> None:
        self.calls: list[str] = []


class KeepLastProcessor:
    """Keeps the last ``n`` events; declares no ``events_role``, so the projection cache steps aside."""

    name = "keep_last"

    def __init__(self, n: int) -> None:
        self.n = n

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        draft.events = draft.events[-self.n:]


def where_am_i(city: str) -> str:
    """Say where the user is.

    Args:
        city: The city.
    """
    return f"you are in {city}"


class KeepLastN(ContextMechanism):
    """The toy: a processor at its own stage, a tool, and a log of every hook."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.log: list[str] = []

    def describe(self) -> str:
        return "keep_last_n"

    def request_processors(self) -> Sequence[StagedProcessor]:
        return [StagedProcessor(KEEP_LAST, KeepLastProcessor(self.n))]

    def request_tools(self, inv: Invocation) -> Sequence[Tool]:
        return [FunctionTool(where_am_i)]

    def open(self, services: ServiceRegistry) -> None:
        self.log.append("open")
        services.add(HookLog(), owned=True)

    async def before_request(self, inv: Invocation, pending: PendingRequest) -> tuple[ModelRequest, RequestDraft] | None:
        self.log.append(f"before_request:{len(pending.request.messages)}")
        inv.services.require(HookLog).calls.append("before_request")
        return None

    async def on_event_appended(self, inv: Invocation, event: Event) -> None:
        self.log.append(f"appended:{event.role}")

    async def on_run_completed(self, inv: Invocation) -> None:
        self.log.append("completed")
        inv.services.require(HookLog).calls.append("completed")

    async def close(self) -> None:
        self.log.append("close")


async def test_the_toy_runs_through_runner_and_agent_and_its_hooks_fire_in_order(caplog: Any) -> None:
    toy = KeepLastN(3)
    model = ScriptedModel([ScriptedModel.tool_call("where_am_i", {"city": "Oslo"}, id="c1"), "Oslo it is",
                           "second answer"])
    runner = Runner("app", LLMAgent("a", model, instruction="Be brief.", mechanisms=[toy]), InMemorySessionService())
    with caplog.at_level(logging.DEBUG, logger="agentlab.runtime.projection_cache"):
        first, _ = await runner.ask("u", "s", "where am I?")
        second, _ = await runner.ask("u", "s", "and now?")
    assert (first, second) == ("Oslo it is", "second answer")
    # every request holds the system text and at most 3 events; in the third, the last 3 events start
    # with a tool result whose call was cut, so the result is left out as well (a well-formed round)
    assert [len(r.messages) for r in model.requests] == [2, 4, 3]
    assert [m.content for m in model.requests[2].messages[1:]] == ["Oslo it is", "and now?"]
    assert [t["function"]["name"] for t in model.requests[0].tools] == ["where_am_i"]
    assert toy.log == [
        "open",
        "appended:user", "before_request:2", "appended:assistant", "appended:tool", "before_request:4",
        "appended:assistant", "completed",
        "appended:user", "before_request:3", "appended:assistant", "completed",
    ]
    hook_log = runner.services.require(HookLog)
    assert hook_log.calls == ["before_request", "before_request", "completed", "before_request", "completed"]
    assert "processor 'keep_last' declares no events_role" in caplog.text
    await runner.close()
    assert toy.log[-1] == "close"
    assert runner.services.get(HookLog) is hook_log  # owned services are closed, not forgotten


async def test_the_toy_through_project_builds_the_agents_request() -> None:
    svc = InMemorySessionService()
    model = ScriptedModel(["one", "two", "three"], info=ModelInfo("m", 50_000))
    agent = LLMAgent("a", model, instruction="Be brief.", mechanisms=[KeepLastN(3)])
    runner = Runner("app", agent, svc)
    for text in ("first", "second", "third"):
        await runner.ask("u", "s", text)
    session = await svc.get_session("app", "u", "s")
    assert session is not None and len(session.events) == 6
    toy = KeepLastN(3)
    result = await project(session, [toy], "fourth", ModelInfo("m", 50_000), instruction="Be brief.")
    assert [m.content for m in result.request.messages] == ["Be brief.", "third", "three", "fourth"]
    report = result.report("keep_last_n")
    assert report.hidden_event_ids == [e.id for e in session.events[:4]]
    assert toy.log == ["open", "before_request:4", "close"]
    # the same request the agent would send for that input
    await runner.ask("u", "s", "fourth")
    assert model.requests[-1].messages[1:-1] == result.request.messages[1:-1]
    assert model.requests[-1].messages[-1].content == "fourth"
    assert model.requests[-1].tools == result.request.tools


@pytest.mark.parametrize("bad", [object(), "summary"])
def test_something_that_is_not_a_mechanism_is_refused_by_name(bad: object) -> None:
    with pytest.raises(TypeError, match="not a context mechanism"):
        LLMAgent("a", ScriptedModel([]), mechanisms=[bad])  # type: ignore[list-item]
