"""What every peer policy shares: the outcome record, the pairing guard, the mechanism plumbing.

A peer policy is written in three layers:

* a **pure core** — plain :class:`~agentlab.events.Message` lists in, an :class:`Outcome` out
  (the messages to send and, for each, the input it came from). This is what the differential
  tests in ``tests/policies/`` drive side by side with the peer's own code;
* a frozen, typed **policy** dataclass (:class:`~agentlab.policy_json.PolicyJSON`) with the peer's
  defaults;
* a :class:`PeerMechanism` that runs the core over ``draft.events`` at its stage.

The mechanism never touches the ledger: it hands the core the messages of ``draft.events`` and
builds a new event list from the outcome — the same event where a message is shown unchanged,
a copy where the core changed it, a new event (never appended to the session) where the core
made one (a summary). A peer that *mutates its own history* (LangChain's summarisation, inspect's
compacted view, Letta's in-context list, Codex's replacement history) is reproduced by carrying
the previous projection over to the next request (:attr:`PeerMechanism.carries_over`), which is
in-process state, not a ledger change.

After the core, :func:`pairing_guard` drops any tool result whose call is not shown and any call
whose result is not shown — where a peer would send such an orphan itself (LangMem #126), the
request here leaves it out, and the stats record counts it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from agentlab.core.mechanism import (
    COMPACT,
    CURRENT_INPUT,
    ContextMechanism,
    RequestDraft,
    Stage,
    StagedProcessor,
)
from agentlab.events import Event, Message
from agentlab.model import tokens
from agentlab.model.base import ModelRequest

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: Where the summarising peer policies run: after the runtime has put the current user input among
#: the events (``CURRENT_INPUT``), so that a peer that summarises that input away (ADK, LangChain)
#: is not undone by it, and before the built-in compaction (``COMPACT``).
PEER_SUMMARY = Stage("peer_summary", (CURRENT_INPUT.order + COMPACT.order) // 2)

#: Turns the summariser's input (the peer's prompt messages) into the summary text.
Summarizer = Callable[[list[Message]], Awaitable[str]]


@dataclass(frozen=True)
class Outcome:
    """What a policy's core decided for one request.

    ``messages[j]`` came from ``inputs[sources[j]]`` (changed or not), or was made by the policy
    when ``sources[j]`` is ``None``. ``fired`` says whether the policy's trigger was met.
    """

    messages: tuple[Message, ...]
    sources: tuple[int | None, ...]
    fired: bool = False

    def __post_init__(self) -> None:
        if len(self.messages) != len(self.sources):
            raise ValueError("Outcome.messages and Outcome.sources must have the same length")

    @staticmethod
    def unchanged(inputs: Sequence[Message]) -> Outcome:
        """Every input shown as it is (the trigger was not met)."""
        return Outcome(tuple(inputs), tuple(range(len(inputs))), fired=False)

    def record(self, inputs: Sequence[Message]) -> Record:
        """Which inputs are kept, replaced (shown changed) and removed, and the texts added."""
        kept: list[int] = []
        replaced: list[int] = []
        shown: set[int] = set()
        added: list[str] = []
        for message, source in zip(self.messages, self.sources, strict=True):
            if source is None:
                added.append(message.content)
                continue
            shown.add(source)
            (kept if message == inputs[source] else replaced).append(source)
        removed = [i for i in range(len(inputs)) if i not in shown]
        return Record(tuple(kept), tuple(replaced), tuple(removed), tuple(added))


@dataclass(frozen=True)
class Record:
    """The kept / replaced / removed input indices of an :class:`Outcome` and the added texts."""

    kept: tuple[int, ...]
    replaced: tuple[int, ...]
    removed: tuple[int, ...]
    added: tuple[str, ...]


def pairing_guard(messages: Sequence[Message]) -> tuple[list[int], int]:
    """Indices of ``messages`` to send with every tool call and its result together; orphans dropped.

    A result whose call is not among the messages is dropped, and so is a call whose result is
    not (an assistant message keeps its text and its answered calls). Returns (indices kept,
    number of calls and results dropped); an assistant message that lost some calls is reported
    by :func:`strip_unanswered_calls`.
    """
    called = {c.id for m in messages if m.role == "assistant" for c in m.tool_calls}
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    keep: list[int] = []
    dropped = 0
    for i, m in enumerate(messages):
        if m.role == "tool" and m.tool_call_id not in called:
            dropped += 1
            continue
        if m.role == "assistant" and m.tool_calls:
            missing = sum(1 for c in m.tool_calls if c.id not in answered)
            dropped += missing
            if missing == len(m.tool_calls) and not m.content:
                continue
        keep.append(i)
    return keep, dropped


def strip_unanswered_calls(message: Message, answered: set[str | None]) -> Message:
    """``message`` without the tool calls whose results are not shown (itself when none is missing)."""
    if message.role != "assistant" or all(c.id in answered for c in message.tool_calls):
        return message
    return Message(role="assistant", content=message.content,
                   tool_calls=tuple(c for c in message.tool_calls if c.id in answered))


# ----------------------------------------------------------------------- a peer's token counter


def langchain_tool_calls_repr(message: Message) -> str:
    """``repr(AIMessage.tool_calls)`` as LangChain builds it from our calls (dict key order included).

    LangChain's approximate counter adds the length of this string for an assistant message with
    tool calls; arguments that are not a JSON object count as LangChain would parse them (``{}``).
    """
    calls = []
    for c in message.tool_calls:
        try:
            args = json.loads(c.arguments or "{}")
        except json.JSONDecodeError:
            args = {}
        calls.append({"name": c.name, "args": args if isinstance(args, dict) else {}, "id": c.id,
                      "type": "tool_call"})
    return repr(calls)


def count_tokens_approximately(messages: Sequence[Message], *, chars_per_token: float = 4.0,
                               extra_tokens_per_message: float = 3.0, count_name: bool = True) -> int:
    """LangChain's ``count_tokens_approximately`` (langchain-core 1.8.3) over our messages.

    Per message: ceil(characters / ``chars_per_token``) + ``extra_tokens_per_message``, where
    the characters are the content, the role name, the tool name (``count_name``), the tool
    call id of a result and ``repr`` of an assistant message's tool calls; the total is rounded
    up once more. Usage-metadata scaling and image blocks are not reproduced (our messages carry
    neither). Checked for equality with LangChain's own function in tests/policies/.
    """
    total = 0.0
    for m in messages:
        chars = len(m.content)
        if m.role == "assistant" and m.tool_calls:
            chars += len(langchain_tool_calls_repr(m))
        if m.role == "tool":
            chars += len(m.tool_call_id or "")
        chars += len(m.role)
        if m.name and count_name:
            chars += len(m.name)
        total += math.ceil(chars / chars_per_token)
        total += extra_tokens_per_message
    return math.ceil(total)


# ---------------------------------------------------------------------------------- mechanism


def model_summarizer(model: Any) -> Summarizer:
    """A :data:`Summarizer` that sends the prompt messages to ``model`` and returns its text."""
    async def summarize(prompt: list[Message]) -> str:
        response = await model.generate(ModelRequest(messages=list(prompt), purpose="summary"))
        return response.message.content
    return summarize


#: Origin of the leading system message a core sees when :attr:`PeerMechanism.sees_system` is set.
SYSTEM_ORIGIN = "system"


@dataclass
class _Carry:
    """The previous projection of one session view, carried into the next request."""

    items: list[tuple[Message, Event | None]]
    last_event_id: str


@dataclass
class PeerProcessor:
    """Runs a :class:`PeerMechanism`'s core over ``draft.events`` (copy-on-write)."""

    mechanism: PeerMechanism
    name: str = field(default="peer_policy")

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        """Replace ``draft.events`` with the policy's projection and leave a stats record."""
        await self.mechanism.project_draft(inv, draft)


