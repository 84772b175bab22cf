"""The recall and memory tools declare exactly what they declared before the shared helper (the call cache hashes it)."""

from __future__ import annotations

import hashlib
import json

import pytest

from agentlab.core import FunctionTool, ToolContext, check_arguments, function_declaration
from agentlab.memory.policies import MemoryPolicy
from agentlab.memory.tools import memory_tools
from agentlab.recall import RecallPolicy
from agentlab.recall.tools import recall_tools

#: sha256 of ``json.dumps(tool.declaration())`` at main d4e39b0, before the tools used the shared helper.
BEFORE = {
    ("default", "session_search"): "6dbeb6c504a271cc5bd9a08771b1da1b44d69b94de30d0de8c2a30fabb164e0e",
    ("default", "session_load"): "04c86e0c09cff79a675ff9d8131cf3adaa55d42a3320bd9db98e3d4442a41735",
    ("tuned", "session_search"): "750e839184514b3059284488a42c0fe72d4e9bf542885e51ae6435ff6b61c050",
    ("tuned", "session_load"): "ef40f885e68c6e294d810dbab3606ccafd3ba0ecd5e835d50d62677d1a5cc7be",
    ("default", "memory_search"): "2056b4fa83e9594d91ca62720166fd9d405557379dbe6cc0614366b4c3eb01d2",
    ("tuned", "memory_search"): "8df80111e43b778b7170a4744af6ec49f9adc43f6ce32e5abcf3ba60a445d009",
}


def _tools(variant: str) -> list[object]:
    if variant == "default":
        return [*recall_tools(RecallPolicy()), *memory_tools(MemoryPolicy())]
    return [*recall_tools(RecallPolicy(search_top_k=3, max_search_top_k=7, window_before=2, content_limit=4096,
                                       embedder="hash")),
            *memory_tools(MemoryPolicy(search_top_k=4, search_max_top_k=9))]


@pytest.mark.parametrize("variant", ["default", "tuned"])
def test_declarations_are_byte_identical_to_the_hand_written_ones(variant: str) -> None:
    tools = _tools(variant)
    assert len(tools) == 3
    for tool in tools:
        digest = hashlib.sha256(json.dumps(tool.declaration()).encode()).hexdigest()  # type: ignore[attr-defined]
        assert digest == BEFORE[(variant, tool.name)], tool.name  # type: ignore[attr-defined]


def test_function_tool_and_the_helper_write_the_same_declaration() -> None:
    def lookup(topic: str, limit: int = 3) -> str:
        """Look a topic up.

        Args:
            topic: What to look up.
        """
        return topic

    made = FunctionTool(lookup)
    assert made.declaration() == function_declaration(
        "lookup", "Look a topic up.",
        {"topic": {"type": "string", "description": "What to look up."}, "limit": {"type": "integer"}}, ["topic"])


async def test_every_tool_refuses_unknown_and_missing_arguments_with_one_message() -> None:
    with pytest.raises(ValueError, match=r"unknown argument\(s\) for t: x, y \(allowed: a, b\)"):
        check_arguments("t", {"a": 1, "y": 2, "x": 3}, ("b", "a"))
    with pytest.raises(ValueError, match=r"missing required argument\(s\) for t: a"):
        check_arguments("t", {"b": 1}, ("a", "b"), ("a",))
    check_arguments("t", {"a": 1}, ("a", "b"), ("a",))
    ctx = ToolContext(None, "call", "x")  # type: ignore[arg-type]  # the check runs before the invocation is read
    search, load, memory = _tools("default")
    for tool, allowed in ((search, "min_score, query, scope, search_mode, top_k"),
                          (load, "after, before, content_limit, content_offset, event_id, session_id, tool_call_id"),
                          (memory, "kind, query, top_k")):
        with pytest.raises(ValueError) as raised:
            await tool.call({"bogus": 1}, ctx)  # type: ignore[attr-defined]  # unknown is checked first
        assert str(raised.value) == f"unknown argument(s) for {tool.name}: bogus (allowed: {allowed})"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="missing required argument"):
        await memory.call({}, ctx)  # type: ignore[attr-defined]
