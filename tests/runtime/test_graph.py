"""The graph agent: compile() refusals, steps, fan-out and joins, routes, node kinds, interrupt/resume."""

from __future__ import annotations

import pytest

from agentlab.events import OBJ_STATE
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import FunctionTool, LLMAgent, Runner
from agentlab.runtime.graph import (
    END,
    START,
    AgentNode,
    GraphAgent,
    GraphError,
    Interrupt,
    Key,
    ModelNode,
    StateGraph,
    StateSchema,
    ToolNode,
    append,
)
from agentlab.session.inmemory import InMemorySessionService


def schema(**extra):
    return StateSchema({"input": Key(str), "notes": Key(list, append, []), **extra})


def noop(state):
    return {}


def linear(*names):
    g = StateGraph(schema())
    for n in names:
        g.add_node(n, noop)
    chain = [START, *names, END]
    for a, b in zip(chain, chain[1:], strict=False):
        g.add_edge(a, b)
    return g


def refusal(graph) -> list[str]:
    with pytest.raises(GraphError) as info:
        graph.compile()
    return str(info.value).splitlines()


def test_compile_refuses_an_unknown_node():
    g = linear("a")
    g.add_edge("a", "ghost")
    assert refusal(g) == ["unknown node 'ghost' in edge 'a' -> 'ghost'"]


def test_compile_refuses_an_unreachable_node():
    g = linear("a")
    g.add_node("island", noop).add_edge("island", END)
    assert refusal(g) == ["unreachable node 'island': no path from START reaches it"]


def test_compile_refuses_a_node_with_no_path_to_end():
    g = linear("a")
    g.add_node("sink", noop).add_edge("a", "sink")
    assert refusal(g) == ["node 'sink' has no path to END"]


def test_compile_refuses_a_route_to_an_undeclared_target():
    g = linear("a")
    g.add_route("a", lambda s: "yes", {"yes": END, "no": "nowhere"})
    [line] = refusal(g)
    assert line.startswith("conditional route from 'a' ('no') to an undeclared target 'nowhere'")


def test_compile_refuses_a_join_that_can_never_fire():
    g = StateGraph(schema())
    for n in ("check", "left", "right", "both"):
        g.add_node(n, noop)
    g.add_edge(START, "check").add_route("check", lambda s: "l", {"l": "left", "r": "right"})
    g.add_join(["left", "right"], "both").add_edge("both", END)
    [line] = refusal(g)
    assert line.startswith("join left+right->both can never fire: 'left' and 'right' lie on different targets")
    # the same join after a fan-out (both run) compiles
    g2 = StateGraph(schema())
    for n in ("left", "right", "both"):
        g2.add_node(n, noop)
    g2.add_edge(START, "left").add_edge(START, "right").add_join(["left", "right"], "both").add_edge("both", END)
    g2.compile()


def test_each_problem_is_one_line():
    g = linear("a")
    g.add_node("island", noop).add_edge("island", END).add_node("sink", noop).add_edge("a", "sink")
    assert len(refusal(g)) == 2


async def drive(agent, message="go", svc=None, session="s"):
    svc = svc or InMemorySessionService()
    runner = Runner("app", agent, svc)
    events = [e async for e in runner.run("u", session, message, filter_key="flow")]
    return events, await svc.get_session("app", "u", session), svc


async def test_fan_out_join_and_route_with_node_events_and_checkpoints():
    g = StateGraph(schema(rounds=Key(int, default=0)))
    g.add_node("a", lambda s: {"notes": "a:" + s["input"]})
    g.add_node("b", lambda s: {"notes": "b:" + s["input"]})
    g.add_node("merge", lambda s: {"rounds": s["rounds"] + 1, "notes": f"merged {len(s['notes'])}"})
    g.add_edge(START, "a").add_edge(START, "b").add_join(["a", "b"], "merge")
    g.add_route("merge", lambda s: "again" if s["rounds"] < 2 else "stop", {"again": "a", "stop": END})
    g.add_edge("a", END)
    agent = GraphAgent("g", g.compile(), output_key="notes")
    events, session, _ = await drive(agent, "q")
    cp = session.state["graph:g"]
    assert cp["status"] == "done"
    # round 2 re-runs only "a" (the route), so the join waits for "b" and never fires again
    assert cp["state"]["notes"] == ["a:q", "b:q", "merged 2", "a:q"]
    assert cp["state"]["rounds"] == 1
    phases = [(e.metadata.get("phase"), e.metadata.get("node")) for e in session.events if e.object == OBJ_STATE]
    assert phases[0] == ("run_start", None) and phases[-1] == ("run_done", None)
    finishes = [n for p, n in phases if p == "node_finish"]
    assert finishes == ["a", "b", "merge", "a"]
    starts = [n for p, n in phases if p == "node_start"]
    assert starts == finishes
    assert events[-2].is_final_response()


