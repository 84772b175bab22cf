"""The context-mechanism contract and the request draft it works on, shared by the runtime and the mechanisms.

A model call is shown a *projection* of the session, built by an ordered chain of processors over
a :class:`RequestDraft`. This module holds what both sides need — the draft, the processor
protocol, the history filters — and the declared extension points through which a mechanism
(summary, compaction, recall, memory, or a new one) adds to the request:

* a :class:`ContextMechanism` contributes :class:`StagedProcessor` entries, each at a
  :class:`Stage`, and tools; ``LLMAgent`` orders the processors by stage;
* a processor declares its :class:`EventsRole` (what it does to ``draft.events``), so the
  incremental projection (``agentlab.runtime.projection_cache``) knows which steps it can
  reproduce; the summary step offers the :class:`SummaryStep` methods it mirrors.

This is layer 3 (``agentlab.core``): it imports events, model and session only, never a mechanism
or the runtime, so every mechanism can build on it (``tests/runtime/test_import_layers.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from agentlab.events import Event, Message
from agentlab.model import tokens
from agentlab.model.base import GenerationConfig, ModelRequest
from agentlab.session.base import Session, Summary

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.core.services import ServiceRegistry
    from agentlab.core.tools import Tool
    from agentlab.model.base import Model


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
        """A draft whose lists can change without touching this one's (the events are shared)."""
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
        """The chat messages this draft sends: one system message, then the history."""
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
        """The finished request for the model (``purpose`` labels the call in the records)."""
        return ModelRequest(
            messages=self.messages(),
            tools=[t.declaration() for t in self.tools],
            config=self.config,
            purpose=purpose,  # type: ignore[arg-type]  # a free label; ModelRequest lists the known ones
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


def round_start(events: Sequence[Event], index: int) -> int:
    """Index of the user turn that opens the round holding ``events[index]`` (0 when there is none).

    Where a request's history starts after a summary boundary: the history processor and the
    projection cache both cut here, so a tool round is never shown without the turn that asked.
    """
    while index > 0 and events[index].role != "user":
        index -= 1
    return index


def in_filter(event_key: str, filter_key: str) -> bool:
    """Whether an event written under ``event_key`` is visible to a view under ``filter_key``.

    Filter keys are branch paths, ``/``-separated (a branch's key is its parent's key, ``/``, its
    name). A view sees the events of its own branch and of every ancestor branch (the history
    before each fork), never a sibling's or a descendant's; the full-session key ``""`` sees
    everything, and an event without a key is seen by every view. This is Google ADK's rule for
    its events' ``branch`` (segments ``.``-separated there); see :mod:`agentlab.runtime.composition`
    for the source cited and ``tests/policies/test_adk_branch.py`` for the agreement.
    """
    if not filter_key or not event_key or event_key == filter_key:
        return True
    # an ancestor's key is a whole-segment prefix of the view's key
    return filter_key.startswith(event_key) and filter_key[len(event_key)] == "/"


def visible_keys(filter_key: str) -> frozenset[str] | None:
    """The event keys a view under ``filter_key`` sees (``None``: every key, the full-session view).

    The set form of :func:`in_filter` for loops over a whole ledger: ``""``, each ancestor, the key.
    """
    if not filter_key:
        return None
    parts = filter_key.split("/")
    return frozenset(["", *("/".join(parts[:i]) for i in range(1, len(parts) + 1))])


def branch_key(parent_key: str, name: str) -> str:
    """The filter key of branch ``name`` forked from a run under ``parent_key``."""
    name = name.strip().strip("/")
    if not name:
        raise ValueError("a branch needs a non-empty name (got a blank one)")
    return f"{parent_key}/{name}" if parent_key else name


def is_history_event(event: Event) -> bool:
    """Whether an event belongs in a projected history: a complete, valid user/assistant/tool message."""
    m = event.message
    return (
        m is not None
        and m.role in ("user", "assistant", "tool")
        and not event.partial
        and event.error is None
        and event.has_valid_content()
    )


# ------------------------------------------------------------------------------------ processors


class EventsRole(enum.Enum):
    """What a processor does to ``draft.events``, declared as the class attribute ``events_role``.

    The incremental projection reproduces a chain only when every processor declares a role it
    knows; a processor without one sends every request through the full chain. A subclass that
    changes what its parent does to the events must declare its own role (or none).
    """

    #: Reads and writes other parts of the draft only (system text, user prefix, stats).
    UNTOUCHED = "untouched"
    #: Fills ``draft.events`` from the ledger (the runtime's history processor).
    HISTORY = "history"
    #: Injects a summary and keeps only the events after its boundary; implements :class:`SummaryStep`.
    SUMMARY = "summary"
    #: Makes sure the current user input is among the events (the runtime's current-input processor).
    CURRENT_INPUT = "current_input"
    #: Replaces tool payloads with shorter copies, one event at a time; implements :class:`CompactionStep`.
    COMPACTION = "compaction"


@runtime_checkable
class RequestProcessor(Protocol):
    """One step of the request chain: changes the draft for the invocation's next model call."""

    name: str

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        """Add to or change ``draft`` (never the ledger's events: copy an event to change it)."""
        ...


class SummaryStep(Protocol):
    """The summary step as the incremental projection mirrors it (``events_role = SUMMARY``).

    Its ``process`` must equal: ``pick`` the summary; keep ``carried_over(covered, kept) + kept``,
    where ``kept`` are the history events after the summary's boundary and ``covered`` the ones
    at or before it; then ``inject`` the summary text.
    """

    name: str
    events_role: ClassVar[EventsRole]

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        """Inject the summary and cut the history at its boundary."""
        ...

    def pick(self, session: Session, filter_key: str) -> Summary | None:
        """The summary a request under ``filter_key`` shows (``None``: the history is not cut)."""
        ...

    def carried_over(self, inv: Invocation, covered: list[Event], kept: list[Event]) -> list[Event]:
        """Covered events (or copies) that stay in the request in front of ``kept``."""
        ...

    def inject(self, draft: RequestDraft, summary: Summary) -> None:
        """Put the summary text into the draft (the events are decided separately)."""
        ...


def summary_step(processors: Sequence[RequestProcessor]) -> SummaryStep | None:
    """The chain's summary step (the processor declaring ``EventsRole.SUMMARY``), if any."""
    for p in processors:
        if getattr(p, "events_role", None) is EventsRole.SUMMARY:
            return p  # type: ignore[return-value]  # the declared role promises the SummaryStep methods
    return None


class CompactionStep(Protocol):
    """The compaction step as the incremental projection mirrors it (``events_role = COMPACTION``).

    Its ``process`` must equal: find the protected units (:func:`agentlab.core.rules.protected_units`
    with ``keep_recent_requests``), replace each tool result ``e`` by ``decide(e, ...)`` when that
    is not ``None`` (``historical``: its unit is not protected), and, when anything was replaced,
    append :meth:`stat` of the totals (token counts by :func:`agentlab.model.tokens.event_tokens`)
    to the draft's stats. ``decide`` must be a pure function of the event, the flags and
    :meth:`signature`, so its result can be kept per event.
    """

    name: str
    events_role: ClassVar[EventsRole]

    @property
    def keep_recent_requests(self) -> int:
        """Most recent completed request units kept whole, besides the current one."""
        ...

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        """Compact ``draft.events`` (copy-on-write) and record the stats."""
        ...

    def signature(self, draft: RequestDraft) -> tuple[Any, ...]:
        """What ``compact_event`` depends on besides the event and the flags (e.g. the policy, the tools offered)."""
        ...

    def decide(self, e: Event, *, historical: bool, has_current: bool,
               draft_signature: tuple[Any, ...]) -> tuple[Event, str] | None:
        """The replacement of one event and the pass that made it (``pass0``, ``pass1`` or ``pass2``), or ``None``."""
        ...

    def stat(self, results: int, tokens_before: int, tokens_after: int, passes: dict[str, int]) -> dict[str, Any]:
        """The stats record of one compaction (``passes``: replacements per pass name, for the passes that made any)."""
        ...


async def run_processors(inv: Invocation, processors: list[RequestProcessor], draft: RequestDraft) -> RequestDraft:
    """Run the chain in order over ``draft`` (the full projection, without the cache)."""
    for processor in processors:
        await processor.process(inv, draft)
    return draft


# ------------------------------------------------------------------------------- extension points


@dataclass(frozen=True)
class Stage:
    """A place in the request chain; processors run in ascending ``order`` (ties: as contributed).

    The built-in stages leave gaps, so a new mechanism can declare a stage between two of them
    without editing anything else.
    """

    name: str
    order: int


#: The agent's instruction (system text).
INSTRUCTION = Stage("instruction", 100)
#: Stored memories of the user (system text).
PRELOAD_MEMORY = Stage("preload_memory", 200)
#: The session's history events visible under the filter key.
HISTORY = Stage("history", 300)
#: The rolling summary; the history is cut at its boundary.
INJECT_SUMMARY = Stage("inject_summary", 400)
#: Related events of the user's other sessions (system text or user prefix).
PRELOAD_RECALL = Stage("preload_recall", 500)
#: Guidance on the tools in the request (system text).
TOOL_GUIDE = Stage("tool_guide", 600)
#: The current user input, should a summary have covered it.
CURRENT_INPUT = Stage("current_input", 700)
#: Shrinking tool payloads over the finished event list.
COMPACT = Stage("compact", 800)

#: The built-in stages, in chain order.
STAGES: tuple[Stage, ...] = (INSTRUCTION, PRELOAD_MEMORY, HISTORY, INJECT_SUMMARY, PRELOAD_RECALL, TOOL_GUIDE,
                             CURRENT_INPUT, COMPACT)


@dataclass(frozen=True)
class StagedProcessor:
    """A processor a mechanism contributes, and the stage it runs at."""

    stage: Stage
    processor: RequestProcessor


def order_by_stage(contributions: Sequence[StagedProcessor]) -> list[RequestProcessor]:
    """The processors in stage order; within a stage, in the order they were contributed."""
    return [c.processor for c in sorted(contributions, key=lambda c: c.stage.order)]


@dataclass
class PendingRequest:
    """A finished request about to go to the model, as :meth:`ContextMechanism.before_request` sees it."""

    request: ModelRequest
    draft: RequestDraft
    #: Whether the request may offer tools (``False`` once the tool-call budget is spent).
    allow_tools: bool
    #: Runs the request chain again (after a mechanism changed durable state, e.g. a summary advanced).
    rebuild: Callable[[], Awaitable[RequestDraft]]

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of :attr:`request` (see :meth:`RequestDraft.prompt_tokens`)."""
        return self.draft.prompt_tokens(self.request)


class ContextMechanism:
    """The one seam between the runtime and a context mechanism (summary, compaction, recall, memory ...).

    A mechanism contributes to every request and takes part in the run's lifecycle; the runtime
    (Runner, LLMAgent, the projection cache) and :func:`agentlab.core.project` only call these
    methods and never name a concrete mechanism. Every default does nothing, so a mechanism
    overrides what it needs:

    * :meth:`for_model` — the mechanism an agent with this model runs (a policy that needs a
      model, like the summary, returns a mechanism bound to it; most return ``self``);
    * :meth:`request_processors` and :meth:`request_tools` — what each request gets: processors
      at declared stages (ordered with the runtime's own) and tools (after the agent's);
    * :meth:`open` — the Runner (or ``project``) opens: register or look up services in the
      typed registry (the summary mechanism registers its worker there);
    * :meth:`before_request` — the finished request, before the model sees it: may replace it
      (the 70 % pressure path summarises synchronously and rebuilds);
    * :meth:`on_event_appended` — the Runner persisted an event (the summary worker enqueues);
    * :meth:`on_run_completed` — a run completed (the memory worker extracts);
    * :meth:`close` — the Runner closes (services registered as owned are closed by the registry).

    Per-Runner state belongs in the registry (``inv.services``), not on the mechanism: one
    mechanism object may serve several Runners.
    """

    def for_model(self, model: Model) -> ContextMechanism:
        """The mechanism to run for an agent whose (summary) model is ``model``; ``self`` by default."""
        return self

    def request_processors(self) -> Sequence[StagedProcessor]:
        """The processors this mechanism adds to the chain, each at its stage."""
        return ()

    def request_tools(self, inv: Invocation) -> Sequence[Tool]:
        """The tools this mechanism offers in ``inv``'s requests."""
        return ()

    def open(self, services: ServiceRegistry) -> None:
        """Register (or look up) the services this mechanism needs; called once per Runner."""
        return None

    async def before_request(self, inv: Invocation, pending: PendingRequest) -> tuple[ModelRequest, RequestDraft] | None:
        """A replacement for the finished request (e.g. rebuilt after a summary), or ``None`` to keep it."""
        return None

    async def on_event_appended(self, inv: Invocation, event: Event) -> None:
        """The Runner appended ``event`` to the session's ledger."""
        return None

    async def on_run_completed(self, inv: Invocation) -> None:
        """A run finished with status ``completed``."""
        return None

    async def close(self) -> None:
        """The Runner is closing: release what the mechanism holds itself."""
        return None

    def describe(self) -> str:
        """A short name for reports and logs (the class name by default)."""
        return type(self).__name__


class PolicyMechanism(ContextMechanism):
    """A mechanism made of a policy (plain, frozen settings) and the model it works with.

    :meth:`for_model` binds an unbound one (``model=None``) to the agent's model; a subclass adds
    the request contributions and the lifecycle hooks.
    """

    def __init__(self, policy: Any, model: Model | None = None) -> None:
        self.policy = policy
        #: The model the hooks use; ``None`` until bound (request contributions only).
        self.model = model

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.policy!r}, model={getattr(self.model, 'info', self.model)!r})"

    def for_model(self, model: Model) -> ContextMechanism:
        """Bound to ``model`` when it has no model of its own yet."""
        return self if self.model is not None else type(self)(self.policy, model)


