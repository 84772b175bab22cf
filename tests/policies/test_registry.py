"""The peer-policy registry: names, factories, typed policies; and agentlab never imports a peer."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from agentlab.policies import POLICIES, PeerMechanism, mechanism, names
from agentlab.policies._base import PEER_SUMMARY
from agentlab.policy import FieldError, PolicyJSON
from agentlab.projection import COMPACT, CURRENT_INPUT

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
    assert names() == list(POLICIES) and len(POLICIES) == 11
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