async def test_model_tool_and_agent_nodes_write_on_their_branches():
    def lookup(term: str) -> str:
        """Look a term up.

        Args:
            term: The term.
        """
        return f"definition of {term}"

    tool = FunctionTool(lookup)
    model = ScriptedModel(["a short plan"])
    helper = ScriptedModel(["helper report"])
    g = StateGraph(StateSchema({"input": Key(str), "plan": Key(str), "found": Key(str), "report": Key(str)}))
    g.add_node("plan", ModelNode(model, lambda s: "plan for " + s["input"], "plan"))
    g.add_node("look", ToolNode(tool, lambda s: {"term": s["input"]}, "found"))
    g.add_node("help", AgentNode(LLMAgent("helper", helper), lambda s: "help with " + s["plan"], "report"))
    g.add_edge(START, "plan").add_edge("plan", "look").add_edge("look", "help").add_edge("help", END)
    _, session, _ = await drive(GraphAgent("g", g.compile(), output_key="report"), "tls")
    state = session.state["graph:g"]["state"]
    assert state == {"input": "tls", "plan": "a short plan", "found": "definition of tls", "report": "helper report"}
    by_key = {}
    for e in session.events:
        by_key.setdefault(e.filter_key, []).append(e)
    assert {"flow", "flow/plan", "flow/look", "flow/help"} <= set(by_key)
    assert [e.role for e in by_key["flow/look"]] == ["assistant", "tool"]
    # the model node's request: the history before the fork (the run's input) and its prompt
    assert [m.content for m in model.requests[0].messages if m.role != "system"] == ["tls", "plan for tls"]
    # the helper never sees the model node's branch
    assert "a short plan" in helper.requests[0].messages[-1].content
    assert all("plan for tls" != m.content for m in helper.requests[0].messages)


async def test_interrupt_waits_for_approval_and_resume_continues_the_same_run():
    done = []
    g = StateGraph(StateSchema({"input": Key(str), "approval": Key(str)}))
    g.add_node("draft", lambda s: {})
    g.add_node("approve", Interrupt(lambda s: f"Send the draft for {s['input']!r}? (yes/no)", "approval"))
    g.add_node("send", lambda s: done.append(s["approval"]) or {})
    g.add_edge(START, "draft").add_edge("draft", "approve").add_edge("approve", "send").add_edge("send", END)
    agent = GraphAgent("g", g.compile())
    svc = InMemorySessionService()
    events, session, _ = await drive(agent, "the memo", svc)
    cp = session.state["graph:g"]
    assert cp["status"] == "interrupted" and cp["interrupt"] == "approve" and done == []
    assert "Send the draft for 'the memo'" in [e for e in events if e.is_final_response()][-1].text
    run_id = cp["run"]
    _, session, _ = await drive(agent, "yes", svc)
    cp = session.state["graph:g"]
    assert cp["status"] == "done" and cp["run"] == run_id and done == ["yes"]
    finished = [e.metadata["node"] for e in session.events if e.metadata.get("phase") == "node_finish"]
    assert finished == ["draft", "approve", "send"]  # nothing ran twice


async def test_a_failing_node_is_recorded_and_retried_on_resume():
    calls = []

    def flaky(state):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("transient")
        return {"notes": "ok"}

    g = linear("first")
    g.add_node("flaky", flaky).add_edge("first", "flaky")
    g.edges.remove(("first", END))
    g.add_edge("flaky", END)
    agent = GraphAgent("g", g.compile())
    svc = InMemorySessionService()
    events, session, _ = await drive(agent, "x", svc)
    assert any(e.error and "node 'flaky' failed: RuntimeError: transient" in e.error for e in events)
    assert session.state["graph:g"]["status"] == "failed"
    _, session, _ = await drive(agent, "retry", svc)
    assert session.state["graph:g"]["status"] == "done" and len(calls) == 2
    finished = [e.metadata["node"] for e in session.events if e.metadata.get("phase") == "node_finish"]
    assert finished == ["first", "flaky"]


async def test_writes_are_checked_against_the_schema():
    g = linear("a")
    g.nodes["a"] = type(g.nodes["a"])(lambda s: {"undeclared": 1})
    events, session, _ = await drive(GraphAgent("g", g.compile()))
    assert any(e.error and "wrote the undeclared state key 'undeclared'" in e.error for e in events)


async def test_fan_out_nodes_run_at_once():
    import asyncio

    ready = asyncio.Event()

    async def waits(state):
        await asyncio.wait_for(ready.wait(), timeout=5)  # only the sibling can set it
        return {"notes": "waited"}

    async def signals(state):
        ready.set()
        return {"notes": "signalled"}

    g = StateGraph(schema())
    g.add_node("w", waits).add_node("s", signals).add_node("j", noop)
    g.add_edge(START, "w").add_edge(START, "s").add_join(["w", "s"], "j").add_edge("j", END)
    _, session, _ = await drive(GraphAgent("g", g.compile()))
    assert session.state["graph:g"]["status"] == "done"
    assert session.state["graph:g"]["state"]["notes"] == ["signalled", "waited"]  # merged as they finished


async def test_a_failed_model_step_fails_its_node():
    from agentlab.model.base import ServerError

    g = StateGraph(StateSchema({"input": Key(str), "plan": Key(str)}))
    g.add_node("plan", ModelNode(ScriptedModel([ServerError("down")]), lambda s: "plan " + s["input"], "plan"))
    g.add_edge(START, "plan").add_edge("plan", END)
    events, session, _ = await drive(GraphAgent("g", g.compile()))
    assert session.state["graph:g"]["status"] == "failed"
    assert any(e.error and "node 'plan' failed" in e.error and "the model call failed" in e.error for e in events)
