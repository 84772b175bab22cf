"""End to end on the embedded model: a compacted-away tool result comes back through session_load.

What this proves, honestly:

* Real compaction (``agentlab.compaction``, pass 1) removes an early tool result from the request
  and leaves a placeholder naming its event_id and pointing to ``session_load``; the exact value
  is absent from what the model is shown.
* The *first* model call of the final run is scripted: it reads the event_id out of the
  placeholder it was actually given and calls ``session_load`` with it. SmolLM2-135M does not
  call tools reliably, so the tool *decision* is not the embedded model's. Everything after that
  is real: the runtime's tool loop, ``session_load`` over the session service, the byte window.
* The final answer is produced by the embedded model (SmolLM2-135M-Instruct on llama.cpp) from
  the loaded tool result, and must contain the exact value. This is a smoke test of a weak model.

Fixture choices that keep the weak model's prompt small and repeatable (found by trying; the
135M model is the fragile part, not the recall path): event ids are short and deterministic
(random hex ids change the prompt every run and the model sometimes copies one instead of the
value); the history is one earlier request (``keep_recent_requests=0`` makes it historical; a
second "Thanks / You are welcome" turn made the model answer "You are welcome."); the audit
record is eleven short lines with the code on the last one (in the middle, the model copied a
nearby number such as ``content_bytes``); the load asks for the anchor only (``before=1,
after=0``: the one message before is the tool call, which session_load skips); the answering
call has no tools (one tool round).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator

import pytest

from agentlab.compaction import CompactionPolicy
from agentlab.events import OBJ_COMPACTION, Usage
from agentlab.model.base import GenerationConfig, ModelChunk, ModelRequest, ModelResponse
from agentlab.model.scripted import ScriptedModel
from agentlab.recall import RecallPolicy
from agentlab.runtime import FunctionTool, LLMAgent, Runner
from agentlab.session.inmemory import InMemorySessionService

ACCESS_CODE = "QX-58213-LM"


def read_vault(vault: str) -> str:
    """Read the full audit record of a vault.

    Args:
        vault: Vault name.
    """
    lines = [f"audit line {i:03d}: door sensor nominal, humidity {40 + i % 7}%" for i in range(10)]
    lines.append(f"ACCESS CODE for vault {vault}: {ACCESS_CODE}")
    return "\n".join(lines)


class FirstCallScripted:
    """First call: a scripted session_load on the event_id taken from the compaction placeholder
    in the request; every later call goes to the embedded model."""

    def __init__(self, real) -> None:
        self.real = real
        self.info = real.info
        self.requests: list[ModelRequest] = []

    def _first(self, request: ModelRequest) -> ModelResponse:
        shown = "\n".join(m.content for m in request.messages)
        found = re.search(r"event_id: (\S+)", shown)
        assert found, "no compaction placeholder with an event_id in the request"
        message = ScriptedModel.tool_call("session_load", {"event_id": found.group(1), "before": 1, "after": 0},
                                          id="load-1")
        return ModelResponse(message=message, usage=Usage(), model="scripted-first-call")

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if len(self.requests) == 1:
            return self._first(request)
        return await self.real.generate(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        yield ModelChunk(response=await self.generate(request))


@pytest.mark.slow
async def test_compacted_tool_result_is_recovered_with_session_load_on_the_embedded_model(monkeypatch):
    from agentlab.model.embedded import EmbeddedModel

    counter = itertools.count(1)
    monkeypatch.setattr("agentlab.events.new_id", lambda prefix="": f"{prefix}{next(counter):04d}")

    svc = InMemorySessionService()
    # The earlier request builds the history with a scripted model and a real tool.
    seeding = ScriptedModel([
        ScriptedModel.tool_call("read_vault", {"vault": "B7"}, id="vault-1"),
        "I read the audit record of vault B7.",
    ])
    seed_agent = LLMAgent("assistant", seeding, tools=[FunctionTool(read_vault)])
    await Runner("app", seed_agent, svc).ask("u", "s", "Please read the audit record of vault B7.")

    model = FirstCallScripted(EmbeddedModel())
    agent = LLMAgent(
        "assistant", model,
        instruction="You are a helpful assistant. Answer briefly.",
        tools=[FunctionTool(read_vault)],
        compaction=CompactionPolicy(enabled=True, tool_result_max_tokens=60, keep_recent_requests=0),
        recall=RecallPolicy(),
        # One tool round: the answering call then has no tools, which the 135M model handles best.
        max_tool_iterations=1,
        generation=GenerationConfig(temperature=0.0, max_tokens=32),
    )
    answer, events = await Runner("app", agent, svc).ask(
        "u", "s", "What is the access code of vault B7? Reply with the code only.")

    first, second = model.requests[0], model.requests[1]
    first_text = "\n".join(m.content for m in first.messages)
    assert ACCESS_CODE not in first_text  # compacted away ...
    placeholder = next(m.content for m in first.messages if m.role == "tool")
    assert placeholder.startswith("[tool result elided]") and "call session_load" in placeholder
    assert any(e.object == OBJ_COMPACTION for e in events)  # ... by the real compaction pass
    loaded = next(e for e in events if e.is_tool_result() and e.message.name == "session_load")
    assert ACCESS_CODE in loaded.text and "Historical context only" in loaded.text
    assert loaded.metadata.get("tool_error") is None
    assert any(ACCESS_CODE in m.content for m in second.messages if m.role == "tool")
    print(f"\nembedded model answer: {answer!r}")
    assert ACCESS_CODE in answer.replace(" ", "")
