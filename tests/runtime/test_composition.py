"""Chain, Parallel, Cycle and the sub-agent tool: branches, visibility, merge order, stops."""

from __future__ import annotations

import pytest

from agentlab.events import OBJ_STATE, Event, Message
from agentlab.model.base import ServerError
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import FunctionTool, LLMAgent, Runner
from agentlab.runtime.composition import AgentTool, ChainAgent, CycleAgent, ParallelAgent
from agentlab.session.inmemory import InMemorySessionService


def texts(request) -> list[str]:
    return [m.content for m in request.messages if m.role != "system"]


async def run(agent, message="start", filter_key=""):
    svc = InMemorySessionService()
    runner = Runner("app", agent, svc)
    events = [e async for e in runner.run("u", "s", message, filter_key=filter_key)]
    return events, await svc.get_session("app", "u", "s")


async def test_chain_runs_in_order_and_each_sees_what_the_earlier_wrote():
    first, second = ScriptedModel(["draft from A"]), ScriptedModel(["review from B"])
    chain = ChainAgent("pipeline", [LLMAgent("a", first), LLMAgent("b", second)])
    events, session = await run(chain, "write it")
    answers = [e.text for e in session.events if e.is_final_response()]
    assert answers == ["draft from A", "review from B"]
    assert texts(second.requests[0]) == ["write it", "draft from A"]
    assert all(e.filter_key == "" for e in session.events)


async def test_chain_stops_at_an_error_unless_told_not_to():
    after = ScriptedModel(["later"])
    await run(ChainAgent("c", [LLMAgent("a", ScriptedModel([ServerError("down")])), LLMAgent("b", after)]))
    assert after.calls == 0
    await run(ChainAgent("c", [LLMAgent("a", ScriptedModel([ServerError("down")])), LLMAgent("b", after)],
                         stop_on_error=False))
    assert after.calls == 1
    with pytest.raises(ValueError, match="distinct names"):
        ChainAgent("c", [LLMAgent("a", after), LLMAgent("a", after)])
    with pytest.raises(ValueError, match="at least one"):
        ChainAgent("c", [])


async def test_parallel_branches_see_the_fork_history_and_their_own_events_never_a_sibling():
    ma = ScriptedModel([ScriptedModel.tool_call("note", {"text": "alpha secret"}, id="c1"), "A done"])
    mb = ScriptedModel([ScriptedModel.tool_call("note", {"text": "beta secret"}, id="c2"), "B done"])
    mc = ScriptedModel(["merged"])

    def note(text: str) -> str:
        """Write a note.

        Args:
            text: What to write.
        """
        return f"noted {text}"

    fan = ParallelAgent("fan", [LLMAgent("a", ma, tools=[FunctionTool(note)]),
                                LLMAgent("b", mb, tools=[FunctionTool(note)])])
    chain = ChainAgent("flow", [fan, LLMAgent("merge", mc)])
    events, session = await run(chain, "research it", filter_key="main")
    keys = {e.filter_key for e in session.events}
    assert keys == {"main", "main/a", "main/b"}
    # every event a branch wrote names its branch
    for e in session.events:
        if e.filter_key != "main":
            assert e.metadata["branch"] == e.filter_key
    # each branch's second request: the fork history (the user input) and its own round only
    assert texts(ma.requests[1]) == ["research it", "", "noted alpha secret"]
    assert texts(mb.requests[1]) == ["research it", "", "noted beta secret"]
    # the parent after the join sees the joined reports, not the branches' work
    seen = " ".join(texts(mc.requests[0]))
    assert "[a] A done" in seen and "[b] B done" in seen and "secret" not in seen
    # fork and join markers, then the report, on the parent's key
    states = [e for e in session.events if e.object == OBJ_STATE]
    assert states[0].state_delta == {"branch:main/a": "open", "branch:main/b": "open"}
    assert states[1].state_delta == {"branch:main/a": "joined", "branch:main/b": "joined"}
    assert session.state["join:fan"] == {"a": "A done", "b": "B done"}


async def test_parallel_merge_order_is_arrival_then_declared_order():
    fan = ParallelAgent("par", [LLMAgent("x", ScriptedModel(["x1"])), LLMAgent("y", ScriptedModel(["y1"]))],
                        report=False)
    events, _ = await run(fan)
    branch_events = [e.filter_key for e in events if e.filter_key]
    # both are ready at once: declared order
    assert branch_events == ["x", "y"]


class _Escalate:
    name = "judge"

    def __init__(self, at: int) -> None:
        self.at, self.calls = at, 0

    async def run(self, inv):
        self.calls += 1
        yield Event(author=self.name, choices=[Message.assistant(f"pass {self.calls}")],
                    metadata={"escalate": self.calls >= self.at})


