"""Request projection: the context built for one model call, never read raw from the ledger.

A request is built by an ordered chain of processors over a :class:`RequestDraft`::

    instruction -> (memory preload) -> history -> (summary) -> (preload recall)
    -> (recall overview) -> current input -> (compaction)

Processors may replace ``draft.events`` with copies but never mutate the ledger's events:
the session history stays exactly as it was appended.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentlab.events import Event, Message
from agentlab.model import tokens
from agentlab.model.base import GenerationConfig, ModelRequest
from agentlab.session.base import Summary

if TYPE_CHECKING:
    from agentlab.runtime.invocation import Invocation
    from agentlab.runtime.tools import Tool


@dataclass(frozen=True)
class RenderedHistory:
    """History messages already rendered from ``RequestDraft.events``, with their token count.

    Left by the incremental projection (``agentlab.runtime.projection_cache``) so that building
    the request does not walk the whole history again; ``tokens`` is the sum of
    :func:`agentlab.model.tokens.count_message` over ``messages``.
    """

    messages: list[Message]
    tokens: int


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
    #: ``events`` rendered ahead of time by the incremental projection; ``None`` = render here.
    rendered_history: RenderedHistory | None = None
    #: The last list :meth:`messages` built from ``rendered_history`` and its token count.
    _counted: tuple[list[Message], int] | None = field(default=None, init=False, repr=False, compare=False)

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
            rendered_history=self.rendered_history,
        )

    def messages(self) -> list[Message]:
        out: list[Message] = []
        system = "\n\n".join(p for p in self.system_parts + self.trailing_system if p)
        if system:
            out.append(Message.system(system))
        start = len(out)
        rendered = self.rendered_history
        out.extend(rendered.messages if rendered is not None else events_to_messages(self.events))
        changed: list[tuple[Message | None, Message]] = []  # (replaced message, new message)
        if self.user_prefix:
            prefix = "\n\n".join(self.user_prefix)
            for i in range(start, len(out)):
                if out[i].role == "user":
                    changed.append((out[i], out[i].with_content(f"{prefix}\n\n{out[i].content}")))
                    out[i] = changed[-1][1]
                    break
            else:
                changed.append((None, Message.user(prefix)))
                out.insert(start, changed[-1][1])
        if rendered is not None:
            # The history's tokens are known; only the few messages added or changed here are counted.
            total = rendered.tokens + sum(tokens.count_message(m) for m in out[:start])
            for old, new in changed:
                total += tokens.count_message(new) - (tokens.count_message(old) if old is not None else 0)
            self._counted = (out, total)
        return out

    def prompt_tokens(self, request: ModelRequest) -> int:
        """Prompt tokens of ``request`` (built from this draft), as ``tokens.count_messages`` counts them.

        When the messages came from the incremental projection the history is not counted again.
        """
        counted = self._counted
        if counted is not None and counted[0] is request.messages:
            return counted[1] + tokens.REPLY_PRIMING_TOKENS + tokens.count_tools(request.tools or None)
        return tokens.count_messages(request.messages, request.tools or None)

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
        rendered = render_history_message(m, called, answered)
        if rendered is not None:
            out.append(rendered)
    return out


def render_history_message(m: Message, called: Container[str], answered: Container[str | None]) -> Message | None:
    """One history message as it goes out, given the call ids and result ids in view.

    Shared by :func:`events_to_messages` and the incremental projection, so both render a
    message the same way. ``None`` when the message must be left out.
    """
    if m.role == "tool":
        return m if m.tool_call_id in called else None
    if m.role == "assistant" and m.tool_calls:
        kept = tuple(c for c in m.tool_calls if c.id in answered)
        if kept != m.tool_calls:
            m = Message(role="assistant", content=m.content, tool_calls=kept)
        return m if (m.content or m.tool_calls) else None
    return m


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
