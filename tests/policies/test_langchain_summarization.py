"""LangChain ``SummarizationMiddleware``: our core against LangChain's ``before_model`` on seeded conversations.

The summariser is a scripted reply on both sides (LangChain's ``summarizer=`` callable); the
messages it is handed are compared too.
"""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

import pytest

from agentlab.core.mechanism import RequestDraft
from agentlab.events import Event, Message
from agentlab.policies.langchain_summarization import (
    SUMMARY_PREFIX,
    LangChainSummarization,
    LangChainSummarizationPolicy,
    finish,
    fixed_summary,
    plan,
)
from tests.policies.conversations import conversation
from tests.policies.lc_convert import norm_langchain, norm_ours, to_langchain
from tests.policies.peers import require

summarization = require("langchain.agents.middleware.summarization", "langchain")
fake_models = require("langchain_core.language_models.fake_chat_models", "langchain-core")

pytestmark = pytest.mark.peers
SEEDS = range(300)
REPLY = "  the scripted summary  "


def long_conversation(seed: int) -> list[Message]:
    """Two conversations back to back, with an earlier summary in front for a third of the seeds."""
    messages = conversation(seed, max_rounds=8) + conversation(seed + 10_000, max_rounds=8)
    if seed % 3 == 0:
        messages = [Message.user(SUMMARY_PREFIX + "an earlier summary"), *messages]
    return messages


def policy_for(seed: int, messages: list[Message]) -> LangChainSummarizationPolicy:
    rng = random.Random(seed * 13 + 5)
    probe = LangChainSummarizationPolicy()
    total = probe.count(messages)
    kind = rng.choice(("tokens", "messages", "fraction"))
    keep_kind = rng.choice(("messages", "messages", "tokens", "fraction"))
    keep_value: float = {"messages": rng.choice((1, 3, 5, 20)), "tokens": rng.choice((50, 400, 3000)),
                         "fraction": rng.choice((0.1, 0.3))}[keep_kind]
    return LangChainSummarizationPolicy(
        trigger_tokens=max(1, total + rng.choice((-1, 0, 1, 40))) if kind == "tokens" else None,
        trigger_messages=max(1, len(messages) + rng.choice((-1, 0, 1))) if kind == "messages" else None,
        trigger_fraction=rng.choice((0.5, 0.9)) if kind == "fraction" else None,
        keep_kind=keep_kind, keep_value=keep_value,
        trim_tokens_to_summarize=rng.choice((None, 4000, 300, 40)),
    )


def theirs(messages: list[Message], policy: LangChainSummarizationPolicy, window: int) -> tuple[Any, list[Any]]:
    seen: list[Any] = []

    def summarizer(msgs: list[Any]) -> str:
        seen.append(list(msgs))
        return REPLY

    trigger: Any = [clause for clause in (("tokens", policy.trigger_tokens), ("messages", policy.trigger_messages),
                                          ("fraction", policy.trigger_fraction)) if clause[1] is not None]
    keep = (policy.keep_kind, int(policy.keep_value) if policy.keep_kind != "fraction" else policy.keep_value)
    model = fake_models.FakeListChatModel(responses=["unused"], profile={"max_input_tokens": window})
    middleware = summarization.SummarizationMiddleware(
        model, trigger=trigger, keep=keep, trim_tokens_to_summarize=policy.trim_tokens_to_summarize,
        summarizer=summarizer)
    return middleware.before_model({"messages": to_langchain(messages)}, None), seen


@pytest.mark.parametrize("seed", SEEDS)
def test_same_summary_and_kept_messages_as_langchain(seed: int) -> None:
    messages = long_conversation(seed)
    policy = policy_for(seed, messages)
    window = policy.count(messages) * 2 + random.Random(seed).choice((-3, 0, 3))
    update, seen = theirs(messages, policy, window)
    todo = plan(messages, policy, max_input_tokens=window)
    if update is None:
        assert todo is None
        return
    assert todo is not None
    fixed = fixed_summary(todo)
    if fixed is None:
        assert len(seen) == 1
        assert [norm_ours(m) for m in todo.summarizer_input] == [norm_langchain(m) for m in seen[0]]
    else:
        assert seen == []
    ours = finish(messages, todo, fixed if fixed is not None else REPLY)
    new = update["messages"]
    assert new[0].type == "remove"
    assert [norm_ours(m) for m in ours.messages] == [norm_langchain(m) for m in new[1:]]
    assert ours.messages[0].content == new[1].content


def test_the_seeds_reach_every_branch() -> None:
    fired = quiet = trimmed = 0
    for seed in SEEDS:
        messages = long_conversation(seed)
        policy = policy_for(seed, messages)
        todo = plan(messages, policy, max_input_tokens=policy.count(messages) * 2)
        fired += todo is not None
        quiet += todo is None
        trimmed += todo is not None and len(todo.summarizer_input) < todo.cutoff
    assert fired > 80 and quiet > 50 and trimmed > 20


def growing(seed: int) -> int:
    """Replays one growing conversation on both sides, asserting equal requests; the number of summaries."""
    rng = random.Random(seed * 29 + 1)
    body = conversation(seed, max_rounds=8) + conversation(seed + 20_000, max_rounds=8)
    policy = LangChainSummarizationPolicy(trigger_messages=rng.choice((6, 10, 16)), keep_value=rng.choice((2, 4, 6)),
                                          trim_tokens_to_summarize=None)
    replies = iter(f"summary {k}" for k in range(1000))

    def summarizer(msgs: list[Any]) -> str:
        return next(replies)

    middleware = summarization.SummarizationMiddleware(
        fake_models.FakeListChatModel(responses=["unused"]), trigger=("messages", policy.trigger_messages),
        keep=("messages", int(policy.keep_value)), trim_tokens_to_summarize=None, summarizer=summarizer)
    ours_replies = iter(f"summary {k}" for k in range(1000))

    async def our_summarizer(prompt: list[Message]) -> str:
        return next(ours_replies)

    ours = LangChainSummarization(policy, summarizer=our_summarizer)
    inv = SimpleNamespace(session=SimpleNamespace(id="s"), filter_key="", context_window=0, id="i", request_id="i")
    state: list[Any] = []
    events = [Event(author="a", choices=[m], id=f"e{i}") for i, m in enumerate(body)]
    summaries = 0
    for i, m in enumerate(body):
        if m.role == "assistant":  # a model call: LangChain's before_model, our projection
            update = middleware.before_model({"messages": state}, None)
            if update is not None:
                state = list(update["messages"][1:])
                summaries += 1
            draft = RequestDraft(events=list(events[:i]))
            asyncio.run(ours.project_draft(inv, draft))
            assert [norm_ours(x) for x in draft.messages()] == [norm_langchain(x) for x in state], i
        state.append(to_langchain([m])[0])
    return summaries


@pytest.mark.parametrize("seed", range(200))
def test_the_agent_state_langchain_rewrites_equals_our_carried_over_projection(seed: int) -> None:
    """At every model call of a growing conversation: LangChain's state (rewritten by each summary) and
    our mechanism's projection of the untouched ledger (the previous projection carried over) agree."""
    growing(seed)


def test_the_growing_conversations_are_summarised_more_than_once() -> None:
    counts = [growing(seed) for seed in range(0, 200, 4)]
    assert sum(c > 0 for c in counts) > 25 and sum(c > 1 for c in counts) > 10
