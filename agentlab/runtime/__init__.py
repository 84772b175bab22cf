"""The in-process runtime: Runner -> Agent -> Model/Tools -> Events -> Session.

The names below load on first use, like the package root's. Components (summary, recall) import
``agentlab.runtime.context`` for the projection types; an eager ``__init__`` would load the agent
and runner with it, which import those components back — an import cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab._lazy import lazy_exports

_EXPORTS = {
    "Agent": "agentlab.runtime.agent",
    "LLMAgent": "agentlab.runtime.agent",
    "RequestDraft": "agentlab.runtime.context",
    "RequestProcessor": "agentlab.runtime.context",
    "events_to_messages": "agentlab.runtime.context",
    "Invocation": "agentlab.runtime.invocation",
    "RunOptions": "agentlab.runtime.invocation",
    "Runner": "agentlab.runtime.runner",
    "FunctionTool": "agentlab.runtime.tools",
    "Tool": "agentlab.runtime.tools",
    "ToolContext": "agentlab.runtime.tools",
    "tool": "agentlab.runtime.tools",
}

__all__ = [
    "Agent", "FunctionTool", "Invocation", "LLMAgent", "RequestDraft", "RequestProcessor", "RunOptions",
    "Runner", "Tool", "ToolContext", "events_to_messages", "tool",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from agentlab.runtime.agent import Agent, LLMAgent
    from agentlab.runtime.context import RequestDraft, RequestProcessor, events_to_messages
    from agentlab.runtime.invocation import Invocation, RunOptions
    from agentlab.runtime.runner import Runner
    from agentlab.runtime.tools import FunctionTool, Tool, ToolContext, tool


__getattr__, __dir__ = lazy_exports("agentlab.runtime", _EXPORTS, globals())
