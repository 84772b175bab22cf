"""LangChain v1 ``ContextEditingMiddleware`` with ``ClearToolUsesEdit``: clear old tool results.

Source: PyPI ``langchain==1.5.2``, ``langchain/agents/middleware/context_editing.py``
(``libs/langchain_v1`` in ``langchain-ai/langchain``); token counter ``count_tokens_approximately``
from ``langchain-core==1.8.3`` ``langchain_core/messages/utils.py``.

What it does (request-side: the middleware edits a deep copy of the messages for the call):
when the approximate token count of the messages is *over* ``trigger`` (100,000), every tool
result except the ``keep`` (3) most recent becomes the placeholder ``[cleared]``, oldest first.
A result is skipped when its call cannot be found on the nearest assistant message before it,
or when its tool is excluded. With ``clear_tool_inputs`` the matching call's arguments become
``{}``. With ``clear_at_least`` > 0 clearing stops once that many tokens were reclaimed. Calls
and results are never removed, so pairs stay intact.

Departures from the source, and why:

* LangChain skips a result already marked cleared in its ``response_metadata``; our messages
  have no such metadata and the ledger is never edited, so nothing arrives already cleared
  (each request is edited afresh from the ledger, exactly as the middleware edits a fresh copy of
  the agent state).
* The counter sees the history only, as LangChain's default counter sees ``state["messages"]``
  (the system prompt and the tool schemas are not counted there either).
* ``token_count_method="model"`` (the chat model's own counter) is not offered.
* ``trigger_fraction`` is a variant, not in the source: when set, the trigger is that fraction
  of the run's context window instead of the absolute 100,000.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentlab.core.mechanism import COMPACT, RequestDraft, Stage
from agentlab.events import Message, ToolCall
from agentlab.policies._base import Outcome, PeerMechanism, count_tokens_approximately
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: LangChain's ``DEFAULT_TOOL_PLACEHOLDER`` (context_editing.py), used verbatim.
PLACEHOLDER = "[cleared]"


@dataclass(frozen=True)
class LangChainClearToolUsesPolicy(PolicyJSON):
    """``ClearToolUsesEdit``'s knobs; defaults are langchain 1.5.2's."""

    #: Act when the approximate token count is over this many tokens (source: 100,000).
    trigger: int = 100_000
    #: Variant: the trigger as this fraction of the run's context window instead (source: none).
    trigger_fraction: float | None = None
    #: Stop once this many tokens were reclaimed; 0 = clear every candidate (source: 0).
    clear_at_least: int = 0
    #: Most recent tool results never cleared (source: 3).
    keep: int = 3
    #: Also replace the cleared call's arguments with ``{}`` (source: False).
    clear_tool_inputs: bool = False
    #: Tools whose results are never cleared (source: none).
    exclude_tools: tuple[str, ...] = ()
    #: Text a cleared result is replaced with (source: ``[cleared]``).
    placeholder: str = PLACEHOLDER

    def __post_init__(self) -> None:
        if self.keep < 0 or self.clear_at_least < 0 or self.trigger < 0:
            raise ValueError("LangChainClearToolUsesPolicy: trigger, keep and clear_at_least must be >= 0")
        if self.trigger_fraction is not None and not 0 < self.trigger_fraction <= 1:
            raise ValueError(f"LangChainClearToolUsesPolicy.trigger_fraction must be in (0, 1], "
                             f"got {self.trigger_fraction}")
        object.__setattr__(self, "exclude_tools", tuple(self.exclude_tools))

    def trigger_tokens(self, context_window: int) -> int:
        """The trigger in tokens: the absolute one, or the fraction of ``context_window``."""
        if self.trigger_fraction is not None and context_window > 0:
            return int(context_window * self.trigger_fraction)
        return self.trigger


TokenCounter = Callable[[Sequence[Message]], int]


def _cleared_inputs(message: Message, call_id: str | None) -> Message:
    calls = tuple(ToolCall(c.id, c.name, "{}") if c.id == call_id else c for c in message.tool_calls)
    return Message(role="assistant", content=message.content, tool_calls=calls, name=message.name)


def clear_tool_uses(messages: Sequence[Message], policy: LangChainClearToolUsesPolicy, *,
                    trigger: int | None = None,
                    count_tokens: TokenCounter = count_tokens_approximately) -> Outcome:
    """``ClearToolUsesEdit.apply`` over ``messages`` (the pure core; ``trigger`` overrides the policy's)."""
    limit = policy.trigger if trigger is None else trigger
    out = list(messages)
    total = count_tokens(out)
    if total <= limit:
        return Outcome.unchanged(messages)
    candidates = [i for i, m in enumerate(out) if m.role == "tool"]
    if policy.keep >= len(candidates):
        candidates = []
    elif policy.keep:
        candidates = candidates[:-policy.keep]
    excluded = set(policy.exclude_tools)
    for i in candidates:
        result = out[i]
        # The nearest assistant message before the result, whatever it holds (as LangChain looks).
        owner = next((j for j in range(i - 1, -1, -1) if out[j].role == "assistant"), None)
        if owner is None:
            continue
        call = next((c for c in out[owner].tool_calls if c.id == result.tool_call_id), None)
        if call is None:
            continue
        if (result.name or call.name) in excluded:
            continue
        out[i] = result.with_content(policy.placeholder)
        if policy.clear_tool_inputs:
            out[owner] = _cleared_inputs(out[owner], result.tool_call_id)
        if policy.clear_at_least > 0 and max(0, total - count_tokens(out)) >= policy.clear_at_least:
            break
    return Outcome(tuple(out), tuple(range(len(out))), fired=True)


class LangChainClearToolUses(PeerMechanism):
    """LangChain's ``ClearToolUsesEdit`` at the compaction stage (stateless: edits each request afresh)."""

    policy_name: ClassVar[str] = "langchain_clear_tool_uses"
    policy_class: ClassVar[type[Any]] = LangChainClearToolUsesPolicy
    source: ClassVar[str] = "langchain==1.5.2 agents/middleware/context_editing.py"
    trigger_fraction_field: ClassVar[str] = "trigger_fraction"
    stage: ClassVar[Stage] = COMPACT
    policy: LangChainClearToolUsesPolicy

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """Clear old tool results when the history is over the trigger."""
        return clear_tool_uses(messages, self.policy, trigger=self.policy.trigger_tokens(inv.context_window))


__all__ = ["PLACEHOLDER", "LangChainClearToolUses", "LangChainClearToolUsesPolicy", "clear_tool_uses"]
