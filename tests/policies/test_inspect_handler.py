"""inspect_ai's ``compaction()`` handler against our :class:`InspectMechanism`, over growing conversations.

At every model call of a seeded conversation (before each assistant message) both sides get the
history so far: inspect's handler (``compact_input``) with its incremental compacted view, and our
mechanism with its carried-over view. Both count tokens with agentlab's counter (inspect's
``count_tokens`` is replaced by it), so the threshold — just below and above the conversation's
size — fires at the same calls; the requests must be equal at every call.
"""

from __future__ import annotations

import asyncio
import json
import random
from types import SimpleNamespace
from typing import Any

import pytest

from agentlab.core.mechanism import RequestDraft
from agentlab.events import Event, Message, ToolCall
from agentlab.model import tokens
from agentlab.policies import inspect_summary
from agentlab.policies.inspect_edit import InspectEdit, InspectEditPolicy
from agentlab.policies.inspect_summary import InspectSummary, InspectSummaryPolicy
from agentlab.policies.inspect_trim import InspectTrim, InspectTrimPolicy
from tests.policies.peers import require
from tests.policies.test_inspect_compaction import norm_inspect, norm_ours, seeded, to_inspect

inspect_model = require("inspect_ai.model", "inspect-ai")
compaction_mod = require("inspect_ai.model._compaction._compaction", "inspect-ai")
edit_mod = require("inspect_ai.model._compaction.edit", "inspect-ai")
trim_mod = require("inspect_ai.model._compaction.trim", "inspect-ai")
summary_mod = require("inspect_ai.model._compaction.summary", "inspect-ai")

pytestmark = pytest.mark.peers
SEEDS = range(200)
REPLY = "<analysis>scratch</analysis>\n<summary>scripted summary</summary>"


def from_inspect(m: Any) -> Message:
    calls = tuple(ToolCall(c.id, c.function, json.dumps(c.arguments)) for c in (getattr(m, "tool_calls", None) or []))
    return Message(role=m.role, content=m.text, tool_calls=calls,
                   tool_call_id=m.tool_call_id if m.role == "tool" else None,
                   name=m.function if m.role == "tool" else None)


def inspect_target() -> Any:
    model = inspect_model.get_model("mockllm/model")

    async def count_tokens(messages: Any, *args: Any, **kwargs: Any) -> int:
        return tokens.count_messages([from_inspect(m) for m in messages])

    async def count_tool_tokens(tools: Any) -> int:
        return 0

    async def generate(input: Any, *args: Any, **kwargs: Any) -> Any:
        return inspect_model.ModelOutput.from_content(model="mockllm/model", content=REPLY)

    model.count_tokens = count_tokens  # type: ignore[method-assign]
    model.count_tool_tokens = count_tool_tokens  # type: ignore[method-assign]
    model.generate = generate  # type: ignore[method-assign]
    return model


def pick(seed: int) -> tuple[Any, Any, str]:
    rng = random.Random(seed * 41 + 3)
    kind = rng.choice(("edit", "trim", "summary"))
    if kind == "edit":
        policy: Any = InspectEditPolicy(keep_tool_uses=rng.choice((0, 1, 3)), keep_tool_inputs=rng.random() < 0.6)
        theirs = edit_mod.CompactionEdit(keep_tool_uses=policy.keep_tool_uses, keep_tool_inputs=policy.keep_tool_inputs)
        return InspectEdit(policy), theirs, kind
    if kind == "trim":
        policy = InspectTrimPolicy(preserve=rng.choice((0.3, 0.5, 0.8)))
        return InspectTrim(policy), trim_mod.CompactionTrim(preserve=policy.preserve), kind
    prompt = summary_mod.CompactionSummary.DEFAULT_SUMMARY_PROMPT
    policy = InspectSummaryPolicy(prompt=prompt)

    async def summarizer(messages: list[Message]) -> str:
        return REPLY

    return InspectSummary(policy, summarizer=summarizer), summary_mod.CompactionSummary(prompt=prompt), kind


@pytest.mark.parametrize("seed", SEEDS)
def test_the_handler_and_our_mechanism_send_the_same_requests(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    async def unchanged(model: Any, messages: list[Any]) -> list[Any]:
        return messages

    monkeypatch.setattr(summary_mod, "_fit_summarization_input", unchanged)
    monkeypatch.setattr(inspect_summary, "MEMORY_ADDENDUM", summary_mod.CompactionSummary.MEMORY_SUMMARY_ADDENDUM)
    messages = [m for m in seeded(seed) if inspect_summary.SUMMARY_TEMPLATE[:20] not in m.content]
    system = [m for m in messages if m.role == "system"]
    body = [m for m in messages if m.role != "system"]
    ours, strategy, kind = pick(seed)
    full = tokens.count_messages(messages)
    threshold = max(60, int(full * random.Random(seed).choice((0.3, 0.6, 0.9, 1.1))))
    object.__setattr__(ours.policy, "threshold", threshold)
    strategy.threshold = threshold
    target = inspect_target()
    history = to_inspect(system + body)
    first_user = next((i for i, m in enumerate(history) if m.role == "user"), 0)
    handler = compaction_mod.compaction(strategy, prefix=history[:first_user + 1], model=target)
    events = [Event(author="user" if m.role == "user" else "a", choices=[m], id=f"ev{i}") for i, m in enumerate(body)]
    inv = SimpleNamespace(session=SimpleNamespace(id="s"), filter_key="", context_window=0, id="inv", request_id="inv")
    offset = len(system)
    for i, m in enumerate(body):
        if m.role != "assistant":
            continue
        shown = history[:offset + i] + [x for x in history[len(system) + len(body):]]
        try:
            theirs, extra = asyncio.run(handler.compact_input(shown))
        except RuntimeError as exc:
            assert "Compaction insufficient" in str(exc)
            draft = RequestDraft(system_parts=[s.content for s in system], events=list(events[:i]))
            asyncio.run(ours.project_draft(inv, draft))
            assert any(s.get("insufficient") for s in draft.stats)
            return
        if extra is not None:
            history.append(extra)
        draft = RequestDraft(system_parts=[s.content for s in system], events=list(events[:i]))
        asyncio.run(ours.project_draft(inv, draft))
        ours_messages = draft.messages()
        assert [norm_ours(x) for x in ours_messages] == [norm_inspect(x) for x in theirs], (kind, i)


def test_the_thresholds_fire_on_many_seeds_and_not_on_others() -> None:
    fired = quiet = 0
    for seed in SEEDS:
        messages = [m for m in seeded(seed) if inspect_summary.SUMMARY_TEMPLATE[:20] not in m.content]
        system = [m.content for m in messages if m.role == "system"]
        body = [m for m in messages if m.role != "system"]
        ours, _, _ = pick(seed)
        threshold = max(60, int(tokens.count_messages(messages) * random.Random(seed).choice((0.3, 0.6, 0.9, 1.1))))
        object.__setattr__(ours.policy, "threshold", threshold)
        draft = RequestDraft(system_parts=system, events=[Event(author="a", choices=[m], id=f"e{i}")
                                                          for i, m in enumerate(body)])
        inv = SimpleNamespace(session=SimpleNamespace(id="s"), filter_key="", context_window=0, id="i", request_id="i")
        asyncio.run(ours.project_draft(inv, draft))
        acted = any(s.get("kind") == "peer_policy" for s in draft.stats)
        fired += acted
        quiet += not acted
    assert fired > 50 and quiet > 30
