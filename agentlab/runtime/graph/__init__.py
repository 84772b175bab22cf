"""A state graph declared in Python, compiled (refused when malformed), run as an Agent.

:mod:`~agentlab.runtime.graph.state` (typed keys, a merge rule each), :mod:`~.nodes` (function,
model step, tool call, sub-agent, interrupt), :mod:`~.builder` (edges, routes, fan-out, joins,
``compile()``), :mod:`~.run` (:class:`GraphAgent`: node events, checkpoints, resume).

A fan-out with a join::

    g = StateGraph(StateSchema({"input": Key(str), "notes": Key(list, append, [])}))
    g.add_node("a", lambda s: {"notes": "a saw " + s["input"]})
    g.add_node("b", lambda s: {"notes": "b saw " + s["input"]})
    g.add_node("merge", lambda s: {})
    g.add_edge(START, "a").add_edge(START, "b").add_join(["a", "b"], "merge").add_edge("merge", END)
    agent = GraphAgent("research", g.compile())
"""

from agentlab.runtime.graph.builder import END, START, CompiledGraph, GraphError, StateGraph
from agentlab.runtime.graph.nodes import AgentNode, FunctionNode, Interrupt, ModelNode, Node, ToolNode
from agentlab.runtime.graph.run import GraphAgent
from agentlab.runtime.graph.state import Key, StateSchema, append, merge, replace, total

__all__ = [
    "END", "START", "AgentNode", "CompiledGraph", "FunctionNode", "GraphAgent", "GraphError", "Interrupt", "Key",
    "ModelNode", "Node", "StateGraph", "StateSchema", "ToolNode", "append", "merge", "replace", "total",
]
