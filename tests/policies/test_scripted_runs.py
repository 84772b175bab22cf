"""Every registered peer policy through ``LLMAgent(..., mechanisms=[...])`` + ``Runner`` on a scripted model.

Three user turns with tool rounds and long results; each policy is set so that it acts. What
must hold for every one: the policy did act (the model was shown something it changed), the
session's ledger is exactly what the run appended (no placeholder, no summary in it), and every
request the model received shows each tool call with its result and no result without its call.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentlab.events import Message
from agentlab.model.base import ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.policies import POLICIES, mechanism
from agentlab.policies.codex_compaction import truncate_text
from agentlab.runtime import FunctionTool, LLMAgent, Runner
from agentlab.session.inmemory import InMemorySessionService

#: Settings that make each policy act within three short turns.
ACTING: dict[str, dict[str, Any]] = {
    "langchain_clear_tool_uses": {"trigger": 200, "keep": 1},
    "langchain_summarization": {"trigger_messages": 8, "keep_value": 3},
    "inspect_edit": {"threshold": 600, "keep_tool_uses": 1},
    "inspect_trim": {"threshold": 900, "preserve": 0.5},
    "inspect_summary": {"threshold": 900},
    "codex_compaction": {"auto_compact_token_limit": 450, "truncation_limit": 60},
    "adk_compaction": {"token_threshold": 500, "event_retention_size": 3},
    "letta_sliding_window": {"trigger_fraction": 0.1},
    "anthropic_clear_tool_uses": {"trigger_value": 400, "keep": 1},
    "langmem_summarize": {"max_tokens": 1200, "max_tokens_before_summary": 300, "max_summary_tokens": 64},
    "swe_agent_masking": {"n": 2},
    "swe_agent_summary": {"n": 2, "keep_last_m_turns": 1},
}

SUMMARY_REPLY = "SCRIPTED SUMMARY of the work so far"


def lookup(topic: str) -> str:
    """Look a topic up (a long answer)."""
    return f"facts about {topic}: " + " ".join(f"item{i}" for i in range(150))


def script() -> list[Any]:
    replies: list[Any] = []
    for turn in range(3):
        replies.append(ScriptedModel.tool_call("lookup", {"topic": f"t{turn}a"}, id=f"c{turn}a"))
        replies.append(ScriptedModel.tool_call("lookup", {"topic": f"t{turn}b"}, id=f"c{turn}b"))
        replies.append(f"answer {turn}")
    return replies


def assert_paired(request: ModelRequest) -> None:
    called = [c.id for m in request.messages if m.role == "assistant" for c in m.tool_calls]
    answered = [m.tool_call_id for m in request.messages if m.role == "tool"]
    assert sorted(called) == sorted(answered), (called, answered)
    for i, m in enumerate(request.messages):
        if m.role == "tool":
            assert any(c.id == m.tool_call_id for p in request.messages[:i] if p.role == "assistant"
                       for c in p.tool_calls)


def ledger_before(ledger: list[Message], request: ModelRequest) -> list[Message]:
    """The ledger messages that existed when ``request`` was built (up to its last message)."""
    last = request.messages[-1]
    ends = [i for i, m in enumerate(ledger) if (m.role, m.content, m.tool_call_id) ==
            (last.role, last.content, last.tool_call_id)]
    return ledger[:ends[0] + 1] if ends else ledger


def test_every_registered_policy_has_acting_settings() -> None:
    assert set(ACTING) <= set(POLICIES)
    missing = set(POLICIES) - set(ACTING)
    assert not missing, f"add settings for {missing}"


@pytest.mark.parametrize("name", sorted(ACTING))
async def test_scripted_run_keeps_the_ledger_and_the_pairs(name: str) -> None:
    summaries: list[list[Message]] = []

    async def summarizer(prompt: list[Message]) -> str:
        summaries.append(prompt)
        return SUMMARY_REPLY

    model = ScriptedModel(script())
    policy_mechanism = mechanism(name, summarizer=summarizer, **ACTING[name])
    agent = LLMAgent("a", model, instruction="answer briefly", tools=[FunctionTool(lookup)],
                     mechanisms=[policy_mechanism])
    svc = InMemorySessionService()
    runner = Runner("app", agent, svc)
    for turn in range(3):
        answer, _ = await runner.ask("u", "s", f"question {turn}")
        assert answer == f"answer {turn}"
    session = await svc.get_session("app", "u", "s")
    assert session is not None
    # The ledger holds exactly what the run produced: 3 x (user, call, result, call, result, answer).
    ledger = [e.message for e in session.events if e.message is not None]
    assert [m.role for m in ledger] == ["user", "assistant", "tool", "assistant", "tool", "assistant"] * 3
    for m in ledger:
        if m.role == "tool":
            topic = json.loads(next(c.arguments for p in ledger for c in p.tool_calls if c.id == m.tool_call_id))
            assert m.content == lookup(topic["topic"])
    assert not any(e.author.startswith("policy:") for e in session.events)
    assert all("policy" not in e.metadata for e in session.events)
    for request in model.requests:
        assert_paired(request)
        if name == "codex_compaction":  # a tool output is cut once, as when Codex records it (not again)
            for m in request.messages:
                if m.role == "tool":
                    original = next(o.content for o in ledger if o.tool_call_id == m.tool_call_id and o.role == "tool")
                    assert m.content == truncate_text(original, "tokens", int(ACTING[name]["truncation_limit"] * 1.2))
    # The policy acted: some request shows fewer or other messages than the ledger held then.
    shown = [m for r in model.requests for m in r.messages]
    originals = {(m.role, m.content) for m in ledger}
    changed = [m for m in shown if m.role != "system" and (m.role, m.content) not in originals]
    shorter = any(len([m for m in r.messages if m.role != "system"]) < len(ledger_before(ledger, r))
                  for r in model.requests)
    summarized = any(SUMMARY_REPLY in m.content for m in shown)
    assert changed or shorter or summarized, f"{name} never changed a request"
    stats = [e.metadata["compaction"] for e in session.events if "compaction" in e.metadata]
    assert stats and all(s["policy"] == name for s in stats)
    if name in ("langchain_summarization", "inspect_summary", "langmem_summarize", "codex_compaction",
                "letta_sliding_window", "adk_compaction"):
        assert summaries and summarized
