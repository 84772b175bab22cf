"""Notebook 06's pieces: a demo graph, drawing a compiled graph, one run's events by branch.

The drawing is plain matplotlib: nodes placed in columns by their distance from ``START`` (rows
in declaration order), edges as arrows — solid for an edge, dashed and labelled for a conditional
route, dotted for a join's inputs.
"""

from __future__ import annotations

from typing import Any

from agentlab.events import OBJ_STATE, Event
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import FunctionTool, LLMAgent, Runner
from agentlab.runtime.graph import (
    END,
    START,
    AgentNode,
    CompiledGraph,
    GraphAgent,
    Key,
    ModelNode,
    StateGraph,
    StateSchema,
    ToolNode,
    append,
)
from agentlab.session.base import Session
from agentlab.session.inmemory import InMemorySessionService

__all__ = ["demo_graph", "draw_graph", "draw_events_by_branch", "event_kind", "run_demo_graph"]


def _lookup(term: str) -> str:
    """Look a term up in the runbook.

    Args:
        term: The term.
    """
    return f"runbook entry for {term}: restart the pool, then check the certificate chain"


def demo_graph() -> CompiledGraph:
    """An incident triage: plan (one model step), fan out to a runbook look-up (one tool call) and a
    log reader (a sub-agent), join, then a route that loops back once for a second look or ends.
    """
    reader = LLMAgent("reader", ScriptedModel([ScriptedModel.tool_call("lookup", {"term": "pool"}, id="r1"),
                                               "logs: pool exhausted at 02:14"], default_reply="no change"),
                      tools=[FunctionTool(_lookup, name="lookup")])
    planner = ScriptedModel(default_reply="check the pool and the certificate")
    g = StateGraph(StateSchema({"input": Key(str), "plan": Key(str), "notes": Key(list, append, []),
                                "rounds": Key(int, default=0), "answer": Key(str)}))
    g.add_node("plan", ModelNode(planner, lambda s: "Plan the triage of: " + s["input"], "plan"))
    g.add_node("runbook", ToolNode(FunctionTool(_lookup, name="lookup"), lambda s: {"term": "pool"}, "notes"))
    g.add_node("logs", AgentNode(reader, lambda s: "Read the logs for: " + s["plan"], "notes"))
    g.add_node("decide", lambda s: {"rounds": s["rounds"] + 1, "answer": " | ".join(s["notes"])})
    g.add_edge(START, "plan").add_edge("plan", "runbook").add_edge("plan", "logs")
    g.add_join(["runbook", "logs"], "decide")
    g.add_route("decide", lambda s: "again" if s["rounds"] < 2 else "done", {"again": "plan", "done": END})
    return g.compile()


async def run_demo_graph(graph: CompiledGraph | None = None) -> Session:
    """Run :func:`demo_graph` (scripted models) once under the key ``main``; the session it wrote.

    A coroutine: ``await`` it in a notebook (its kernel already runs an event loop).
    """
    svc = InMemorySessionService()
    runner = Runner("triage", GraphAgent("triage", graph or demo_graph(), output_key="answer"), svc)
    async for _ in runner.run("oncall", "incident-1", "payments API times out", filter_key="main"):
        pass
    session = await svc.get_session("triage", "oncall", "incident-1")
    assert session is not None
    return session


def _layers(graph: CompiledGraph) -> dict[str, int]:
    depth = {START: 0}
    todo = [START]
    edges = graph.edge_list()
    while todo:
        node = todo.pop(0)
        for source, target, _ in edges:
            if source == node and target not in depth:
                depth[target] = depth[node] + 1
                todo.append(target)
    depth[END] = max(depth.values()) + 1
    return depth


def draw_graph(graph: CompiledGraph, ax: Any, title: str) -> None:
    """Draw ``graph`` on ``ax`` (see the module docstring) with ``title``."""
    depth = _layers(graph)
    columns: dict[int, list[str]] = {}
    for name in [START, *graph.nodes, END]:
        columns.setdefault(depth.get(name, 0), []).append(name)
    pos = {n: (d, -i + (len(ns) - 1) / 2) for d, ns in columns.items() for i, n in enumerate(ns)}
    styles = {"edge": ("-", "0.3"), "join": (":", "tab:purple")}
    for source, target, kind in graph.edge_list():
        (x0, y0), (x1, y1) = pos[source], pos[target]
        line, colour = styles.get(kind, ("--", "tab:orange"))
        bend = -0.45 if x1 <= x0 else 0.0  # a way back curves below the forward edges
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops={"arrowstyle": "-|>", "linestyle": line, "color": colour, "shrinkA": 30,
                                "shrinkB": 30, "mutation_scale": 14, "connectionstyle": f"arc3,rad={bend}"})
        if kind.startswith("route:"):
            # the middle of an arc3 curve: half way from the chord's middle to its control point
            mx, my = (x0 + x1) / 2 + bend * (y1 - y0) / 2, (y0 + y1) / 2 - bend * (x1 - x0) / 2
            ax.text(mx, my - 0.5 if bend else my + 0.12, kind[6:], color=colour, ha="center", fontsize=8)
    for name, (x, y) in pos.items():
        kind = type(graph.nodes[name]).__name__ if name in graph.nodes else ""
        label = {START: "START", END: "END"}.get(name, f"{name}\n({kind})")
        ax.text(x, y, label, ha="center", va="center", fontsize=8,
                bbox={"boxstyle": "round", "fc": "white" if kind else "0.85", "ec": "0.3"})
    ax.set_xlim(-0.6, max(depth.values()) + 0.6)
    ax.set_ylim(-1.8, 1.5)
    ax.text(0, -1.65, "solid: edge   dashed: conditional route (label)   dotted: join input", fontsize=8, color="0.3")
    ax.axis("off")
    ax.set_title(title)


def event_kind(event: Event) -> str:
    """A short kind for plotting: node start/finish, user, model call, tool call, tool result, state."""
    if event.object == OBJ_STATE:
        return str(event.metadata.get("phase") or "state")
    if event.is_tool_result():
        return "tool result"
    if event.is_tool_call():
        return "tool call"
    return {"user": "input", "assistant": "answer"}.get(event.role or "", "other")


def draw_events_by_branch(session: Session, ax: Any, title: str) -> None:
    """One row per filter key (branch), one mark per event in ledger order, shaped by its kind."""
    branches = list(dict.fromkeys(e.filter_key or "(full session)" for e in session.events))
    markers = {"input": "s", "answer": "o", "tool call": ">", "tool result": "<", "node_start": "|",
               "node_finish": "x", "run_start": "D", "run_done": "D"}
    seen: set[str] = set()
    for i, event in enumerate(session.events):
        kind = event_kind(event)
        y = branches.index(event.filter_key or "(full session)")
        ax.scatter([i], [y], marker=markers.get(kind, "."), s=36, label=None if kind in seen else kind,
                   color=f"C{list(markers).index(kind) % 10 if kind in markers else 9}")
        seen.add(kind)
    ax.set_yticks(range(len(branches)), branches)
    ax.invert_yaxis()
    ax.set_xlabel("event (ledger order)")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    ax.set_title(title)
