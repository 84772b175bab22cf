"""The background worker: queue, caller fallback when full, timeout, ordering, Runner hook."""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace

from agentlab.events import user_event
from agentlab.memory import InMemoryMemoryService, MemoryPolicy, MemoryWorker
from agentlab.memory.worker import fnv1a_32
from agentlab.model.base import ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import LLMAgent, Runner
from agentlab.session.inmemory import InMemorySessionService


def remember_first_user_line(request: ModelRequest) -> str:
    """Scripted extraction reply: store the first user message of the delta verbatim."""
    line = re.search(r"\] user: (.*)", request.messages[1].content).group(1)
    return json.dumps({"operations": [{"op": "add", "text": f"Said: {line}"}]})


class GatedModel:
    """Blocks every call whose conversation mentions BLOCK until ``gate`` is set."""

    def __init__(self, inner: ScriptedModel, delay: float = 0.0) -> None:
        self.inner = inner
        self.info = inner.info
        self.delay = delay
        self.gate = asyncio.Event()
        self.blocked = asyncio.Event()

    async def generate(self, request: ModelRequest):
        if "BLOCK" in request.messages[1].content:
            self.blocked.set()
            await self.gate.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        return await self.inner.generate(request)

    def stream(self, request):  # pragma: no cover - the extractor never streams
        raise NotImplementedError


async def run_for(sessions: InMemorySessionService, user: str, text: str, *, cancelled: bool = False):
    session = await sessions.create_session("app", user, f"s-{user}")
    await sessions.append_event(session, user_event(text))
    inv = SimpleNamespace(app_name="app", user_id=user, session=session, session_service=sessions,
                          cancelled=asyncio.Event())
    if cancelled:
        inv.cancelled.set()
    return inv


def test_fnv1a_is_the_standard_32_bit_hash():
    assert fnv1a_32("") == 0x811C9DC5 and fnv1a_32("a") == 0xE40C292C


async def test_a_full_queue_runs_the_pass_in_the_caller():
    sessions = InMemorySessionService()
    memories = InMemoryMemoryService()
    model = GatedModel(ScriptedModel([remember_first_user_line] * 3))
    worker = MemoryWorker(model, MemoryPolicy(workers=1, queue_size=1), memories)

    await worker.on_run_completed(await run_for(sessions, "a", "BLOCK the worker here"))
    await asyncio.wait_for(model.blocked.wait(), 1)  # the only worker is now busy with user a
    await worker.on_run_completed(await run_for(sessions, "b", "I like tea"))  # fills the queue (size 1)
    assert worker.stats["enqueued"] == 2 and worker.stats["ran_in_caller"] == 0

    await worker.on_run_completed(await run_for(sessions, "c", "I like chess"))  # queue full
    assert worker.stats["ran_in_caller"] == 1
    # ... so user c's memory exists as soon as the call returns, while b is still waiting in the queue.
    assert [m.text for m in await memories.list("app", "c")] == ["Said: I like chess"]
    assert await memories.list("app", "b") == []

    model.gate.set()
    await worker.drain()
    assert [m.text for m in await memories.list("app", "b")] == ["Said: I like tea"]
    assert [m.text for m in await memories.list("app", "a")] == ["Said: BLOCK the worker here"]
    assert worker.stats["completed"] == 3 and worker.errors == []
    await worker.close()


async def test_a_cancelled_run_enqueues_nothing():
    sessions = InMemorySessionService()
    model = ScriptedModel([])
    worker = MemoryWorker(model, MemoryPolicy(), InMemoryMemoryService())
    await worker.on_run_completed(await run_for(sessions, "a", "hello", cancelled=True))
    await worker.drain()
    assert model.calls == 0 and worker.stats["enqueued"] == 0
    await worker.close()


async def test_a_slow_pass_times_out_with_a_recorded_error():
    sessions = InMemorySessionService()
    inv = await run_for(sessions, "a", "I like tea")
    model = GatedModel(ScriptedModel([remember_first_user_line]), delay=1.0)
    worker = MemoryWorker(model, MemoryPolicy(job_timeout_seconds=0.05), InMemoryMemoryService())
    result = await worker.extract_now("app", "a", inv.session, sessions)
    assert result.status == "error" and result.error == "extraction timed out after 0.05 s"
    assert worker.stats["timeouts"] == 1 and worker.errors == [result]
    await worker.close()


async def test_runner_enqueues_extraction_after_a_completed_run_and_memory_reaches_the_next_session():
    sessions = InMemorySessionService()
    memories = InMemoryMemoryService()
    model = ScriptedModel(["Noted, you prefer Go.", remember_first_user_line, "You prefer Go."])
    agent = LLMAgent("assistant", model, instruction="Be brief.", memory=MemoryPolicy(preload_limit=5,
                                                                                       search_tool=False))
    runner = Runner("app", agent, sessions, memory_service=memories)
    worker = runner.services.get(MemoryWorker)
    assert isinstance(worker, MemoryWorker)

    await runner.ask("u1", "s1", "I prefer Go for backend services.")
    await worker.drain()
    assert model.requests[1].purpose == "memory"
    assert [m.text for m in await memories.list("app", "u1")] == ["Said: I prefer Go for backend services."]

    answer, _ = await runner.ask("u1", "s2", "Which language do I prefer?")
    assert answer == "You prefer Go."
    system = model.requests[2].messages[0].content
    assert "Said: I prefer Go for backend services." in system
    await runner.close()
    # the second run's extraction ran too (the script's default is exhausted -> recorded error, not a crash)
    assert worker.stats["completed"] == 2
    assert "script exhausted" in worker.errors[0].error
