"""Shared builders for recall tests: sessions with fixed timestamps and bare invocations."""

from __future__ import annotations

from agentlab.core.invocation import Invocation
from agentlab.events import Event, Message, ToolCall
from agentlab.recall import RecallPolicy
from agentlab.session.base import Session, Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService

APP = "app"
USER = "u1"


class Ledger:
    """Appends events with strictly increasing timestamps (ties would make orderings flaky)."""

    def __init__(self, svc: InMemorySessionService, start: float = 1_700_000_000.0) -> None:
        self.svc = svc
        self.clock = start

    async def session(self, session_id: str, user_id: str = USER) -> Session:
        found = await self.svc.get_session(APP, user_id, session_id)
        return found or await self.svc.create_session(APP, user_id, session_id)

    async def add(self, session: Session, message: Message, *, invocation_id: str = "", filter_key: str = "") -> Event:
        self.clock += 1.0
        event = Event(author=message.role, choices=[message], timestamp=self.clock,
                      invocation_id=invocation_id, filter_key=filter_key)
        return await self.svc.append_event(session, event)

    async def user(self, session: Session, text: str, **kw) -> Event:
        return await self.add(session, Message.user(text), **kw)

    async def assistant(self, session: Session, text: str, **kw) -> Event:
        return await self.add(session, Message.assistant(text), **kw)

    async def tool_round(self, session: Session, call_id: str, name: str, result: str, **kw) -> tuple[Event, Event]:
        call = await self.add(session, Message.assistant("", tool_calls=(ToolCall(call_id, name, "{}"),)), **kw)
        res = await self.add(session, Message.tool(call_id, name, result), **kw)
        return call, res


def invocation(svc: InMemorySessionService, session: Session, text: str = "question",
               filter_key: str = "") -> Invocation:
    """An invocation as the Runner would build it, without running an agent."""
    return Invocation(app_name=APP, user_id=session.user_id, session=session, session_service=svc,
                      agent=None,  # type: ignore[arg-type]  # the recall code never touches the agent
                      message=Message.user(text), filter_key=filter_key)


def policy(**changes) -> RecallPolicy:
    return RecallPolicy(**changes)


async def summarise_up_to(svc: InMemorySessionService, session: Session, last_event: Event, filter_key: str = "",
                          text: str = "earlier turns summarised") -> None:
    """Write a summary of ``filter_key``'s view whose boundary is ``last_event`` (what it hides)."""
    boundary = SummaryBoundary(filter_key=filter_key, cutoff_at=last_event.timestamp, last_event_id=last_event.id)
    await svc.write_summary(session, filter_key, Summary(text=text, boundary=boundary))
