"""Other systems' context policies, re-implemented as agentlab context mechanisms ("peer policies").

Each module reproduces one peer's policy from its source (cited in the module docstring, with
every departure listed): a frozen policy dataclass with the source's defaults, a pure core that
``tests/policies/`` compares with the peer's own code, and a :class:`PeerMechanism` that runs the
core over the request's events — a projection: the ledger is never rewritten, and a tool call is
never shown without its result.

Each mechanism class states the peer's registry facts (``policy_name``, ``policy_class``,
``source``, ``needs_model``, ``trigger_fraction_field``); the registry is derived from the classes :data:`MECHANISMS` lists and
maps a name to its policy class and mechanism factory, for the benchmark arms::

    from agentlab.policies import POLICIES, mechanism
    entry = POLICIES["langchain_clear_tool_uses"]
    agent = LLMAgent("a", model, mechanisms=[mechanism("langchain_clear_tool_uses", keep=2)])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentlab.policies._base import Outcome, PeerMechanism, Record, Summarizer, count_tokens_approximately
from agentlab.policies.adk_compaction import AdkCompaction
from agentlab.policies.anthropic_clear_tool_uses import AnthropicClearToolUses
from agentlab.policies.codex_compaction import CodexCompaction
from agentlab.policies.inspect_edit import InspectEdit
from agentlab.policies.inspect_summary import InspectSummary
from agentlab.policies.inspect_trim import InspectTrim
from agentlab.policies.langchain_clear_tool_uses import LangChainClearToolUses
from agentlab.policies.langchain_summarization import LangChainSummarization
from agentlab.policies.langmem_summarize import LangMemSummarize
from agentlab.policies.letta_sliding_window import LettaSlidingWindow
from agentlab.policies.swe_agent_masking import SweAgentMasking
from agentlab.policies.swe_agent_summary import SweAgentSummary


@dataclass(frozen=True)
class PolicyEntry:
    """One registered peer policy: its policy dataclass, its mechanism factory and its source."""

    name: str
    policy_class: type[Any]
    factory: Callable[..., PeerMechanism]
    source: str
    #: What the peer calls a model for (the benchmark arm's ``needs_model``); ``""``: none.
    needs_model: str = ""
    #: The policy field that puts the source's absolute token trigger at a share of the context
    #: window (a variant); ``""``: none.
    trigger_fraction_field: str = ""


def _entry(mechanism_class: type[PeerMechanism]) -> PolicyEntry:
    """The entry of one peer: the facts its mechanism class states (name, policy class, source, model
    use, fraction trigger).
    """
    return PolicyEntry(mechanism_class.policy_name, mechanism_class.policy_class, mechanism_class,
                       mechanism_class.source, mechanism_class.needs_model, mechanism_class.trigger_fraction_field)


#: The peers' mechanism classes, in the order docs/peers.md lists them: each states its own facts.
MECHANISMS: tuple[type[PeerMechanism], ...] = (
    LangChainClearToolUses, LangChainSummarization, InspectEdit, InspectTrim, InspectSummary, LangMemSummarize,
    AdkCompaction, AnthropicClearToolUses, CodexCompaction, LettaSlidingWindow, SweAgentMasking, SweAgentSummary,
)
#: name -> entry, derived from :data:`MECHANISMS`.
POLICIES: dict[str, PolicyEntry] = {e.name: e for e in map(_entry, MECHANISMS)}


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
    "MECHANISMS",
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
