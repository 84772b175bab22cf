"""inspect_ai ``CompactionEdit`` / ``CompactionTrim`` / ``CompactionSummary``: our cores against inspect's own.

Each strategy's ``compact(model, messages, tools)`` runs on inspect's ``mockllm/model`` (the
summary strategy's ``generate`` is replaced by a scripted reply that also records its input).
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from agentlab.events import Message, ToolCall
from agentlab.policies import _inspect, inspect_summary
from agentlab.policies.inspect_edit import TOOL_RESULT_REMOVED, InspectEditPolicy, compaction_edit
from agentlab.policies.inspect_summary import SUMMARY_TEMPLATE, InspectSummaryPolicy, finish, plan
from agentlab.policies.inspect_trim import InspectTrimPolicy, compaction_trim
from tests.policies.conversations import TOOLS, conversation
from tests.policies.peers import require

inspect_model = require("inspect_ai.model", "inspect-ai")
edit_mod = require("inspect_ai.model._compaction.edit", "inspect-ai")
trim_mod = require("inspect_ai.model._compaction.trim", "inspect-ai")
summary_mod = require("inspect_ai.model._compaction.summary", "inspect-ai")
compaction_mod = require("inspect_ai.model._compaction._compaction", "inspect-ai")
inspect_tool = require("inspect_ai.tool", "inspect-ai")

pytestmark = pytest.mark.peers
SEEDS = range(250)
PEER_TOOLS = (*TOOLS, "tool_search", "memory")


def to_inspect(messages: list[Message]) -> list[Any]:
    out: list[Any] = []
    for m in messages:
        if m.role == "system":
            out.append(inspect_model.ChatMessageSystem(content=m.content))
        elif m.role == "user":
            # inspect marks its summary message in metadata; ours is known by its opening line
            out.append(inspect_model.ChatMessageUser(content=m.content,
                                                     metadata={"summary": True} if _inspect.is_summary(m) else None))
        elif m.role == "assistant":
            calls = [inspect_tool.ToolCall(id=c.id, function=c.name, arguments=json.loads(c.arguments))
                     for c in m.tool_calls]
            out.append(inspect_model.ChatMessageAssistant(content=m.content, tool_calls=calls or None))
        else:
            out.append(inspect_model.ChatMessageTool(content=m.content, tool_call_id=m.tool_call_id, function=m.name))
    return out


def norm_ours(m: Message) -> tuple[Any, ...]:
    calls = tuple((c.id, c.name, json.dumps(json.loads(c.arguments), sort_keys=True)) for c in m.tool_calls)
    return (m.role, m.content, calls, m.tool_call_id if m.role == "tool" else None, m.name if m.role == "tool" else None)


def norm_inspect(m: Any) -> tuple[Any, ...]:
    calls = tuple((c.id, c.function, json.dumps(c.arguments, sort_keys=True)) for c in (getattr(m, "tool_calls", None) or []))
    return (m.role, m.text, calls, m.tool_call_id if m.role == "tool" else None, m.function if m.role == "tool" else None)


def seeded(seed: int) -> list[Message]:
    """A conversation with a system message, memory calls and tool_search; sometimes a summary in it."""
    rng = random.Random(seed)
    messages = conversation(seed, tools=PEER_TOOLS, end_with_assistant=0.3)
    messages = [Message(role=m.role, content=m.content, name=m.name, tool_call_id=m.tool_call_id,
                        tool_calls=tuple(ToolCall(c.id, c.name, json.dumps({"command": "create", "file_text": "notes"}))
                                         if c.name == "memory" and rng.random() < 0.7 else c for c in m.tool_calls))
                for m in messages]
    if rng.random() < 0.7:
        messages = [Message.system("you are a helpful agent"), *messages]
    if rng.random() < 0.3 and len(messages) > 4:
        at = rng.randrange(2, len(messages))
        while at < len(messages) and messages[at].role == "tool":
            at += 1
        messages.insert(at, Message.user(SUMMARY_TEMPLATE.format(summary="an earlier summary")))
    return messages


MODEL = None


def model() -> Any:
    global MODEL
    if MODEL is None:
        MODEL = inspect_model.get_model("mockllm/model")
    return MODEL


@pytest.mark.parametrize("seed", SEEDS)
def test_edit_matches_inspect(seed: int) -> None:
    rng = random.Random(seed * 3 + 11)
    policy = InspectEditPolicy(keep_tool_uses=rng.choice((0, 1, 3, 3, 6)), keep_tool_inputs=rng.random() < 0.6,
                               exclude_tools=rng.choice(((), (), ("search",))), memory=rng.random() < 0.8)
    messages = seeded(seed)
    strategy = edit_mod.CompactionEdit(keep_tool_uses=policy.keep_tool_uses, keep_tool_inputs=policy.keep_tool_inputs,
                                       exclude_tools=list(policy.exclude_tools) or None, memory=policy.memory)
    theirs, extra = asyncio.run(strategy.compact(model(), to_inspect(messages), []))
    ours = compaction_edit(messages, policy)
    assert extra is None
    assert [norm_ours(m) for m in ours.messages] == [norm_inspect(m) for m in theirs]
    record = ours.record(messages)
    assert all(ours.messages[j].content == TOOL_RESULT_REMOVED for j, s in enumerate(ours.sources)
               if s in record.replaced and messages[s].role == "tool")


@pytest.mark.parametrize("seed", SEEDS)
def test_trim_matches_inspect(seed: int) -> None:
    rng = random.Random(seed * 5 + 2)
    policy = InspectTrimPolicy(preserve=rng.choice((0.0, 0.3, 0.5, 0.8, 0.8, 1.0)), memory=rng.random() < 0.8)
    messages = seeded(seed)
    strategy = trim_mod.CompactionTrim(preserve=policy.preserve, memory=policy.memory)
    theirs, _ = asyncio.run(strategy.compact(model(), to_inspect(messages), []))
    ours = compaction_trim(messages, policy)
    assert [norm_ours(m) for m in ours.messages] == [norm_inspect(m) for m in theirs]


REPLIES = ("plain summary", "<analysis>thinking</analysis>\n<summary>the summary</summary>",
           "<summary>early</summary><analysis>late</analysis>")


@pytest.mark.parametrize("seed", SEEDS)
def test_summary_matches_inspect(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    async def unchanged(model: Any, messages: list[Any]) -> list[Any]:
        return messages

    # Not reproduced (a documented departure), and it would count tokens with a tokenizer that
    # downloads its table: the summariser input goes through as it is on both sides.
    monkeypatch.setattr(summary_mod, "_fit_summarization_input", unchanged)
    # The memory addendum is prose we paraphrase; both sides get inspect's here.
    monkeypatch.setattr(inspect_summary, "MEMORY_ADDENDUM", summary_mod.CompactionSummary.MEMORY_SUMMARY_ADDENDUM)
    rng = random.Random(seed * 17 + 3)
    reply = rng.choice(REPLIES)
    # Our prompt is a paraphrase; the differential run gives both sides the same prompt text.
    prompt = rng.choice((summary_mod.CompactionSummary.DEFAULT_SUMMARY_PROMPT, "Summarise. {addendums}"))
    policy = InspectSummaryPolicy(instructions=rng.choice((None, "keep file names")), prompt=prompt,
                                  memory=rng.random() < 0.8)
    messages = seeded(seed)
    seen: list[Any] = []

    async def generate(input: list[Any], *args: Any, **kwargs: Any) -> Any:
        seen.append(list(input))
        return inspect_model.ModelOutput.from_content(model="mockllm/model", content=reply)

    target = inspect_model.get_model("mockllm/model")
    target.generate = generate  # type: ignore[method-assign]
    strategy = summary_mod.CompactionSummary(instructions=policy.instructions, prompt=policy.prompt,
                                             memory=policy.memory)
    theirs, summary = asyncio.run(strategy.compact(target, to_inspect(messages), []))
    todo = plan(messages, policy)
    ours = finish(messages, todo, reply, policy)
    assert len(seen) == 1
    assert [norm_ours(m) for m in todo.summarizer_input] == [norm_inspect(m) for m in seen[0]]
    assert [norm_ours(m) for m in ours.messages] == [norm_inspect(m) for m in theirs]
    assert ours.messages[-1].content == summary.text


@pytest.mark.parametrize("threshold", [0.9, 0.5, 1.0, 2, 50_000, 50_000.0, 1.5])
def test_threshold_resolution_matches_inspect(threshold: float) -> None:
    class Known:
        pass

    for window in (0, 8192, 200_000):
        ours = _inspect.resolve_threshold(threshold, window)
        if isinstance(threshold, int) or threshold > 1.0:
            assert ours == compaction_mod._resolve_threshold(model(), threshold)
        else:
            assert ours == int(threshold * (window or compaction_mod.DEFAULT_CONTEXT_WINDOW))
    assert compaction_mod.DEFAULT_CONTEXT_WINDOW == _inspect.DEFAULT_CONTEXT_WINDOW
    assert Known


def test_the_seeds_reach_every_branch() -> None:
    changed_edit = deleted = trimmed = summaries = 0
    for seed in SEEDS:
        messages = seeded(seed)
        edit = compaction_edit(messages, InspectEditPolicy(keep_tool_inputs=seed % 2 == 0))
        record = edit.record(messages)
        changed_edit += bool(record.replaced)
        deleted += bool(record.removed) and seed % 2 == 1
        trimmed += bool(compaction_trim(messages, InspectTrimPolicy()).record(messages).removed)
        summaries += any(_inspect.is_summary(m) for m in messages)
    assert changed_edit > 80 and deleted > 40 and trimmed > 80 and summaries > 30