class PeerMechanism(ContextMechanism):
    """A peer policy as a context mechanism: its core runs over the request's events at :attr:`stage`.

    Subclasses set the peer's registry facts — ``policy_name``, ``policy_class``, ``source``,
    (for a peer that calls a model) ``needs_model`` and (for a peer with a fraction variant of an
    absolute trigger) ``trigger_fraction_field``, which :data:`agentlab.policies.POLICIES` and
    the benchmark arms read from here — and ``stage``, ``sees_system`` and ``carries_over``, and
    implement :meth:`decide`. ``summarizer`` replaces the model call of summarising policies
    (a scripted reply in tests); by default the agent's own model writes the summary.
    """

    #: The registry name (also the stats record's ``policy``).
    policy_name: ClassVar[str] = "peer"
    #: The policy dataclass; its defaults (the source's) are :meth:`default_policy`.
    policy_class: ClassVar[type[Any]]
    #: The pinned source the core reproduces (package==version or repo@commit, and the file).
    source: ClassVar[str] = ""
    #: What the peer calls a model for (the summary it writes); ``""``: it calls none. The
    #: benchmark arm's ``needs_model``, so the LLM-free ``retention`` command skips the arm with it.
    needs_model: ClassVar[str] = ""
    #: The policy field (a variant, not in the source) that puts the source's absolute token trigger
    #: at that share of the run's context window instead; ``""``: the peer has none. The LLM-free
    #: ``retention`` command sets it, so that the peer acts inside the retention budget.
    trigger_fraction_field: ClassVar[str] = ""
    #: Where in the request chain the core runs.
    stage: ClassVar[Stage] = COMPACT
    #: Whether the core sees the request's system text as a leading system message (peers that
    #: count or keep the system prompt themselves).
    sees_system: ClassVar[bool] = False
    #: Whether the peer rewrites its own history, so the previous projection carries over.
    carries_over: ClassVar[bool] = False

    def __init__(self, policy: Any = None, *, summarizer: Summarizer | None = None) -> None:
        self.policy = policy if policy is not None else self.default_policy()
        self.summarizer = summarizer
        self._carry: dict[tuple[str, str], _Carry] = {}

    @classmethod
    def default_policy(cls) -> Any:
        """The policy with the source's defaults: :attr:`policy_class` with no field set."""
        return cls.policy_class()

    def request_processors(self) -> Sequence[StagedProcessor]:
        """The one processor that runs the core."""
        return [StagedProcessor(self.stage, PeerProcessor(self, name=self.policy_name))]

    def summarizer_for(self, inv: Invocation) -> Summarizer:
        """The summariser to use in ``inv``: the one given, else the agent's model."""
        if self.summarizer is not None:
            return self.summarizer
        return model_summarizer(inv.agent.model)  # type: ignore[attr-defined]  # an LLMAgent has a model

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """The core's outcome for this request's messages (``draft``: for its tools and settings)."""
        raise NotImplementedError

    def key(self, inv: Invocation) -> tuple[str, str]:
        """The carried-over state's key: one session view."""
        return (inv.session.id, inv.filter_key)

    async def project_draft(self, inv: Invocation, draft: RequestDraft) -> None:
        """Run the core and turn its outcome back into ``draft.events`` (and system text)."""
        events = [e for e in draft.events if e.message is not None and e.message.role != "system"]
        items: list[tuple[Message, Event | None]] = []
        carry = self._carry.get(self.key(inv)) if self.carries_over else None
        start = 0
        if carry is not None:
            ids = [e.id for e in events]
            if carry.last_event_id in ids:
                items = list(carry.items)
                start = ids.index(carry.last_event_id) + 1
        items += [(e.message, e) for e in events[start:] if e.message is not None]
        system_text = "\n\n".join(p for p in draft.system_parts if p)
        inputs = [m for m, _ in items]
        if self.sees_system and system_text:
            inputs = [Message.system(system_text), *inputs]
            origins: list[Event | str | None] = [SYSTEM_ORIGIN, *(o for _, o in items)]
        else:
            origins = [o for _, o in items]
        outcome = await self.decide(inv, inputs, draft)
        record = outcome.record(inputs)
        shown = [(m, origins[s] if s is not None else None) for m, s in zip(outcome.messages, outcome.sources,
                                                                          strict=True)]
        # System messages never travel as events: the original one is the draft's own system
        # text, any other (a summary some peers send as a system message) joins it.
        extra_system = [m.content for m, o in shown if m.role == "system" and o != SYSTEM_ORIGIN]
        history = [(m, o) for m, o in shown if m.role != "system"]
        keep, orphans = pairing_guard([m for m, _ in history])
        answered = {history[i][0].tool_call_id for i in keep if history[i][0].role == "tool"}
        history = [(strip_unanswered_calls(history[i][0], answered), history[i][1]) for i in keep]
        if self.carries_over and events:
            self._carry[self.key(inv)] = _Carry([(m, o if isinstance(o, Event) else None) for m, o in history],
                                                events[-1].id)
        new_events: list[Event] = []
        for message, origin in history:
            if isinstance(origin, Event):
                if origin.message is message or origin.message == message:
                    new_events.append(origin)
                else:
                    new_events.append(origin.copy_with(choices=[message], token_count=None,
                                                       metadata={**origin.metadata, "policy": self.policy_name}))
            else:
                new_events.append(Event(author=f"policy:{self.policy_name}", choices=[message],
                                        invocation_id=inv.id, request_id=inv.request_id,
                                        metadata={"policy": self.policy_name, "made_by_policy": True}))
        draft.events = new_events
        draft.system_parts = [*draft.system_parts, *extra_system]
        draft.rendered_history = None
        if record.replaced or record.removed or record.added or orphans or extra_system:
            # Only when the request changed, like the built-in compaction; the field names the
            # benchmark tables read (results_compacted, tokens_before/after) are filled in.
            draft.stats.append({
                "kind": "peer_policy",
                "policy": self.policy_name,
                "fired": outcome.fired,
                "results_compacted": len(record.replaced) + len(record.removed),
                "tokens_before": tokens.count_messages(inputs),
                "tokens_after": tokens.count_messages([m for m, _ in shown]),
                "kept": len(record.kept),
                "replaced": len(record.replaced),
                "removed": len(record.removed),
                "added": len(record.added),
                "orphans_dropped": orphans,
            })

__all__ = [
    "PEER_SUMMARY",
    "Outcome",
    "PeerMechanism",
    "PeerProcessor",
    "Record",
    "Summarizer",
    "count_tokens_approximately",
    "model_summarizer",
    "pairing_guard",
]
