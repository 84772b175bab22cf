"""Other systems' context policies, re-implemented as agentlab context mechanisms ("peer policies").

Each module reproduces one peer's policy from its source (cited in the module docstring, with
every departure listed): a frozen policy dataclass with the source's defaults, a pure core that
``tests/policies/`` compares with the peer's own code, and a :class:`PeerMechanism` that runs the
core over the request's events — a projection: the ledger is never rewritten, and a tool call is
never shown without its result.

The registry maps a name to its policy class and mechanism factory, for the benchmark arms::

    from agentlab.policies import POLICIES, mechanism
    entry = POLICIES["langchain_clear_tool_uses"]
    agent = LLMAgent("a", model, mechanisms=[mechanism("langchain_clear_tool_uses", keep=2)])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentlab.policies._base import Outcome, PeerMechanism, Record, Summarizer, count_tokens_approximately
from agentlab.policies.adk_compaction import AdkCompaction, AdkCompactionPolicy
from agentlab.policies.anthropic_clear_tool_uses import AnthropicClearToolUses, AnthropicClearToolUsesPolicy
from agentlab.policies.codex_compaction import CodexCompaction, CodexCompactionPolicy
from agentlab.policies.inspect_edit import InspectEdit, InspectEditPolicy
from agentlab.policies.inspect_summary import InspectSummary, InspectSummaryPolicy
from agentlab.policies.inspect_trim import InspectTrim, InspectTrimPolicy
from agentlab.policies.langchain_clear_tool_uses import LangChainClearToolUses, LangChainClearToolUsesPolicy
from agentlab.policies.langchain_summarization import LangChainSummarization, LangChainSummarizationPolicy
from agentlab.policies.langmem_summarize import LangMemSummarize, LangMemSummarizePolicy
from agentlab.policies.letta_sliding_window import LettaSlidingWindow, LettaSlidingWindowPolicy
from agentlab.policies.swe_agent_masking import SweAgentMasking, SweAgentMaskingPolicy


@dataclass(frozen=True)
class PolicyEntry:
    """One registered peer policy: its policy dataclass, its mechanism factory and its source."""

    name: str
    policy_class: type[Any]
    factory: Callable[..., PeerMechanism]
    source: str


def _entry(name: str, policy_class: type[Any], mechanism_class: type[PeerMechanism], source: str) -> PolicyEntry:
    return PolicyEntry(name, policy_class, mechanism_class, source)


#: name -> entry, in the order the README lists them.
POLICIES: dict[str, PolicyEntry] = {e.name: e for e in (
    _entry("langchain_clear_tool_uses", LangChainClearToolUsesPolicy, LangChainClearToolUses,
           "langchain==1.5.2 agents/middleware/context_editing.py"),
    _entry("langchain_summarization", LangChainSummarizationPolicy, LangChainSummarization,
           "langchain==1.5.2 agents/middleware/summarization.py"),
    _entry("inspect_edit", InspectEditPolicy, InspectEdit, "inspect-ai==0.3.285 model/_compaction/edit.py"),
    _entry("inspect_trim", InspectTrimPolicy, InspectTrim, "inspect-ai==0.3.285 model/_compaction/trim.py"),
    _entry("inspect_summary", InspectSummaryPolicy, InspectSummary,
           "inspect-ai==0.3.285 model/_compaction/summary.py"),
    _entry("langmem_summarize", LangMemSummarizePolicy, LangMemSummarize,
           "langchain-ai/langmem@b5dbe4aa (0.0.30) short_term/summarization.py"),
    _entry("adk_compaction", AdkCompactionPolicy, AdkCompaction,
           "google-adk==2.13.0 apps/compaction.py (token threshold), flows/llm_flows/context/_compaction.py"),
    _entry("anthropic_clear_tool_uses", AnthropicClearToolUsesPolicy, AnthropicClearToolUses,
           "Anthropic context editing docs; anthropic-sdk-python@009b0353 beta_clear_tool_uses_20250919_edit_param.py"),
    _entry("codex_compaction", CodexCompactionPolicy, CodexCompaction,
           "openai/codex@0100b103 codex-rs/core/src/compact.rs; utils/string/src/truncate.rs@b24d7f3c"),
    _entry("letta_sliding_window", LettaSlidingWindowPolicy, LettaSlidingWindow,
           "letta-ai/letta@63d3146f letta/services/summarizer/summarizer_sliding_window.py"),
    _entry("swe_agent_masking", SweAgentMaskingPolicy, SweAgentMasking,
           "SWE-agent/SWE-agent@3ea751c0 sweagent/agent/history_processors.py LastNObservations (n = 10)"),
)}


def names() -> list[str]:
    """The registered policy names."""
    return list(POLICIES)


def mechanism(name: str, policy: Any = None, *, summarizer: Summarizer | None = None,
              **fields: Any) -> PeerMechanism:
    """The mechanism of policy ``name``: with ``policy``, or the defaults changed by ``fields``.

    An unknown name or field is a ``ValueError`` naming the valid ones.
    """
    if name not in POLICIES:
        raise ValueError(f"unknown peer policy {name!r}; known: {', '.join(POLICIES)}")
    entry = POLICIES[name]
    if policy is None:
        policy = entry.policy_class.from_dict(fields)
    elif fields:
        raise ValueError("pass either a policy or field overrides, not both")
    return entry.factory(policy, summarizer=summarizer)


__all__ = [
    "POLICIES",
    "Outcome",
    "PeerMechanism",
    "PolicyEntry",
    "Record",
    "Summarizer",
    "count_tokens_approximately",
    "mechanism",
    "names",
]
