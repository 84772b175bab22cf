"""The Runner opens the case, supervises the run, and is the only writer of the ledger."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agentlab.events import OBJ_RUN_DONE, Event, Message, user_event
from agentlab.runtime.agent import Agent
from agentlab.runtime.invocation import Invocation, RunOptions
from agentlab.session.base import SessionService

log = logging.getLogger(__name__)

AppendHook = Callable[[Invocation, Event], Awaitable[None]]
CompletionHook = Callable[[Invocation], Awaitable[None]]


class Runner:
    """Turns a message into a managed run.

    ``run`` gets or creates the session, persists the user input before the agent starts,
    registers the run (so :meth:`cancel` can stop it), streams every event out, persists only
    qualifying events (a state delta, or a complete valid response — never partial chunks),
    and emits a completion event. Hook points: ``after_append`` (a summary job may be enqueued
    there) and ``after_run`` (memory extraction).
    """

    def __init__(
        self,
        app_name: str,
        agent: Agent,
        session_service: SessionService,
        *,
        memory_service: Any = None,
        summary_worker: Any = None,
        memory_worker: Any = None,
        after_append: list[AppendHook] | None = None,
        after_run: list[CompletionHook] | None = None,
    ) -> None:
        self.app_name = app_name
        self.agent = agent
        self.session_service = session_service
        self.memory_service = memory_service
        if summary_worker is None and getattr(agent, "summary", None) is not None:
            from agentlab.summary import summary_worker_for

            summary_worker = summary_worker_for(agent, session_service)
        self.summary_worker = summary_worker
        if memory_worker is None and memory_service is not None and getattr(agent, "memory", None) is not None:
            from agentlab.memory.worker import memory_worker_for

            memory_worker = memory_worker_for(agent, memory_service)
        self.memory_worker = memory_worker
        self.after_append = list(after_append or [])
        self.after_run = list(after_run or [])
        self._active: dict[str, Invocation] = {}

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
            memory_service=self.memory_service,
            summary_worker=self.summary_worker,
        )
        first = user_event(msg.content, invocation_id=inv.id, request_id=inv.request_id, filter_key=filter_key)
        if msg.role != "user" or msg.tool_calls:
            first.choices = [msg]
        inv.user_event = first
        # The input is durable before any model sees it: a crash or cancel cannot lose it.
        await svc.append_event(session, first)
        self._active[inv.id] = inv
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
                    await self._after_append(inv, event)
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
            await self._after_run(inv)

    async def _after_append(self, inv: Invocation, event: Event) -> None:
        if self.summary_worker is not None:
            await self.summary_worker.on_event_appended(inv, event)
        for hook in self.after_append:
            await hook(inv, event)

    async def _after_run(self, inv: Invocation) -> None:
        if self.memory_worker is not None:
            await self.memory_worker.on_run_completed(inv)
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
        """Let background work finish (summary and memory workers), then release it."""
        for worker in (self.summary_worker, self.memory_worker):
            if worker is not None and hasattr(worker, "close"):
                await worker.close()
