"""The in-process runtime: Runner -> Agent -> Model/Tools -> Events -> Session.

The names below load on first use, like the package root's. The projection types (``RequestDraft``,
``RequestProcessor``, ...) live in :mod:`agentlab.projection`, which imports nothing of the runtime,
so the components (summary, recall, compaction, memory) never load the agent and runner; they are
re-exported here and from ``agentlab.runtime.context`` for older imports. Lazy loading keeps a
``import agentlab.runtime.context`` from loading the agent and runner too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab._lazy import lazy_exports

_EXPORTS = {
    "Agent": "agentlab.runtime.agent",
    "LLMAgent": "agentlab.runtime.agent",
    "RequestDraft": "agentlab.projection",
    "RequestProcessor": "agentlab.projection",
    "events_to_messages": "agentlab.projection",
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
    from agentlab.projection import RequestDraft, RequestProcessor, events_to_messages
    from agentlab.runtime.agent import Agent, LLMAgent
    from agentlab.runtime.invocation import Invocation, RunOptions
    from agentlab.runtime.runner import Runner
    from agentlab.runtime.tools import FunctionTool, Tool, ToolContext, tool


__getattr__, __dir__ = lazy_exports("agentlab.runtime", _EXPORTS, globals())
