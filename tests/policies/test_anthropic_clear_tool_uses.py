"""Anthropic ``clear_tool_uses_20250919``: hand-worked examples from the documentation.

No differential test: the edit runs on Anthropic's servers (nothing to install and run offline).
Each example states the documented rule it checks.
"""

from __future__ import annotations

import json

from agentlab.events import Message, ToolCall
from agentlab.policies.anthropic_clear_tool_uses import (
    DEFAULT_KEEP,
    DEFAULT_TRIGGER_TOKENS,
    PLACEHOLDER,
    AnthropicClearToolUsesPolicy,
    clear_tool_uses,
)


def five_tool_uses(names: tuple[str, ...] = ("read",) * 5) -> list[Message]:
    out = [Message.user("do the task")]
    for i, name in enumerate(names):
        out.append(Message.assistant("", [ToolCall(f"c{i}", name, json.dumps({"path": f"f{i}"}))]))
        out.append(Message.tool(f"c{i}", name, f"contents of file {i} " * 50))
    return out


def results(messages: tuple[Message, ...] | list[Message]) -> list[str]:
    return [m.content for m in messages if m.role == "tool"]


def test_documented_defaults() -> None:
    p = AnthropicClearToolUsesPolicy()
    assert (p.trigger_type, p.trigger_value, p.keep, p.clear_at_least, p.exclude_tools, p.clear_tool_inputs) == (
        "input_tokens", 100_000, 3, None, (), False)
    assert (DEFAULT_TRIGGER_TOKENS, DEFAULT_KEEP) == (100_000, 3)


def test_under_the_trigger_nothing_changes() -> None:
    messages = five_tool_uses()
    out = clear_tool_uses(messages, AnthropicClearToolUsesPolicy(), input_tokens=100_000)  # not *over* it
    assert not out.fired and list(out.messages) == messages


def test_over_the_trigger_the_oldest_results_go_and_the_last_three_pairs_stay() -> None:
    messages = five_tool_uses()
    out = clear_tool_uses(messages, AnthropicClearToolUsesPolicy(), input_tokens=100_001)
    assert results(out.messages)[:2] == [PLACEHOLDER, PLACEHOLDER]
    assert results(out.messages)[2:] == results(messages)[2:]
    # the calls are all still there, with their inputs: only results are cleared by default
    assert [m.tool_calls for m in out.messages] == [m.tool_calls for m in messages]
    assert out.record(messages).removed == ()


def test_a_tool_uses_trigger_counts_uses() -> None:
    messages = five_tool_uses()
    assert not clear_tool_uses(messages, AnthropicClearToolUsesPolicy(trigger_type="tool_uses", trigger_value=5)).fired
    out = clear_tool_uses(messages, AnthropicClearToolUsesPolicy(trigger_type="tool_uses", trigger_value=4, keep=1))
    assert results(out.messages) == [PLACEHOLDER] * 4 + results(messages)[4:]


def test_excluded_tools_are_never_cleared() -> None:
    messages = five_tool_uses(("read", "memory", "read", "read", "read"))
    out = clear_tool_uses(messages, AnthropicClearToolUsesPolicy(exclude_tools=("memory",)), input_tokens=200_000)
    assert results(out.messages) == [PLACEHOLDER, results(messages)[1], *results(messages)[2:]]


def test_clear_tool_inputs_clears_the_calls_too_and_the_list_form_names_tools() -> None:
    messages = five_tool_uses(("read", "write", "read", "read", "read"))
    out = clear_tool_uses(messages, AnthropicClearToolUsesPolicy(clear_tool_inputs=True), input_tokens=200_000)
    assert [c.arguments for m in out.messages for c in m.tool_calls][:3] == ["{}", "{}", '{"path": "f2"}']
    only_write = clear_tool_uses(messages, AnthropicClearToolUsesPolicy(clear_tool_inputs_for=("write",)),
                                 input_tokens=200_000)
    assert [c.arguments for m in only_write.messages for c in m.tool_calls][:2] == ['{"path": "f0"}', "{}"]


def test_clear_at_least_is_all_or_nothing() -> None:
    messages = five_tool_uses()
    policy = AnthropicClearToolUsesPolicy(clear_at_least=10**6)
    out = clear_tool_uses(messages, policy, input_tokens=200_000)
    assert out.fired and list(out.messages) == messages  # cannot remove a million tokens: no edit
    enough = clear_tool_uses(messages, AnthropicClearToolUsesPolicy(clear_at_least=50), input_tokens=200_000)
    assert results(enough.messages)[:2] == [PLACEHOLDER, PLACEHOLDER]


def test_parallel_calls_count_as_separate_tool_uses() -> None:
    messages = [Message.user("go"),
                Message.assistant("", [ToolCall("a", "read", "{}"), ToolCall("b", "read", "{}")]),
                Message.tool("a", "read", "A" * 400), Message.tool("b", "read", "B" * 400),
                Message.assistant("", [ToolCall("c", "read", "{}")]), Message.tool("c", "read", "C" * 400)]
    out = clear_tool_uses(messages, AnthropicClearToolUsesPolicy(keep=2), input_tokens=200_000)
    assert results(out.messages) == [PLACEHOLDER, "B" * 400, "C" * 400]
