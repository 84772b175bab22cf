"""agentlab: a notebook-first lab for agent context governance.

The public API, re-exported here (loaded on first use so ``import agentlab`` stays cheap)::

    from agentlab import Runner, LLMAgent, FunctionTool, RunOptions
    from agentlab import SummaryPolicy, CompactionPolicy, RecallPolicy, MemoryPolicy
    from agentlab import InMemorySessionService, DuckDBSessionService, get_model
    from agentlab import ContextMechanism, project      # the seam: a mechanism, and a projection without an agent
"""

from __future__ import annotations

from agentlab._lazy import lazy_exports

__version__ = "0.2.0"

_EXPORTS = {
    "Event": "agentlab.events",
    "Message": "agentlab.events",
    "ToolCall": "agentlab.events",
    "Usage": "agentlab.events",
    "Runner": "agentlab.runtime",
    "LLMAgent": "agentlab.runtime",
    "Agent": "agentlab.runtime",
    "FunctionTool": "agentlab.runtime",
    "RunOptions": "agentlab.runtime",
    "Invocation": "agentlab.runtime",
    "ContextMechanism": "agentlab.core",
    "project": "agentlab.core",
    "SummaryPolicy": "agentlab.summary",
    "CompactionPolicy": "agentlab.compaction",
    "RecallPolicy": "agentlab.recall",
    "MemoryPolicy": "agentlab.memory",
    "InMemorySessionService": "agentlab.session",
    "DuckDBSessionService": "agentlab.session",
    "InMemoryMemoryService": "agentlab.memory",
    "DuckDBMemoryService": "agentlab.memory",
    "get_model": "agentlab.model",
    "ScriptedModel": "agentlab.model.scripted",
    "CallCache": "agentlab.model",
    "GenerationConfig": "agentlab.model",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


__getattr__, __dir__ = lazy_exports("agentlab", _EXPORTS, globals())
