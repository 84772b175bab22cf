"""The rolling summary as a context mechanism: its request step, and the worker it owns.

:class:`SummaryMechanism` is what ``LLMAgent(summary=policy, summary_model=m)`` runs
(``SummaryPolicy.for_model(m)``). When a Runner opens it registers its :class:`SummaryWorker`
as the run's :class:`~agentlab.core.SummaryService` (unless one was handed to the Runner), owned
by the registry so ``Runner.close`` drains and stops it; after every appended event it lets the
worker decide whether to enqueue an update. Other mechanisms that need a summary now (the
compaction pressure path) find the worker in the registry, never through this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentlab.core.mechanism import INJECT_SUMMARY, PolicyMechanism, StagedProcessor, register_mechanism
from agentlab.core.services import ServiceRegistry, SummaryService
from agentlab.events import Event
from agentlab.session.base import SessionService
from agentlab.summary.inject import SummaryInjectionProcessor
from agentlab.summary.policy import SummaryPolicy
from agentlab.summary.summarizer import Summarizer
from agentlab.summary.worker import SummaryWorker

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.model.base import Model


class SummaryMechanism(PolicyMechanism):
    """The summary step in every request, and the background worker (see the module docstring)."""

    policy: SummaryPolicy

    def __init__(self, policy: SummaryPolicy | None = None, model: Model | None = None) -> None:
        super().__init__(policy or SummaryPolicy(), model)

    def describe(self) -> str:
        """``"summary"``."""
        return "summary"

    def request_processors(self) -> Sequence[StagedProcessor]:
        """The summary step: the summary text in, the history cut at its boundary."""
        return [StagedProcessor(INJECT_SUMMARY, SummaryInjectionProcessor(self.policy))]

    def open(self, services: ServiceRegistry) -> None:
        """Register the worker (with the Runner's session service) unless a summary service is there."""
        if self.model is None or services.get(SummaryService) is not None:  # type: ignore[type-abstract]
            return
        session_service = services.get(SessionService)  # type: ignore[type-abstract]
        if session_service is None:
            return
        worker = SummaryWorker(session_service, Summarizer(self.model, self.policy), self.policy)
        services.add(worker, as_type=SummaryService, owned=True)

    async def on_event_appended(self, inv: Invocation, event: Event) -> None:
        """Let the worker enqueue an update after a qualifying event."""
        worker = inv.services.get(SummaryService)  # type: ignore[type-abstract]
        hook = getattr(worker, "on_event_appended", None)
        if hook is not None:
            await hook(inv, event)


register_mechanism(SummaryPolicy, SummaryMechanism)

__all__ = ["SummaryMechanism"]
