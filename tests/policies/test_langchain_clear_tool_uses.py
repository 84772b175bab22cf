"""LangChain ``ClearToolUsesEdit``: our core against LangChain's own, on seeded conversations."""

from __future__ import annotations

import random

import pytest

from agentlab.policies._base import count_tokens_approximately
from agentlab.policies.langchain_clear_tool_uses import (
    PLACEHOLDER,
    LangChainClearToolUsesPolicy,
    clear_tool_uses,
)
from tests.policies.conversations import conversation
from tests.policies.lc_convert import norm_langchain, norm_ours, to_langchain
from tests.policies.peers import require

context_editing = require("langchain.agents.middleware.context_editing", "langchain")
lc_utils = require("langchain_core.messages.utils", "langchain-core")

pytestmark = pytest.mark.peers
SEEDS = range(300)


def test_placeholder_is_langchains() -> None:
    assert PLACEHOLDER == context_editing.DEFAULT_TOOL_PLACEHOLDER
    defaults = context_editing.ClearToolUsesEdit()
    ours = LangChainClearToolUsesPolicy()
    assert (ours.trigger, ours.clear_at_least, ours.keep, ours.clear_tool_inputs, tuple(ours.exclude_tools),
            ours.placeholder) == (defaults.trigger, defaults.clear_at_least, defaults.keep,
                                  defaults.clear_tool_inputs, tuple(defaults.exclude_tools), defaults.placeholder)


@pytest.mark.parametrize("seed", SEEDS)
def test_token_counter_equals_langchains(seed: int) -> None:
    messages = conversation(seed)
    assert count_tokens_approximately(messages) == lc_utils.count_tokens_approximately(to_langchain(messages))
    one = messages[random.Random(seed).randrange(len(messages))]
    assert count_tokens_approximately([one]) == lc_utils.count_tokens_approximately(to_langchain([one]))


def policies(seed: int, total: int) -> LangChainClearToolUsesPolicy:
    """Thresholds just below, at and above the conversation's count, and varied knobs."""
    rng = random.Random(seed * 7 + 1)
    return LangChainClearToolUsesPolicy(
        trigger=max(0, total + rng.choice((-50, -1, 0, 1, 50))),
        keep=rng.choice((0, 1, 3, 3, 5)),
        clear_at_least=rng.choice((0, 0, 0, 20, 300)),
        clear_tool_inputs=rng.random() < 0.3,
        exclude_tools=rng.choice(((), (), ("search",), ("run", "fetch"))),
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_same_kept_and_cleared_messages_as_langchain(seed: int) -> None:
    messages = conversation(seed)
    total = count_tokens_approximately(messages)
    policy = policies(seed, total)
    theirs = to_langchain(messages)
    context_editing.ClearToolUsesEdit(
        trigger=policy.trigger, clear_at_least=policy.clear_at_least, keep=policy.keep,
        clear_tool_inputs=policy.clear_tool_inputs, exclude_tools=policy.exclude_tools,
    ).apply(theirs, count_tokens=lc_utils.count_tokens_approximately)
    ours = clear_tool_uses(messages, policy)
    assert [norm_ours(m) for m in ours.messages] == [norm_langchain(m) for m in theirs]
    record = ours.record(messages)
    cleared_theirs = [i for i, m in enumerate(theirs)
                      if m.type == "tool" and m.response_metadata.get("context_editing", {}).get("cleared")]
    assert [i for i in record.replaced if messages[i].role == "tool"] == cleared_theirs
    assert record.removed == () and record.added == ()


def test_the_conversations_reach_every_branch() -> None:
    """The seeds above must exercise both sides of the trigger and actually clear something."""
    fired = cleared = untouched = 0
    for seed in SEEDS:
        messages = conversation(seed)
        outcome = clear_tool_uses(messages, policies(seed, count_tokens_approximately(messages)))
        fired += outcome.fired
        untouched += not outcome.fired
        cleared += bool(outcome.record(messages).replaced)
    assert fired > 50 and untouched > 50 and cleared > 30
