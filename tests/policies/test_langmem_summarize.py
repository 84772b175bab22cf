"""LangMem ``summarize_messages``: our core against LangMem's own, over growing seeded conversations.

Each seed grows one conversation in three steps and carries the running summary from step to
step on both sides, so the "extend the summary" path and the boundary are compared too. The
summariser is a scripted reply that also records what it was shown.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentlab.events import Message
from agentlab.policies._base import count_tokens_approximately
from agentlab.policies.langmem_summarize import FINAL_SUMMARY, RunningSummary, finish, plan
from tests.policies.conversations import conversation
from tests.policies.lc_convert import norm_langchain, norm_ours, to_langchain
from tests.policies.peers import require

langmem = require("langmem.short_term", "langmem")
runnables = require("langchain_core.runnables", "langchain-core")
lc_messages = require("langchain_core.messages", "langchain-core")

pytestmark = pytest.mark.peers
SEEDS = range(250)


def grown(seed: int) -> list[Message]:
    messages = conversation(seed, max_rounds=5) + conversation(seed + 50_000, max_rounds=5)
    if seed % 2 == 0:
        messages = [Message.system("you are a careful agent " * random.Random(seed).randint(1, 30)), *messages]
    return messages


@pytest.mark.parametrize("seed", SEEDS)
def test_same_summary_boundary_and_messages_as_langmem(seed: int) -> None:
    rng = random.Random(seed * 31 + 7)
    full = grown(seed)
    steps = sorted({rng.randint(2, len(full)) for _ in range(3)} | {len(full)})
    ours_running: RunningSummary | None = None
    theirs_running: Any = None
    calls = 0
    for step, end in enumerate(steps):
        messages = full[:end]
        ids = [f"m{i}" for i in range(len(messages))]
        total = count_tokens_approximately(messages)
        max_tokens = max(300, int(total * rng.choice((0.3, 0.6, 0.9, 1.2))))
        before = rng.choice((None, max(1, max_tokens // 3), max_tokens * 2))
        summary_tokens = rng.choice((64, 256 if max_tokens > 256 else 64))
        reply = f"summary {step} of seed {seed}"
        seen: list[Any] = []

        def model(msgs: Any, reply: str = reply, seen: list[Any] = seen) -> Any:
            seen.append(list(msgs.to_messages() if hasattr(msgs, "to_messages") else msgs))
            return lc_messages.AIMessage(content=reply)

        result = langmem.summarize_messages(
            to_langchain(messages, ids=True), running_summary=theirs_running, model=runnables.RunnableLambda(model),
            max_tokens=max_tokens, max_tokens_before_summary=before, max_summary_tokens=summary_tokens)
        scan, todo = plan(messages, ids, ours_running, max_tokens=max_tokens, max_tokens_before_summary=before,
                          max_summary_tokens=summary_tokens)
        if todo is None:
            assert seen == []
        else:
            calls += 1
            assert len(seen) == 1
            assert [norm_ours(m) for m in todo.summarizer_input] == [norm_langchain(m) for m in seen[0]]
        outcome, ours_running = finish(messages, ids, scan, todo, ours_running, reply if todo else None)
        theirs_running = result.running_summary
        assert [norm_ours(m) for m in outcome.messages] == [norm_langchain(m) for m in result.messages]
        if theirs_running is None:
            assert ours_running is None
        else:
            assert ours_running is not None
            assert (ours_running.summary, set(ours_running.summarized_ids), ours_running.last_summarized_id) == (
                theirs_running.summary, theirs_running.summarized_message_ids, theirs_running.last_summarized_message_id)


def test_the_seeds_reach_every_branch() -> None:
    first = extended = 0
    for seed in SEEDS:
        full = grown(seed)
        ids = [f"m{i}" for i in range(len(full))]
        total = count_tokens_approximately(full)
        scan, todo = plan(full, ids, None, max_tokens=max(300, total // 2))
        first += todo is not None
        running = RunningSummary("s", frozenset(ids[:2]), ids[1])
        scan, todo = plan(full, ids, running, max_tokens=max(300, total // 2))
        extended += todo is not None and todo.summarizer_input[-1].content.startswith("This is summary")
        assert FINAL_SUMMARY.startswith("Summary of the conversation so far")
    assert first > 100 and extended > 100
