"""The peer-policy registry: names, factories, typed policies; and agentlab never imports a peer."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from agentlab.core.mechanism import COMPACT, CURRENT_INPUT
from agentlab.policies import POLICIES, PeerMechanism, mechanism, names
from agentlab.policies._base import PEER_SUMMARY
from agentlab.policy_json import FieldError, PolicyJSON

PEER_PACKAGES = ("langchain", "langchain_core", "langgraph", "langmem", "inspect_ai", "google", "letta", "anthropic")

BLOCKED = f"""
import importlib, importlib.abc, pkgutil, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {PEER_PACKAGES!r}:
            raise ImportError(f"{{name}} is blocked: a peer package")
        return None

sys.meta_path.insert(0, Block())
import agentlab.policies
for info in pkgutil.walk_packages(agentlab.policies.__path__, "agentlab.policies."):
    importlib.import_module(info.name)
print(len(agentlab.policies.POLICIES))
"""


def test_the_registry_lists_every_policy_with_a_typed_policy_and_a_mechanism() -> None:
    assert names() == list(POLICIES) and len(POLICIES) == 12
    for name, entry in POLICIES.items():
        assert entry.name == name and entry.source
        policy = entry.policy_class()
        assert isinstance(policy, PolicyJSON)
        assert entry.policy_class.from_dict(policy.to_dict()) == policy, name
        built = mechanism(name)
        assert isinstance(built, PeerMechanism) and built.policy == policy and built.policy_name == name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(policy, next(iter(policy.to_dict())), None)


def test_mechanism_takes_field_overrides_or_a_policy_and_refuses_unknowns() -> None:
    built = mechanism("langchain_clear_tool_uses", keep=1, exclude_tools=["a"])
    assert built.policy.keep == 1 and built.policy.exclude_tools == ("a",)
    with pytest.raises(ValueError, match="unknown peer policy 'nope'; known: langchain_clear_tool_uses"):
        mechanism("nope")
    with pytest.raises(FieldError, match="unknown field"):
        mechanism("inspect_edit", keep=3)
    with pytest.raises(ValueError, match="either a policy or field overrides"):
        mechanism("inspect_edit", POLICIES["inspect_edit"].policy_class(), keep_tool_uses=1)


def test_no_policy_module_imports_a_peer_package() -> None:
    done = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == len(POLICIES)


def test_every_peer_policy_runs_after_the_current_input_is_in_place() -> None:
    """A peer that summarises the current user input away (ADK, LangChain) must not be undone by the
    runtime's current-input step, which would put the input back in front of the summary."""
    for name in POLICIES:
        assert mechanism(name).stage.order > CURRENT_INPUT.order, name
    assert CURRENT_INPUT.order < PEER_SUMMARY.order < COMPACT.order


