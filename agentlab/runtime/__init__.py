"""The in-process runtime: Runner -> Agent -> Model/Tools -> Events -> Session.

Agents: :class:`LLMAgent` (the model <-> tool loop), the compositions of
:mod:`agentlab.runtime.composition` (chain, parallel fan-out, cycle, a sub-agent behind a tool) and
:class:`GraphAgent` (:mod:`agentlab.runtime.graph`), all behind the one Agent interface.

The names below load on first use, like the package root's. The contract types (``Invocation``,
``Tool``, ``RequestDraft``, ...) live in :mod:`agentlab.core`, below the mechanisms, so the mechanisms
(summary, recall, compaction, memory) never load the agent and runner; they are re-exported here
(and from ``agentlab.core.invocation`` / ``.tools`` / ``.context``) for older imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab._lazy import lazy_exports

_EXPORTS = {
    "Agent": "agentlab.core.invocation",
    "AgentTool": "agentlab.runtime.composition",
    "ChainAgent": "agentlab.runtime.composition",
    "CycleAgent": "agentlab.runtime.composition",
    "GraphAgent": "agentlab.runtime.graph",
    "ParallelAgent": "agentlab.runtime.composition",
    "LLMAgent": "agentlab.runtime.agent",
    "RequestDraft": "agentlab.core.mechanism",
    "RequestProcessor": "agentlab.core.mechanism",
    "events_to_messages": "agentlab.core.mechanism",
    "Invocation": "agentlab.core.invocation",
    "RunOptions": "agentlab.core.invocation",
    "Runner": "agentlab.runtime.runner",
    "FunctionTool": "agentlab.core.tools",
    "Tool": "agentlab.core.tools",
    "ToolContext": "agentlab.core.tools",
    "tool": "agentlab.core.tools",
}

__all__ = [
    "Agent", "AgentTool", "ChainAgent", "CycleAgent", "FunctionTool", "GraphAgent", "ParallelAgent", "Invocation", "LLMAgent", "RequestDraft", "RequestProcessor", "RunOptions",
    "Runner", "Tool", "ToolContext", "events_to_messages", "tool",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from agentlab.core.invocation import Agent, Invocation, RunOptions
    from agentlab.core.mechanism import RequestDraft, RequestProcessor, events_to_messages
    from agentlab.core.tools import FunctionTool, Tool, ToolContext, tool
    from agentlab.runtime.agent import LLMAgent
    from agentlab.runtime.composition import AgentTool, ChainAgent, CycleAgent, ParallelAgent
    from agentlab.runtime.graph import GraphAgent
    from agentlab.runtime.runner import Runner


__getattr__, __dir__ = lazy_exports("agentlab.runtime", _EXPORTS, globals())
