"""Cross-session memory as a context mechanism: preload, the ``memory_search`` tool, extraction after runs.

:class:`MemoryMechanism` is what ``LLMAgent(memory=policy)`` runs (``MemoryPolicy.for_model``).
It reaches the memory store through the run's typed services (``inv.services.get(MemoryService)``
— a Runner registers its ``memory_service`` there); when a Runner opens with a store, it registers
a :class:`~agentlab.memory.worker.MemoryWorker` (owned: ``Runner.close`` drains it) and hands it
every completed run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentlab.core.mechanism import PRELOAD_MEMORY, PolicyMechanism, StagedProcessor, register_mechanism
from agentlab.core.services import ServiceRegistry
from agentlab.memory.policies import MemoryPolicy
from agentlab.memory.preload import MemoryPreloadProcessor
from agentlab.memory.service import MemoryService, memory_service_of
from agentlab.memory.tools import memory_tools
from agentlab.memory.worker import MemoryWorker
from agentlab.session.base import SessionService

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.core.tools import Tool
    from agentlab.model.base import Model

#: The registry label of the worker (the Runner files a ``memory_worker=`` it is given under it too);
#: elsewhere ``runner.services.get(MemoryWorker)`` finds it.
WORKER_NAME = "memory_worker"


class MemoryMechanism(PolicyMechanism):
    """Memory preload and search in every request, and the extraction worker (see the module docstring)."""

    policy: MemoryPolicy

    def __init__(self, policy: MemoryPolicy | None = None, model: Model | None = None) -> None:
        super().__init__(policy or MemoryPolicy(), model)

    def describe(self) -> str:
        """``"memory"``."""
        return "memory"

    def request_processors(self) -> Sequence[StagedProcessor]:
        """Memory preload, when ``preload_limit`` > 0."""
        if not self.policy.preload_limit:
            return []
        return [StagedProcessor(PRELOAD_MEMORY, MemoryPreloadProcessor(self.policy))]

    def request_tools(self, inv: Invocation) -> Sequence[Tool]:
        """``memory_search``, when the policy offers it and the run has a memory store."""
        if not self.policy.search_tool or memory_service_of(inv) is None:
            return ()
        return memory_tools(self.policy)

    def open(self, services: ServiceRegistry) -> None:
        """With a memory store and no worker yet: register the extraction worker."""
        if self.model is None or services.named(WORKER_NAME) is not None:
            return
        store = services.get(MemoryService)  # type: ignore[type-abstract]
        if store is None:
            return
        worker = MemoryWorker(self.model, self.policy, store, services.get(SessionService))  # type: ignore[type-abstract]
        services.add(worker, owned=True, name=WORKER_NAME)

    async def on_run_completed(self, inv: Invocation) -> None:
        """Hand the completed run to the extraction worker."""
        worker = inv.services.named(WORKER_NAME)
        if worker is not None:
            await worker.on_run_completed(inv)


register_mechanism(MemoryPolicy, MemoryMechanism)

__all__ = ["WORKER_NAME", "MemoryMechanism", "memory_service_of"]