#: Policy type -> what makes its mechanism (filled by each mechanism package with :func:`register_mechanism`).
_MECHANISM_FACTORIES: dict[type, Callable[[Any, Model | None], ContextMechanism]] = {}


def register_mechanism(policy_type: type, factory: Callable[[Any, Model | None], ContextMechanism]) -> None:
    """Declare how a policy (plain settings) becomes the mechanism an agent runs.

    ``factory(policy, model)`` gets the model the mechanism works with (``None`` outside an agent,
    in :func:`agentlab.core.project` without a model). A mechanism package registers its policy
    when it is imported, so the policy module never imports its mechanism (no import cycle), and
    the runtime never names either.
    """
    _MECHANISM_FACTORIES[policy_type] = factory


def as_mechanism(item: Any, model: Model | None) -> ContextMechanism:
    """``item`` as the mechanism an agent with ``model`` runs.

    A :class:`ContextMechanism` is bound with :meth:`~ContextMechanism.for_model` (when there is a
    model); a registered policy goes through its factory (:func:`register_mechanism`).
    """
    if isinstance(item, ContextMechanism):
        return item.for_model(model) if model is not None else item
    for kind in type(item).__mro__:
        factory = _MECHANISM_FACTORIES.get(kind)
        if factory is not None:
            return factory(item, model)
    raise TypeError(f"not a context mechanism: {item!r} (subclass agentlab.core.ContextMechanism, or register "
                    "its policy type with agentlab.core.register_mechanism)")


__all__ = [
    "COMPACT",
    "CompactionStep",
    "PendingRequest",
    "PolicyMechanism",
    "as_mechanism",
    "register_mechanism",
    "CURRENT_INPUT",
    "HISTORY",
    "INJECT_SUMMARY",
    "INSTRUCTION",
    "PRELOAD_MEMORY",
    "PRELOAD_RECALL",
    "STAGES",
    "TOOL_GUIDE",
    "ContextMechanism",
    "EventsRole",
    "RenderedHistory",
    "RequestDraft",
    "RequestProcessor",
    "Stage",
    "StagedProcessor",
    "SummaryStep",
    "branch_key",
    "events_to_messages",
    "in_filter",
    "is_history_event",
    "visible_keys",
    "order_by_stage",
    "render_history_message",
    "round_start",
    "run_processors",
    "summary_step",
]
