"""Our messages to LangChain's and back to a comparable form (used by the LangChain/LangMem tests)."""

from __future__ import annotations

import json
from typing import Any

from agentlab.events import Message


def to_langchain(messages: list[Message], *, ids: bool = False) -> list[Any]:
    """LangChain messages equal to ours (``ids``: message ids ``m0``, ``m1`` … for LangMem)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for i, m in enumerate(messages):
        extra = {"id": f"m{i}"} if ids else {}
        if m.role == "user":
            out.append(HumanMessage(content=m.content, **extra))
        elif m.role == "system":
            out.append(SystemMessage(content=m.content, **extra))
        elif m.role == "assistant":
            calls = [{"name": c.name, "args": json.loads(c.arguments), "id": c.id} for c in m.tool_calls]
            out.append(AIMessage(content=m.content, tool_calls=calls, **extra))
        else:
            out.append(ToolMessage(content=m.content, tool_call_id=m.tool_call_id or "", name=m.name, **extra))
    return out


def norm_ours(m: Message) -> tuple[Any, ...]:
    """A message as a comparable tuple."""
    calls = tuple((c.id, c.name, json.dumps(json.loads(c.arguments or "{}"), sort_keys=True)) for c in m.tool_calls)
    return (m.role, m.content, calls, m.tool_call_id if m.role == "tool" else None,
            m.name if m.role == "tool" else None)


def norm_langchain(m: Any) -> tuple[Any, ...]:
    """A LangChain message as the same comparable tuple."""
    role = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}[m.type]
    calls = tuple((c["id"], c["name"], json.dumps(c["args"], sort_keys=True)) for c in getattr(m, "tool_calls", []) or [])
    return (role, m.content, calls, m.tool_call_id if role == "tool" else None, m.name if role == "tool" else None)