#: The registry as it was restated by hand, captured by running the code of commit d44d926 (before
#: the facts moved onto the mechanism classes): (name, policy class, mechanism class, source), in order.
REGISTRY_AT_D44D926 = [
    ("langchain_clear_tool_uses", "langchain_clear_tool_uses.LangChainClearToolUsesPolicy",
     "langchain_clear_tool_uses.LangChainClearToolUses", "langchain==1.5.2 agents/middleware/context_editing.py"),
    ("langchain_summarization", "langchain_summarization.LangChainSummarizationPolicy",
     "langchain_summarization.LangChainSummarization", "langchain==1.5.2 agents/middleware/summarization.py"),
    ("inspect_edit", "inspect_edit.InspectEditPolicy", "inspect_edit.InspectEdit",
     "inspect-ai==0.3.285 model/_compaction/edit.py"),
    ("inspect_trim", "inspect_trim.InspectTrimPolicy", "inspect_trim.InspectTrim",
     "inspect-ai==0.3.285 model/_compaction/trim.py"),
    ("inspect_summary", "inspect_summary.InspectSummaryPolicy", "inspect_summary.InspectSummary",
     "inspect-ai==0.3.285 model/_compaction/summary.py"),
    ("langmem_summarize", "langmem_summarize.LangMemSummarizePolicy", "langmem_summarize.LangMemSummarize",
     "langchain-ai/langmem@b5dbe4aa (0.0.30) short_term/summarization.py"),
    ("adk_compaction", "adk_compaction.AdkCompactionPolicy", "adk_compaction.AdkCompaction",
     "google-adk==2.13.0 apps/compaction.py (token threshold), flows/llm_flows/context/_compaction.py"),
    ("anthropic_clear_tool_uses", "anthropic_clear_tool_uses.AnthropicClearToolUsesPolicy",
     "anthropic_clear_tool_uses.AnthropicClearToolUses",
     "Anthropic context editing docs; anthropic-sdk-python@009b0353 beta_clear_tool_uses_20250919_edit_param.py"),
    ("codex_compaction", "codex_compaction.CodexCompactionPolicy", "codex_compaction.CodexCompaction",
     "openai/codex@0100b103 codex-rs/core/src/compact.rs; utils/string/src/truncate.rs@b24d7f3c"),
    ("letta_sliding_window", "letta_sliding_window.LettaSlidingWindowPolicy",
     "letta_sliding_window.LettaSlidingWindow",
     "letta-ai/letta@63d3146f letta/services/summarizer/summarizer_sliding_window.py"),
    ("swe_agent_masking", "swe_agent_masking.SweAgentMaskingPolicy", "swe_agent_masking.SweAgentMasking",
     "SWE-agent/SWE-agent@3ea751c0 sweagent/agent/history_processors.py LastNObservations (n = 10)"),
    # Added after d44d926: "The Complexity Trap"'s LLM summary.
    ("swe_agent_summary", "swe_agent_summary.SweAgentSummaryPolicy", "swe_agent_summary.SweAgentSummary",
     "JetBrains-Research/the-complexity-trap (fork @ adfaa1a1) sweagent/agent/history_processors.py "
     "SummarizeEveryNTurns (n = 21, keep_last_m_turns = 10)"),
]
#: ``agentlab.policies.arms.PEER_SUMMARISERS`` at d44d926, captured the same way.
SUMMARISERS_AT_D44D926 = {
    "langchain_summarization": "SummarizationMiddleware replaces old messages with a model-written summary",
    "inspect_summary": "CompactionSummary asks a model for the summary",
    "langmem_summarize": "summarize_messages keeps a model-written running summary",
    "adk_compaction": "ADK's token-threshold compaction summarises old events with a model",
    "codex_compaction": "Codex auto-compaction at 90 % of the window writes a handoff summary with a model",
    "letta_sliding_window": "Letta evicts the oldest messages into a model-written summary",
    "swe_agent_summary": "SummarizeEveryNTurns folds every 21 turns into a model-written checkpoint",  # added after
}
#: ``agentlab.bench.retention.questions.FRACTION_TRIGGERED_PEERS`` at d44d926 (then a literal), in order; each
#: was built with ``trigger_fraction=PEER_TRIGGER_FRACTION``.
FRACTION_TRIGGERED_AT_D44D926 = ("langchain_clear_tool_uses", "anthropic_clear_tool_uses")


def _qualname(cls: type) -> str:
    assert cls.__module__.startswith("agentlab.policies."), cls
    return f"{cls.__module__.removeprefix('agentlab.policies.')}.{cls.__qualname__}"


def test_the_registry_facts_are_the_ones_it_had_when_they_were_restated_by_hand() -> None:
    from agentlab.bench.retention import questions as retention
    from agentlab.policies import PolicyEntry, arms

    assert [(e.name, _qualname(e.policy_class), _qualname(e.factory), e.source) for e in POLICIES.values()] \
        == REGISTRY_AT_D44D926
    assert all(isinstance(e, PolicyEntry) for e in POLICIES.values())
    assert arms.PEER_SUMMARISERS == SUMMARISERS_AT_D44D926
    assert list(arms.PEER_SUMMARISERS) == list(SUMMARISERS_AT_D44D926)
    assert retention.FRACTION_TRIGGERED_PEERS == FRACTION_TRIGGERED_AT_D44D926
    assert {n: e.trigger_fraction_field for n, e in POLICIES.items() if e.trigger_fraction_field} \
        == dict.fromkeys(FRACTION_TRIGGERED_AT_D44D926, "trigger_fraction")
    settings = retention.retention_settings(None)
    for name in FRACTION_TRIGGERED_AT_D44D926:
        assert settings.section(name) == POLICIES[name].policy_class(trigger_fraction=retention.PEER_TRIGGER_FRACTION)
    for name, _, _, source in REGISTRY_AT_D44D926:
        # Every mechanism's default is its policy class's defaults, and the peer arms say the same as before.
        assert POLICIES[name].factory.default_policy() == POLICIES[name].policy_class(), name
        arm = arms.ARMS[name]
        assert (arm.role, arm.sections, arm.description, arm.needs_model) == \
            ("lossy", (name,), f"peer policy {name} ({source})", SUMMARISERS_AT_D44D926.get(name, "")), name


def test_every_peer_mechanism_class_is_registered_and_states_its_facts() -> None:
    import importlib
    import inspect
    import pkgutil

    import agentlab.policies
    from agentlab.policies import MECHANISMS

    found = set()
    for info in pkgutil.iter_modules(agentlab.policies.__path__, "agentlab.policies."):
        module = importlib.import_module(info.name)
        found |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                  if issubclass(c, PeerMechanism) and c is not PeerMechanism and c.__module__ == info.name
                  and "policy_name" in vars(c)}
    assert found == set(MECHANISMS) and len(MECHANISMS) == len(POLICIES)
    for cls in MECHANISMS:
        assert {"policy_class", "source"} <= set(vars(cls)) and cls.source, cls
