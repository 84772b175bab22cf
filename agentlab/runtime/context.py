"""Request projection: the context built for one model call, never read raw from the ledger.

A request is built by an ordered chain of processors over a :class:`RequestDraft`::

    instruction -> (memory preload) -> history -> (summary) -> (preload recall)
    -> (recall overview) -> current input -> (compaction)

Processors may replace ``draft.events`` with copies but never mutate the ledger's events:
the session history stays exactly as it was appended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentlab.events import Event, Message
from agentlab.model.base import GenerationConfig, ModelRequest
from agentlab.session.base import Summary

if TYPE_CHECKING:
    from agentlab.runtime.invocation import Invocation
    from agentlab.runtime.tools import Tool


@dataclass
class RequestDraft:
    """The request under construction."""

    system_parts: list[str] = field(default_factory=list)
    #: Projected history events, oldest first (copies where a processor changed them).
    events: list[Event] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    config: GenerationConfig = field(default_factory=GenerationConfig)
    #: The summary injected into this request, if any (its boundary decided ``events``).
    summary: Summary | None = None
    #: Text merged in front of the first user message (user-mode injections).
    user_prefix: list[str] = field(default_factory=list)
    #: Records processors leave for analysis (compaction stats and the like).
    stats: list[dict[str, Any]] = field(default_factory=list)
    #: Extra system text appended after everything else (e.g. "tool budget exhausted").
    trailing_system: list[str] = field(default_factory=list)

    def copy(self) -> RequestDraft:
        return RequestDraft(
            system_parts=list(self.system_parts),
            events=list(self.events),
            tools=list(self.tools),
            config=self.config,
            summary=self.summary,
            user_prefix=list(self.user_prefix),
            stats=list(self.stats),
            trailing_system=list(self.trailing_system),
        )

    def messages(self) -> list[Message]:
        out: list[Message] = []
        system = "\n\n".join(p for p in self.system_parts + self.trailing_system if p)
        if system:
            out.append(Message.system(system))
        history = events_to_messages(self.events)
        if self.user_prefix:
            prefix = "\n\n".join(self.user_prefix)
            for i, m in enumerate(history):
                if m.role == "user":
                    history[i] = m.with_content(f"{prefix}\n\n{m.content}")
                    break
            else:
                history.insert(0, Message.user(prefix))
        out.extend(history)
        return out

    def to_model_request(self, purpose: str = "answer") -> ModelRequest:
        return ModelRequest(
            messages=self.messages(),
            tools=[t.declaration() for t in self.tools],
            config=self.config,
            purpose=purpose,  # type: ignore[arg-type]
        )


def events_to_messages(events: list[Event]) -> list[Message]:
    """Messages of the projected events, with tool rounds kept well-formed.

    A tool result whose call is not in view is dropped, and so are calls whose results are not
    (providers reject both); an assistant message keeps its text when its calls are dropped.
    """
    msgs = [e.message for e in events if e.message is not None and e.message.role != "system"]
    called = {c.id for m in msgs if m.role == "assistant" for c in m.tool_calls}
    answered = {m.tool_call_id for m in msgs if m.role == "tool"}
    out: list[Message] = []
    for m in msgs:
        if m.role == "tool":
            if m.tool_call_id in called:
                out.append(m)
        elif m.role == "assistant" and m.tool_calls:
            kept = tuple(c for c in m.tool_calls if c.id in answered)
            if kept != m.tool_calls:
                m = Message(role="assistant", content=m.content, tool_calls=kept)
            if m.content or m.tool_calls:
                out.append(m)
        else:
            out.append(m)
    return out


@runtime_checkable
class RequestProcessor(Protocol):
    name: str

    async def process(self, inv: Invocation, draft: RequestDraft) -> None: ...


def in_filter(event_key: str, filter_key: str) -> bool:
    """Hierarchical filter keys ('/'-separated): the full-session key '' sees everything."""
    if not filter_key:
        return True
    return event_key == filter_key or event_key.startswith(filter_key + "/") or not event_key


def is_history_event(event: Event) -> bool:
    m = event.message
    return (
        m is not None
        and m.role in ("user", "assistant", "tool")
        and not event.partial
        and event.error is None
        and event.has_valid_content()
    )


class InstructionProcessor:
    name = "instruction"

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        instruction = getattr(inv.agent, "instruction", "")
        if instruction:
            draft.system_parts.append(instruction)


class HistoryProcessor:
    """All message events of the session visible under the invocation's filter key.

    When a summary processor follows, only the tail that can survive it is scanned: from the
    last user turn at or before the summary boundary onwards (the summary processor needs that
    round to keep split tool rounds well-formed). Projection cost then grows with the events
    after the boundary, not with the whole history.
    """

    name = "history"

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        events = inv.session.events
        start = projection_start(inv)
        draft.events = [
            e for e in events[start:] if is_history_event(e) and in_filter(e.filter_key, inv.filter_key)
        ]


def projection_start(inv: Invocation) -> int:
    """Index of the first ledger event a request can still show (0 without a summary)."""
    processors = getattr(inv.agent, "processors", ())
    if not any(getattr(p, "name", "") == "summary" for p in processors):
        return 0
    session = inv.session
    summary = session.summaries.get(inv.filter_key)
    if (summary is None or not summary.text) and inv.filter_key:
        summary = session.summaries.get("")
    if summary is None or not summary.text or summary.boundary is None or not summary.boundary.last_event_id:
        return 0
    index = session.event_index(summary.boundary.last_event_id)
    if index < 0:
        return 0
    while index > 0 and session.events[index].role != "user":
        index -= 1
    return index


class CurrentInputProcessor:
    """Make sure the current user input is in the request even if a summary covered it."""

    name = "current_input"

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        current = inv.user_event
        if current is None or any(e.id == current.id for e in draft.events):
            return
        position = next((i for i, e in enumerate(draft.events) if e.invocation_id == inv.id), len(draft.events))
        draft.events.insert(position, current)


async def run_processors(inv: Invocation, processors: list[RequestProcessor], draft: RequestDraft) -> RequestDraft:
    for processor in processors:
        await processor.process(inv, draft)
    return draft