async def test_cycle_stops_by_condition_escalation_or_maximum_and_says_which():
    def outcome(session):
        return session.state["cycle:loop"]

    worker = LLMAgent("w", ScriptedModel(["one", "two", "three", "four"]))
    _, session = await run(CycleAgent("loop", [worker], max_iterations=3))
    assert outcome(session) == {"iterations": 3, "stopped_by": "max_iterations"}

    worker = LLMAgent("w", ScriptedModel(["try", "try", "DONE", "x"]))
    _, session = await run(CycleAgent("loop", [worker], max_iterations=10,
                                      until=lambda inv, evs: any("DONE" in e.text for e in evs)))
    assert outcome(session) == {"iterations": 3, "stopped_by": "condition"}

    judge = _Escalate(at=2)
    after = LLMAgent("after", ScriptedModel(["a1", "a2"]))
    _, session = await run(CycleAgent("loop", [judge, after], max_iterations=5))
    assert outcome(session) == {"iterations": 2, "stopped_by": "escalation"}
    # the escalation stops the pass at once: the agent after the judge ran only in pass 1
    assert [e.text for e in session.events if e.author == "after"] == ["a1"]

    with pytest.raises(ValueError, match="max_iterations or an until"):
        CycleAgent("loop", [worker])


async def test_agent_tool_returns_only_the_report_and_the_parent_never_sees_the_work():
    def fetch(page: int) -> str:
        """Fetch a page.

        Args:
            page: Page number.
        """
        return f"page {page}: " + "bulky payload " * 20

    child_model = ScriptedModel([ScriptedModel.tool_call("fetch", {"page": 1}, id="f1"),
                                 ScriptedModel.tool_call("fetch", {"page": 2}, id="f2"), "report: 2 pages"])
    child = LLMAgent("researcher", child_model, tools=[FunctionTool(fetch)])
    parent_model = ScriptedModel([ScriptedModel.tool_call("researcher", {"task": "read pages 1-2"}, id="t1"),
                                  "final answer"])
    parent = LLMAgent("lead", parent_model, tools=[AgentTool(child)])
    events, session = await run(parent, "summarise the pages", filter_key="main")
    assert [e.text for e in events if e.is_final_response()][-1] == "final answer"
    second = parent_model.requests[1].messages
    assert second[-1].role == "tool" and second[-1].content == "report: 2 pages"
    assert not any("bulky payload" in m.content for m in second)
    branch = [e for e in session.events if e.filter_key == "main/researcher"]
    assert sum("bulky payload" in e.text for e in branch) == 2
    # the sub-agent's view: the fork history (the parent's input and call) and its task
    assert texts(child_model.requests[0])[0] == "summarise the pages"
    assert texts(child_model.requests[0])[-1] == "read pages 1-2"

    parent_model = ScriptedModel([ScriptedModel.tool_call("researcher", {"task": "x"}, id="t1")])
    with pytest.raises(ValueError, match="filter_key='main'"):
        await run(LLMAgent("lead", parent_model, tools=[AgentTool(child)]))


def test_the_set_form_of_the_visibility_rule_is_the_rule():
    from agentlab.core import branch_key, in_filter
    from agentlab.core.mechanism import visible_keys

    keys = ["", "a", "b", "a/x", "a/y", "a/x/deep", "ab", "a/xy", "b/x"]
    for view in keys:
        visible = visible_keys(view)
        for event_key in keys:
            assert (visible is None or event_key in visible) == in_filter(event_key, view), (view, event_key)
    with pytest.raises(ValueError, match="non-empty name"):
        branch_key("a", " / ")


class _Paced:
    """Yields its answers with pauses, and records whether each earlier event was persisted by then."""

    def __init__(self, name: str, pauses: list[float]) -> None:
        self.name, self.pauses, self.persisted = name, pauses, []

    async def run(self, inv):
        import asyncio

        for k, pause in enumerate(self.pauses):
            await asyncio.sleep(pause)
            if k:
                self.persisted.append(any(e.text == f"{self.name}{k - 1}" for e in inv.session.events))
            yield Event(author=self.name, choices=[Message.assistant(f"{self.name}{k}")])


async def test_parallel_branches_run_at_once_and_merge_in_arrival_order():
    slow, fast = _Paced("s", [0.0, 0.2]), _Paced("f", [0.05, 0.05])
    events, session = await run(ParallelAgent("par", [slow, fast], report=False), filter_key="main")
    texts_in_order = [e.text for e in events if e.filter_key in ("main/s", "main/f")]
    # s0 is ready first, then f0 and f1 while s sleeps, then s1: arrival order, not declared order
    assert texts_in_order == ["s0", "f0", "f1", "s1"]
    # a branch moved on only after its previous event was in the session
    assert slow.persisted == [True] and fast.persisted == [True]
