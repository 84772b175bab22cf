"""The branch-visibility rule against Google ADK's own ``_is_event_belongs_to_branch``.

agentlab's filter keys are ``/``-separated, ADK's event ``branch`` ``.``-separated; ``None`` /
``""`` is the root in both. The source read is cited in :mod:`agentlab.runtime.composition`.
"""

from __future__ import annotations

import itertools

import pytest

from agentlab.core import branch_key, in_filter
from tests.policies.peers import require

adk_contents = require("google.adk.flows.llm_flows.contents", "google-adk")
adk_events = require("google.adk.events", "google-adk")
genai_types = require("google.genai.types", "google-adk")

pytestmark = pytest.mark.peers

#: Hand-made keys: the root, two siblings, nested branches, and names that share a string prefix.
KEYS = ["", "a", "b", "a/x", "a/y", "a/x/deep", "ab", "a/xy", "b/x", "a/x/deep/er"]


def adk_event(key: str):
    return adk_events.Event(author="agent", branch=key.replace("/", ".") or None,
                            content=genai_types.Content(role="model", parts=[genai_types.Part(text="t")]))


def adk_sees(view: str, event_key: str) -> bool:
    return bool(adk_contents._is_event_belongs_to_branch(view.replace("/", ".") or None, adk_event(event_key)))


@pytest.mark.parametrize(("view", "event_key"), list(itertools.product(KEYS, KEYS)))
def test_visibility_agrees_with_adk(view, event_key):
    assert in_filter(event_key, view) == adk_sees(view, event_key)


def test_the_cases_that_matter_are_among_them():
    # a branch sees its ancestors and itself, never a sibling, a descendant or a same-prefix name
    assert adk_sees("a/x", "a") and in_filter("a", "a/x")
    assert not adk_sees("a/x", "a/y") and not in_filter("a/y", "a/x")
    assert not adk_sees("a", "a/x") and not in_filter("a/x", "a")
    assert not adk_sees("a/xy", "a/x") and not in_filter("a/x", "a/xy")
    # the root view sees every branch
    assert adk_sees("", "a/x/deep") and in_filter("a/x/deep", "")
    assert branch_key("a", "x") == "a/x" and branch_key("", "x") == "x"
