"""inspect_ai ``CompactionTrim``: keep the prefix and the last share of the conversation.

Source: PyPI ``inspect-ai==0.3.285`` (``UKGovernmentBEIS/inspect_ai``),
``src/inspect_ai/model/_compaction/trim.py`` and ``model/_trim.py`` (``trim_messages``);
orchestration as in :mod:`agentlab.policies._inspect`.

What it does when the request is over ``threshold`` (0.9 of the window): system messages and
the input prefix (up to the first user message) stay; of the rest, the last ``preserve`` (0.8)
share is kept — ``conversation[int(n × (1 − preserve)):]``. A tool result is kept only if the
latest assistant message before it (with no user message between) called it; calls left without
a result are removed from their assistant message; a trailing assistant message is dropped.
Memory tool calls lose their saved text (``memory=True``).

Departures: only the shared ones in :mod:`agentlab.policies._inspect` (citations do not occur).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentlab.events import Message
from agentlab.policies._base import Outcome
from agentlab.policies._inspect import InspectMechanism, clear_memory_content, partition
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation


@dataclass(frozen=True)
class InspectTrimPolicy(PolicyJSON):
    """``CompactionTrim``'s knobs; defaults are inspect-ai 0.3.285's."""

    #: Tokens (an int or a number > 1) or share of the context window (<= 1) that triggers (0.9).
    threshold: int | float = 0.9
    #: Clear the saved text of memory tool calls (source: True).
    memory: bool = True
    #: Share of the conversation (after the prefix) kept, from the end (source: 0.8).
    preserve: float = 0.8

    def __post_init__(self) -> None:
        if not 0 <= self.preserve <= 1:
            raise ValueError(f"InspectTrimPolicy.preserve must be in [0, 1], got {self.preserve}")
        if self.threshold <= 0:
            raise ValueError("InspectTrimPolicy.threshold must be > 0")


def trim_messages(messages: Sequence[Message], preserve: float) -> Outcome:
    """The pure core: inspect's ``trim_messages``."""
    parts = partition(messages)
    conversation = parts.conversation
    kept_idx = conversation[int(len(conversation) * (1 - preserve)):]
    picked: list[int] = []
    active: set[str] = set()
    for i in kept_idx:
        m = messages[i]
        if m.role == "assistant":
            active = {c.id for c in m.tool_calls}
            picked.append(i)
        elif m.role == "tool" and m.tool_call_id in active:
            picked.append(i)
        elif m.role == "user":
            active = set()
            picked.append(i)
    answered = {messages[i].tool_call_id for i in picked if messages[i].role == "tool"}
    shown: list[Message] = []
    for i in picked:
        m = messages[i]
        if m.role == "assistant" and m.tool_calls and any(c.id not in answered for c in m.tool_calls):
            m = Message(role="assistant", content=m.content, name=m.name,
                        tool_calls=tuple(c for c in m.tool_calls if c.id in answered))
        shown.append(m)
    if shown and shown[-1].role == "assistant":
        shown.pop()
        picked.pop()
    head = parts.system + parts.input
    return Outcome(tuple([messages[i] for i in head] + shown), tuple(head + picked), fired=True)


def compaction_trim(messages: Sequence[Message], policy: InspectTrimPolicy) -> Outcome:
    """``CompactionTrim.compact``: the trim, then memory clearing."""
    trimmed = trim_messages(messages, policy.preserve)
    if not policy.memory:
        return trimmed
    return Outcome(tuple(clear_memory_content(list(trimmed.messages))), trimmed.sources, fired=True)


class InspectTrim(InspectMechanism):
    """inspect's ``CompactionTrim`` behind its ``compaction()`` handler, at the compaction stage."""

    policy_name: ClassVar[str] = "inspect_trim"
    policy_class: ClassVar[type[Any]] = InspectTrimPolicy
    source: ClassVar[str] = "inspect-ai==0.3.285 model/_compaction/trim.py"
    policy: InspectTrimPolicy

    async def strategy(self, inv: Invocation, messages: list[Message]) -> Outcome:
        """One ``compact`` pass."""
        return compaction_trim(messages, self.policy)


__all__ = ["InspectTrim", "InspectTrimPolicy", "compaction_trim", "trim_messages"]
