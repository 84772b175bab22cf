"""Cross-session memory as a context mechanism: preload, the ``memory_search`` tool, extraction after runs.

:class:`MemoryMechanism` is what ``LLMAgent(memory=policy)`` runs (``MemoryPolicy.for_model``).
It reaches the memory store through the run's typed services (``inv.services.get(MemoryService)``
— a Runner registers its ``memory_service`` there); when a Runner opens with a store, it registers
a :class:`~agentlab.memory.worker.MemoryWorker` (owned: ``Runner.close`` drains it) and hands it
every completed run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab.core.projection import PolicyMechanism
from agentlab.core.services import ServiceRegistry
from agentlab.memory.policies import MemoryPolicy
from agentlab.memory.service import MemoryService
from agentlab.session.base import SessionService

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.model.base import Model

#: The registry label of the worker (``Runner.memory_worker`` reads it).
WORKER_NAME = "memory_worker"


def memory_service_of(inv: Invocation) -> MemoryService | None:
    """The run's memory store, if one is registered."""
    return inv.services.get(MemoryService)  # type: ignore[type-abstract]


class MemoryMechanism(PolicyMechanism):
    """Memory preload and search in every request, and the extraction worker (see the module docstring)."""

    policy: MemoryPolicy

    def __init__(self, policy: MemoryPolicy | None = None, model: Model | None = None) -> None:
        super().__init__(policy or MemoryPolicy(), model)

    def open(self, services: ServiceRegistry) -> None:
        """With a memory store and no worker yet: register the extraction worker."""
        if self.model is None or services.named(WORKER_NAME) is not None:
            return
        store = services.get(MemoryService)  # type: ignore[type-abstract]
        if store is None:
            return
        from agentlab.memory.worker import MemoryWorker

        worker = MemoryWorker(self.model, self.policy, store, services.get(SessionService))  # type: ignore[type-abstract]
        services.add(worker, owned=True, name=WORKER_NAME)

    async def on_run_completed(self, inv: Invocation) -> None:
        """Hand the completed run to the extraction worker."""
        worker = inv.services.named(WORKER_NAME)
        if worker is not None:
            await worker.on_run_completed(inv)


__all__ = ["WORKER_NAME", "MemoryMechanism", "memory_service_of"]
