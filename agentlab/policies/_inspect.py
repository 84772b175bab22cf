"""What inspect_ai's three compaction strategies share: partitioning, memory clearing, the trigger.

Source: PyPI ``inspect-ai==0.3.285`` (``UKGovernmentBEIS/inspect_ai``),
``src/inspect_ai/model/_trim.py`` (``partition_messages``), ``model/_compaction/memory.py``
(``clear_memory_content``) and ``model/_compaction/_compaction.py`` (``compaction()``: the
threshold, the re-application loop, the incremental compacted view).

The orchestrator is reproduced by :class:`InspectMechanism`: the compacted view carries over
between requests (inspect's ``state.compacted_input`` plus the messages added since); when its
token count is over the threshold the strategy runs, and runs again up to 3 more times while it
still is over and still shrinks. ``tests/policies/test_inspect_handler.py`` checks this against
inspect's own handler at every model call of growing conversations (both sides counting tokens
with agentlab's counter).

Departures shared by the three strategies, and why:

* Tokens are counted with agentlab's tokeniser (:func:`agentlab.model.tokens.count_messages`
  over the request's system text, history and tools), not the provider's ``count_tokens``; the
  provider-reported usage baseline is not used.
* A threshold that is a fraction uses the run's context window; inspect looks the window up in
  its model database (both fall back to 128,000 when it is unknown).
* When the strategy cannot get under the threshold inspect raises ``RuntimeError("Compaction
  insufficient …")``; here the compacted request is sent and the stats record says
  ``insufficient``.
* The memory warning message (only when a tool named ``memory`` is offered) and
  ``collapse_consecutive_messages_for_api`` (merging consecutive user messages for some
  providers) are not reproduced. ``clear_memory_content`` is.
* inspect marks its summary message with ``metadata={"summary": True}``; our messages carry no
  metadata, so a summary message is recognised by its fixed opening line
  (:data:`SUMMARY_HEADER`).
* Reasoning blocks, server-side tool uses and citations do not exist in agentlab messages, so
  the phases that clear them have nothing to act on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from agentlab.core.mechanism import COMPACT, RequestDraft, Stage
from agentlab.events import Message, ToolCall
from agentlab.model import tokens
from agentlab.policies._base import Outcome, PeerMechanism

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: inspect's ``DEFAULT_CONTEXT_WINDOW`` when the model's window is unknown.
DEFAULT_CONTEXT_WINDOW = 128_000
#: Re-applications of a strategy after the first while still over the threshold (``MAX_ITERATIONS``).
MAX_ITERATIONS = 3
#: The memory tool's name and the arguments whose content inspect clears (memory.py), verbatim.
MEMORY_TOOL = "memory"
MEMORY_CONTENT_ARGS = ("file_text", "insert_text", "new_str")
MEMORY_CLEARED = "(content saved to memory)"
#: The first line of inspect's summary message (summary.py), verbatim.
SUMMARY_HEADER = "[CONTEXT COMPACTION SUMMARY]"


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary message of :mod:`agentlab.policies.inspect_summary`."""
    return message.role == "user" and message.content.startswith(SUMMARY_HEADER)


@dataclass
class Partitioned:
    """``partition_messages``: system messages, the input prefix and the conversation (indices)."""

    system: list[int] = field(default_factory=list)
    input: list[int] = field(default_factory=list)
    conversation: list[int] = field(default_factory=list)


def partition(messages: Sequence[Message]) -> Partitioned:
    """System messages; the input (up to the first user message, as no message is marked input); the rest."""
    parts = Partitioned()
    for i, m in enumerate(messages):
        (parts.system if m.role == "system" else parts.conversation).append(i)
    while parts.conversation and not is_summary(messages[parts.conversation[0]]):
        i = parts.conversation.pop(0)
        parts.input.append(i)
        if messages[i].role == "user":
            break
    return parts


def clear_memory_content(messages: list[Message]) -> list[Message]:
    """``clear_memory_content``: the saved text in memory tool calls becomes a short note."""
    out = list(messages)
    for i, m in enumerate(out):
        if m.role != "assistant" or not m.tool_calls:
            continue
        calls: list[ToolCall] = []
        changed = False
        for c in m.tool_calls:
            try:
                args = json.loads(c.arguments or "{}")
            except json.JSONDecodeError:
                args = {}
            if c.name == MEMORY_TOOL and isinstance(args, dict) and any(a in args for a in MEMORY_CONTENT_ARGS):
                new_args = {k: MEMORY_CLEARED if k in MEMORY_CONTENT_ARGS else v for k, v in args.items()}
                calls.append(ToolCall(c.id, c.name, json.dumps(new_args)))
                changed = True
            else:
                calls.append(c)
        if changed:
            out[i] = Message(role="assistant", content=m.content, tool_calls=tuple(calls), name=m.name)
    return out


def resolve_threshold(threshold: float, context_window: int) -> int:
    """``_resolve_threshold``: an int or a number above 1 is tokens; otherwise a share of the window."""
    if isinstance(threshold, int) or threshold > 1.0:
        return int(threshold)
    return int(threshold * (context_window or DEFAULT_CONTEXT_WINDOW))


def request_tokens(messages: Sequence[Message], draft: RequestDraft) -> int:
    """Tokens of the messages plus the request's tool declarations (our stand-in for inspect's count)."""
    return tokens.count_messages(list(messages), [t.declaration() for t in draft.tools] or None)


def compose(first: Outcome, second: Outcome) -> Outcome:
    """``second`` applied to ``first``'s messages, with sources traced back to ``first``'s inputs."""
    sources = tuple(first.sources[s] if s is not None else None for s in second.sources)
    return Outcome(second.messages, sources, fired=first.fired or second.fired)


class InspectMechanism(PeerMechanism):
    """inspect's ``compaction()`` handler around one strategy (see the module docstring)."""

    stage: ClassVar[Stage] = COMPACT
    sees_system: ClassVar[bool] = True
    carries_over: ClassVar[bool] = True
    policy: Any

    async def strategy(self, inv: Invocation, messages: list[Message]) -> Outcome:
        """One application of the strategy (``compact``)."""
        raise NotImplementedError

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """Run the strategy when over the threshold; re-run while still over and shrinking."""
        threshold = resolve_threshold(self.policy.threshold, inv.context_window)
        if request_tokens(messages, draft) <= threshold:
            return Outcome.unchanged(messages)
        outcome = await self.strategy(inv, messages)
        total = request_tokens(outcome.messages, draft)
        for _ in range(MAX_ITERATIONS):
            if total <= threshold:
                break
            previous = total
            outcome = compose(outcome, await self.strategy(inv, list(outcome.messages)))
            total = request_tokens(outcome.messages, draft)
            if total >= previous:
                break
        if total > threshold:
            draft.stats.append({"kind": "peer_policy_note", "policy": self.policy_name, "insufficient": True,
                                "tokens": total, "threshold": threshold})
        return outcome
