"""End to end on the embedded model: a 200-turn session stays inside SmolLM2's 8,192-token window
with summary and compaction on, and fails with a context-length error with them off.

Design (what is real and what is scripted, and why):

* The **summariser is the real embedded model** (SmolLM2-135M-Instruct on llama.cpp). Every
  rolling summary in the "on" arm is a real call through the OpenAI path, with its input budget
  derived from the real server's window (0.7 x 8,192).
* The **agent's turns are scripted**: 200 turns x up to 2 calls of up to ~5k prompt tokens would take
  far longer than the time budget on 2 CPU cores (~125 prompt tok/s), and a 135M model cannot drive a
  tool loop reliably. The scripted agent is wrapped in ``SmolLM2WindowGuard``, which measures every
  request it gets in **SmolLM2 tokens** (the real server's chat template via ``/apply-template`` and
  its tokenizer via ``/tokenize``) and, if a request does not fit the window, forwards it to the real
  server, whose rejection becomes the run's error. So "inside the window" is measured with the model's
  own tokenizer, and the "off" arm's failure is llama.cpp's own context-size error.
* The conversation: 200 short user/agent turns; every 10th turn the agent calls ``fetch_logs``,
  which returns ~2,000 tokens of depot logs (~2,800 SmolLM2 tokens). Without governance 20 such
  results (~56k SmolLM2 tokens) cannot fit. With it, compaction (pass 1) replaces old results with
  recoverable placeholders, and the rolling summary (background trigger ``events_over=150``; the
  70 % pressure path as a safety net) folds old turns into a short summary.
* To keep the summariser's cost small, summaries are capped at 32 output tokens, tool results in the
  summariser's input are cut to 32 tokens (``input_tool_result_max_tokens``), and a terse custom
  template is used. The job timeout is raised from 60 s to 900 s: on a busy 2-core machine one
  summary call can take over a minute, and a timed-out job would leave the boundary where it was,
  turn after turn. Between turns the test waits for background summary jobs (``drain``), as a human
  pace would allow; the scripted agent would otherwise finish 200 turns before the first summary.

Measured on the lab machine (2 cores, shared): see the printed figures (run with ``-s``).
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from agentlab.compaction import CompactionPolicy
from agentlab.model.base import ContextLengthError, ModelInfo, ModelRequest, ModelResponse
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import FunctionTool, LLMAgent, Runner
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import SummaryPolicy

pytestmark = pytest.mark.slow

TURNS = 200
TOOL_EVERY = 10
INSTRUCTION = "You are a depot operations assistant. Keep answers short."
SUMMARY_TEMPLATE = (
    "Summarise this depot conversation in under {max_summary_words} words. Keep parcel numbers.\n"
    "{conversation_text}\nSummary:"
)


def depot_logs(day: int) -> str:
    """Fetch the depot scan logs of one day.

    Args:
        day: The day number.
    """
    lines = [f"day {day} scan {k:04d}: depot {k % 7} parcel {day * 1000 + k} ok, latency {k % 97} ms"
             for k in range(110)]
    return "\n".join(lines)


def user_text(turn: int) -> str:
    if turn % TOOL_EVERY == TOOL_EVERY // 2:
        return f"Check the depot logs for day {turn}."
    return f"Note {turn}: parcel {turn} at depot {turn % 7}."


def agent_reply(request: ModelRequest):
    last = request.messages[-1]
    if last.role == "tool":
        return f"Day logs checked: {last.content.count(' ok,')} scans, all ok."
    text = last.content
    marker = "Check the depot logs for day "
    if marker in text:
        day = int(text.split(marker)[1].rstrip("."))
        return ScriptedModel.tool_call("depot_logs", {"day": day})
    return f"Noted {text.split(':')[0].split()[-1]}."


class SmolLM2WindowGuard:
    """The scripted agent, with every request measured in SmolLM2 tokens by the real server."""

    def __init__(self, embedded) -> None:
        self.embedded = embedded
        self.server = embedded.server.start()
        self.info = ModelInfo("scripted-agent-in-smollm2-window", self.server.context_window)
        self.inner = ScriptedModel(default_reply=agent_reply, info=self.info)
        self.max_prompt_tokens = 0
        self.requests = 0

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.server.address + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as response:  # 127.0.0.1 only
            return json.loads(response.read())

    def smollm2_tokens(self, request: ModelRequest) -> int:
        prompt = self._post("/apply-template", {"messages": [m.to_openai() for m in request.messages]})["prompt"]
        return len(self._post("/tokenize", {"content": prompt, "add_special": False,
                                            "parse_special": True})["tokens"])

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        count = self.smollm2_tokens(request)
        self.max_prompt_tokens = max(self.max_prompt_tokens, count)
        if count >= self.info.context_window:
            # Let the real server judge: llama.cpp rejects it before any processing.
            return await self.embedded.generate(request)
        return await self.inner.generate(request)

    async def stream(self, request):  # pragma: no cover - the agent does not stream here
        raise NotImplementedError


@pytest.fixture(scope="module")
def embedded():
    try:
        from agentlab.model.embedded import EmbeddedModel
    except ImportError as exc:  # pragma: no cover - written before the embedded model landed
        pytest.skip(f"agentlab.model.embedded is not available: {exc}")
    return EmbeddedModel()


def make_runner(embedded, governed: bool):
    guard = SmolLM2WindowGuard(embedded)
    agent = LLMAgent(
        "depot", guard, instruction=INSTRUCTION, tools=[FunctionTool(depot_logs)],
        summary=SummaryPolicy(events_over=150, prompt=SUMMARY_TEMPLATE, max_summary_words=25,
                              max_output_tokens=32, input_tool_result_max_tokens=32,
                              job_timeout=900.0) if governed else None,
        summary_model=embedded,
        compaction=CompactionPolicy(enabled=True) if governed else None,
    )
    return Runner("depot-app", agent, InMemorySessionService()), guard


async def test_200_turns_fit_with_summary_and_compaction(embedded):
    runner, guard = make_runner(embedded, governed=True)
    started = time.perf_counter()
    compactions = 0
    for turn in range(TURNS):
        answer, events = await runner.ask("u", "s", user_text(turn))
        assert not answer.startswith("error"), f"turn {turn}: {answer}"
        compactions += sum(1 for e in events if e.object == "context.compaction")
        await runner.summary_worker.drain()
    elapsed = time.perf_counter() - started
    stats = runner.summary_worker.stats
    session = await runner.session_service.get_session("depot-app", "u", "s")
    summary = session.summaries[""]
    print(f"\n[on] {TURNS} turns in {elapsed:.1f}s; agent requests {guard.requests}; "
          f"max prompt {guard.max_prompt_tokens} SmolLM2 tokens of {guard.info.context_window}; "
          f"summary updates {stats.advanced} (model calls {stats.model_calls}); compaction events {compactions}; "
          f"summariser input tokens per run {[r['input_tokens'] for r in stats.runs]}, "
          f"summariser seconds {sum(r['latency_ms'] for r in stats.runs) / 1000:.1f}")
    assert guard.max_prompt_tokens < guard.info.context_window
    assert stats.advanced >= 2  # several rolling steps, each on the real model
    assert compactions >= 10  # old log dumps were compacted
    assert summary.text and session.event_index(summary.boundary.last_event_id) > len(session.events) // 2
    # the ledger keeps every raw log dump: compaction never rewrites history
    assert sum(1 for e in session.events if e.is_tool_result() and e.text.startswith("day ")) == TURNS // TOOL_EVERY
    await runner.close()


async def test_without_summary_and_compaction_the_window_overflows(embedded):
    runner, guard = make_runner(embedded, governed=False)
    failure = None
    for turn in range(TURNS):
        answer, events = await runner.ask("u", "s", user_text(turn))
        errors = [e for e in events if e.error]
        if errors:
            failure = (turn, errors[0])
            break
    assert failure is not None, "200 ungoverned turns should not fit in SmolLM2's window"
    turn, error = failure
    print(f"\n[off] failed at turn {turn}: {error.error_code}: {error.error[:160]}")
    assert error.error_code == ContextLengthError.code
    assert "exceeds the available context size" in error.error  # llama.cpp's own words
    assert turn < TURNS
