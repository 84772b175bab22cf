"""inspect_ai ``CompactionEdit``: clear old tool results (or whole tool uses), keep the last N.

Source: PyPI ``inspect-ai==0.3.285`` (``UKGovernmentBEIS/inspect_ai``; the reference read
@ ``499e6152``), ``src/inspect_ai/model/_compaction/edit.py``; orchestration as in
:mod:`agentlab.policies._inspect`.

What it does when the request is over ``threshold`` (0.9 of the window): every client tool use
— a call with a result after it — is collected oldest first, skipping ``tool_search`` and
``exclude_tools``; all but the ``keep_tool_uses`` (3) most recent are cleared. With
``keep_tool_inputs`` (the default) the result's content becomes ``(Tool result removed)``;
otherwise the result is deleted and the call is removed from its assistant message, which gains
the text ``[Tool call: <name> (parameters and results removed from history)]``. Then memory tool
calls lose their saved text (``memory=True``) and trailing assistant messages are dropped. The
placeholders are inspect's, verbatim.

Departures from the source (besides the shared ones in :mod:`agentlab.policies._inspect`):
``keep_thinking_turns`` is kept as a field for the record, but agentlab messages hold no
reasoning blocks, so phase 1 never changes anything; server-side tool uses (``ContentToolUse``,
``mcp_list_tools``) do not occur.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentlab.events import Message
from agentlab.policies._base import Outcome
from agentlab.policies._inspect import InspectMechanism, clear_memory_content
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: ``TOOL_RESULT_REMOVED`` (edit.py), verbatim.
TOOL_RESULT_REMOVED = "(Tool result removed)"
#: The text that replaces a removed call when ``keep_tool_inputs`` is off (``_replace_tool_call_with_text``).
TOOL_CALL_REMOVED = "[Tool call: {name} (parameters and results removed from history)]"
#: Tools whose uses are never cleared (``TOOL_SEARCH_NAME``; their results carry tool definitions).
TOOL_SEARCH_NAME = "tool_search"


@dataclass(frozen=True)
class InspectEditPolicy(PolicyJSON):
    """``CompactionEdit``'s knobs; defaults are inspect-ai 0.3.285's."""

    #: Tokens (an int or a number > 1) or share of the context window (<= 1) that triggers (0.9).
    threshold: int | float = 0.9
    #: Clear the saved text of memory tool calls (source: True).
    memory: bool = True
    #: Assistant turns whose reasoning is kept (source: 1; agentlab messages carry none).
    keep_thinking_turns: int | None = 1
    #: Most recent tool uses kept (source: 3).
    keep_tool_uses: int = 3
    #: Keep the call and clear only the result (source: True); False removes both.
    keep_tool_inputs: bool = True
    #: Tools whose uses are never cleared (source: none).
    exclude_tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.keep_tool_uses < 0:
            raise ValueError("InspectEditPolicy.keep_tool_uses must be >= 0")
        if self.threshold <= 0:
            raise ValueError("InspectEditPolicy.threshold must be > 0")
        object.__setattr__(self, "exclude_tools", tuple(self.exclude_tools))


def _with_placeholder(message: Message, call_id: str, name: str) -> Message:
    text = TOOL_CALL_REMOVED.format(name=name)
    return Message(role="assistant", content=f"{message.content}\n{text}" if message.content else text,
                   tool_calls=tuple(c for c in message.tool_calls if c.id != call_id), name=message.name)


def compaction_edit(messages: Sequence[Message], policy: InspectEditPolicy) -> Outcome:
    """``CompactionEdit.compact`` over ``messages`` (the pure core, no trigger)."""
    out = list(messages)
    sources: list[int | None] = list(range(len(out)))
    uses: list[tuple[int, str, str, int]] = []  # (assistant index, call id, tool name, result index)
    for i, m in enumerate(out):
        if m.role != "assistant":
            continue
        for c in m.tool_calls:
            if c.name == TOOL_SEARCH_NAME or c.name in policy.exclude_tools:
                continue
            result = next((j for j in range(i + 1, len(out)) if out[j].role == "tool" and out[j].tool_call_id == c.id),
                          None)
            if result is not None:
                uses.append((i, c.id, c.name, result))
    keep = policy.keep_tool_uses
    if keep > 0 and len(uses) > keep:
        to_clear = uses[:-keep]
    elif keep == 0:
        to_clear = uses
    else:
        to_clear = []
    # In reverse, with the same index arithmetic as inspect (a deletion shifts later indices).
    for assistant, call_id, name, result in reversed(to_clear):
        if policy.keep_tool_inputs:
            out[result] = out[result].with_content(TOOL_RESULT_REMOVED)
        else:
            del out[result]
            del sources[result]
            out[assistant] = _with_placeholder(out[assistant], call_id, name)
    if policy.memory:
        out = clear_memory_content(out)
    while out and out[-1].role == "assistant":
        out.pop()
        sources.pop()
    return Outcome(tuple(out), tuple(sources), fired=True)


class InspectEdit(InspectMechanism):
    """inspect's ``CompactionEdit`` behind its ``compaction()`` handler, at the compaction stage."""

    policy_name: ClassVar[str] = "inspect_edit"
    policy_class: ClassVar[type[Any]] = InspectEditPolicy
    source: ClassVar[str] = "inspect-ai==0.3.285 model/_compaction/edit.py"
    policy: InspectEditPolicy

    async def strategy(self, inv: Invocation, messages: list[Message]) -> Outcome:
        """One ``compact`` pass."""
        return compaction_edit(messages, self.policy)


__all__ = ["TOOL_CALL_REMOVED", "TOOL_RESULT_REMOVED", "InspectEdit", "InspectEditPolicy", "compaction_edit"]
