"""The typed service registry that replaces the per-mechanism slots of Runner and Invocation."""

from __future__ import annotations

import pytest

from agentlab.core import Invocation, ServiceRegistry, SummaryService
from agentlab.events import Message
from agentlab.memory import InMemoryMemoryService, MemoryPolicy, MemoryService, MemoryWorker
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import LLMAgent, Runner
from agentlab.session.base import Session
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import SummaryPolicy, SummaryWorker


class Closable:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    async def close(self) -> None:
        self.log.append(self.name)


async def test_lookup_by_exact_type_then_by_protocol_and_owned_services_close_newest_first() -> None:
    registry = ServiceRegistry()
    memories = registry.add(InMemoryMemoryService())
    assert registry.get(InMemoryMemoryService) is memories
    assert registry.get(MemoryService) is memories  # a runtime-checkable protocol finds the backend
    assert registry.get(SummaryService) is None and SummaryService not in registry
    with pytest.raises(LookupError, match="no SummaryService is registered"):
        registry.require(SummaryService)
    log: list[str] = []
    registry.add(Closable(log, "first"), owned=True)
    registry.add(Closable(log, "second"), as_type=SummaryService, owned=True, name="worker")
    assert registry.named("worker") is registry.get(SummaryService)
    await registry.aclose()
    assert log == ["second", "first"]
    await registry.aclose()
    assert log == ["second", "first"]  # closed once


async def test_the_runner_fills_the_registry_and_the_mechanisms_register_their_workers() -> None:
    memories = InMemoryMemoryService()
    model = ScriptedModel(["ok"])
    agent = LLMAgent("a", model, summary=SummaryPolicy(), memory=MemoryPolicy())
    runner = Runner("app", agent, InMemorySessionService(), memory_service=memories)
    assert isinstance(runner.summary_worker, SummaryWorker)
    assert runner.services.get(SummaryService) is runner.summary_worker
    assert isinstance(runner.services.get(MemoryWorker), MemoryWorker)
    assert runner.services.get(MemoryService) is memories
    # an Invocation keeps the older summary_worker keyword, stored in its registry
    worker = runner.summary_worker
    inv = Invocation(app_name="app", user_id="u", session=Session("app", "u", "s"),
                     session_service=runner.session_service, agent=agent, message=Message.user("hi"),
                     summary_worker=worker)
    assert inv.services.get(SummaryService) is worker and inv.summary_worker is worker
    inv.summary_worker = None
    assert inv.services.get(SummaryService) is None
    await runner.close()


async def test_without_a_memory_store_no_worker_and_no_tool() -> None:
    agent = LLMAgent("a", ScriptedModel(["ok"]), memory=MemoryPolicy())
    runner = Runner("app", agent, InMemorySessionService())
    assert runner.services.get(MemoryWorker) is None and runner.summary_worker is None
    await runner.ask("u", "s", "hi")
    assert agent.model.requests[0].tools == []  # type: ignore[attr-defined]
    await runner.close()
