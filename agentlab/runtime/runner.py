"""The Runner opens the case, supervises the run, and is the only writer of the ledger."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from agentlab.core.invocation import Agent, Invocation, RunOptions
from agentlab.core.mechanism import ContextMechanism
from agentlab.core.services import ServiceRegistry, SummaryService
from agentlab.events import OBJ_RUN_DONE, Event, Message, user_event
from agentlab.session.base import SessionService

log = logging.getLogger(__name__)

AppendHook = Callable[[Invocation, Event], Awaitable[None]]
CompletionHook = Callable[[Invocation], Awaitable[None]]


class Runner:
    """Turns a message into a managed run.

    ``run`` gets or creates the session, persists the user input before the agent starts,
    registers the run (so :meth:`cancel` can stop it), streams every event out, persists only
    qualifying events (a state delta, or a complete valid response — never partial chunks),
    and emits a completion event.

    The agent's context mechanisms (``agent.context_mechanisms()``, when it has them) take part
    through their hooks: :meth:`~agentlab.core.ContextMechanism.open` here, with the Runner's
    typed :attr:`services` (the session service, ``memory_service``, ``artifact_service``, anything
    in ``services``);
    ``on_event_appended`` after every persisted event; ``on_run_completed`` after a completed
    run; ``close`` from :meth:`close`. The summary mechanism's worker and the memory mechanism's
    extraction attach that way; the Runner names no mechanism. ``after_append`` / ``after_run``
    are plain callbacks run after the hooks.
    """

    def __init__(
        self,
        app_name: str,
        agent: Agent,
        session_service: SessionService,
        *,
        memory_service: Any = None,
        artifact_service: Any = None,
        summary_worker: Any = None,
        memory_worker: Any = None,
        services: Sequence[Any] | ServiceRegistry = (),
        after_append: list[AppendHook] | None = None,
        after_run: list[CompletionHook] | None = None,
    ) -> None:
        self.app_name = app_name
        self.agent = agent
        self.session_service = session_service
        self.memory_service = memory_service
        if isinstance(services, ServiceRegistry):
            self.services = services
        else:
            self.services = ServiceRegistry()
            for service in services:
                self.services.add(service)
        self.services.add(session_service, as_type=SessionService)
        if memory_service is not None:
            self.services.add(memory_service)
        if artifact_service is not None:  # found by the artifact tools and the offload arm (inv.services)
            self.services.add(artifact_service)
        # Workers handed in explicitly are the Runner's to close, as the ones mechanisms create are.
        if summary_worker is not None:
            self.services.add(summary_worker, as_type=SummaryService, owned=True)
        if memory_worker is not None:
            self.services.add(memory_worker, owned=True, name="memory_worker")
        self.after_append = list(after_append or [])
        self.after_run = list(after_run or [])
        self._active: dict[str, Invocation] = {}
        for mechanism in self.mechanisms:
            mechanism.open(self.services)

    @property
    def mechanisms(self) -> list[ContextMechanism]:
        """The agent's context mechanisms (none for an agent that has no ``context_mechanisms``)."""
        listed = getattr(self.agent, "context_mechanisms", None)
        return list(listed()) if listed is not None else []

    @property
    def summary_worker(self) -> Any:
        """The registered :class:`~agentlab.core.SummaryService` (the summary worker), or ``None``."""
        return self.services.get(SummaryService)

    @summary_worker.setter
    def summary_worker(self, worker: Any) -> None:
        if worker is None:
            self.services.remove(SummaryService)
        else:
            self.services.add(worker, as_type=SummaryService, owned=True)

    @property
    def active_runs(self) -> list[str]:
        """Ids of the invocations running now (what :meth:`cancel` can stop)."""
        return list(self._active)

    def cancel(self, invocation_id: str) -> bool:
        """Ask a run to stop at its next step; what was persisted stays persisted."""
        inv = self._active.get(invocation_id)
        if inv is None:
            return False
        inv.cancel()
        return True

    async def run(
        self,
        user_id: str,
        session_id: str,
        message: str | Message,
        *,
        options: RunOptions | None = None,
        filter_key: str = "",
    ) -> AsyncIterator[Event]:
        """Run one message through the agent and stream every event (see the class docstring)."""
        svc = self.session_service
        session = await svc.get_session(self.app_name, user_id, session_id)
        if session is None:
            session = await svc.create_session(self.app_name, user_id, session_id)
        msg = Message.user(message) if isinstance(message, str) else message
        inv = Invocation(
            app_name=self.app_name,
            user_id=user_id,
            session=session,
            session_service=svc,
            agent=self.agent,
            message=msg,
            options=options or RunOptions(),
            filter_key=filter_key,
            services=self.services,
        )
        first = user_event(msg.content, invocation_id=inv.id, request_id=inv.request_id, filter_key=filter_key)
        if msg.role != "user" or msg.tool_calls:
            first.choices = [msg]
        inv.user_event = first
        # The input is durable before any model sees it: a crash or cancel cannot lose it.
        await svc.append_event(session, first)
        self._active[inv.id] = inv
        mechanisms = self.mechanisms
        await self._after_append(inv, first, mechanisms)
        status = "completed"
        try:
            yield first
            async for event in self.agent.run(inv):
                if not event.invocation_id:
                    event.invocation_id = inv.id
                if not event.request_id:
                    event.request_id = inv.request_id
                if event.qualifies():
                    await svc.append_event(session, event)
                    await self._after_append(inv, event, mechanisms)
                if event.error:
                    status = "error"
                yield event
                if inv.cancelled.is_set():
                    status = "cancelled"
                    break
        except (asyncio.CancelledError, GeneratorExit):
            status = "cancelled"
            raise
        finally:
            self._active.pop(inv.id, None)
        yield Event(
            author="runner",
            object=OBJ_RUN_DONE,
            invocation_id=inv.id,
            request_id=inv.request_id,
            filter_key=filter_key,
            metadata={"status": status},
        )
        if status == "completed":
            await self._after_run(inv, mechanisms)

    async def _after_append(self, inv: Invocation, event: Event, mechanisms: list[ContextMechanism]) -> None:
        for mechanism in mechanisms:
            await mechanism.on_event_appended(inv, event)
        for hook in self.after_append:
            await hook(inv, event)

    async def _after_run(self, inv: Invocation, mechanisms: list[ContextMechanism]) -> None:
        for mechanism in mechanisms:
            await mechanism.on_run_completed(inv)
        for hook in self.after_run:
            await hook(inv)

    async def ask(self, user_id: str, session_id: str, message: str | Message,
                  *, options: RunOptions | None = None) -> tuple[str, list[Event]]:
        """Run to completion; return the final answer text (or the error) and every event."""
        events = [e async for e in self.run(user_id, session_id, message, options=options)]
        final = next((e for e in reversed(events) if e.is_final_response()), None)
        if final is not None:
            return final.text, events
        error = next((e for e in reversed(events) if e.error), None)
        return (f"error: {error.error}" if error else ""), events

    async def close(self) -> None:
        """Let background work finish (the mechanisms' workers), then release it."""
        for mechanism in self.mechanisms:
            await mechanism.close()
        await self.services.aclose()
