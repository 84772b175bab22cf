"""Anthropic Messages API context editing ``clear_tool_uses_20250919``, applied client-side.

Sources: the "Context editing" documentation (platform.claude.com / docs.claude.com, beta
header ``context-management-2025-06-27``) and ``anthropics/anthropic-sdk-python`` @ ``009b0353``
``types/beta/beta_clear_tool_uses_20250919_edit_param.py`` (field names, types, docstrings).

What it does: when the request's input tokens exceed the trigger (100,000 by default; or, with
``trigger_type="tool_uses"``, when there are more tool uses than ``trigger_value``), the oldest
tool results are replaced by a placeholder, keeping the ``keep`` (3) most recent tool use/result
pairs. Tools in ``exclude_tools`` are never cleared. ``clear_tool_inputs`` (``True``, or a list of
tool names) also clears the matching calls' inputs. ``clear_at_least`` makes the edit all or
nothing: "context will only be modified if at least this many tokens can be removed". Calls and
results are never removed, so pairs stay whole.

Departures from the source, and why:

* It is server-side at Anthropic and cannot be run here, so there is no differential test:
  ``tests/policies/test_anthropic_clear_tool_uses.py`` checks hand-worked examples built from
  the documentation.
* The placeholder text is not documented ("placeholder text to let Claude know the tool result
  was removed"): :data:`PLACEHOLDER` is ours. A cleared input becomes ``{}`` (also unspecified).
* Input tokens are counted with agentlab's tokeniser over the whole request (system text,
  history, tool declarations), not by the API.
* The response's ``applied_edits`` report is the stats record (``cleared_tool_uses`` is the
  ``replaced`` count).
* Whether an excluded tool's uses count towards ``keep`` is not documented; here every use
  counts, and an excluded one is then left alone.
* ``trigger_fraction`` is a variant: the input-token trigger as a share of the context window.
* ``clear_in_batches`` is a variant (ours) for prompt caching. Stateless clearing, as above, clears
  every result but the last ``keep`` on every request over the trigger, so each new tool use moves
  the cleared point and rewrites a message the previous request sent: a cache bust per step
  (clearing "invalidates the cache from the cleared point", which is why the source has
  ``clear_at_least``). With ``clear_in_batches`` and ``clear_at_least`` = B, the oldest results are
  cleared up to the first one at which the tokens reclaimed reach the largest multiple of B
  reachable now; the cleared point then stays where it is until another B tokens can be reclaimed,
  and the requests in between share their prefix with the one before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from agentlab.core.mechanism import COMPACT, RequestDraft, Stage
from agentlab.events import Message, ToolCall
from agentlab.model import tokens
from agentlab.policies._base import Outcome, PeerMechanism
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: Ours: Anthropic does not publish the text it puts in place of a cleared result.
PLACEHOLDER = "[tool result cleared by context editing]"
#: Documented default trigger (input tokens) and number of tool uses kept.
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP = 3


@dataclass(frozen=True)
class AnthropicClearToolUsesPolicy(PolicyJSON):
    """``clear_tool_uses_20250919``'s fields; defaults are the documented ones."""

    #: What the trigger counts: input tokens or tool uses (source: input_tokens).
    trigger_type: Literal["input_tokens", "tool_uses"] = "input_tokens"
    #: The trigger's value (source: 100,000 input tokens).
    trigger_value: int = DEFAULT_TRIGGER_TOKENS
    #: Variant: an input-token trigger as this share of the context window (source: none).
    trigger_fraction: float | None = None
    #: Most recent tool use/result pairs kept (source: 3).
    keep: int = DEFAULT_KEEP
    #: Edit only when at least this many tokens are removed; none = any amount (source: null).
    clear_at_least: int | None = None
    #: Tools whose uses are never cleared (source: none).
    exclude_tools: tuple[str, ...] = ()
    #: Also clear the inputs of cleared calls (source: False).
    clear_tool_inputs: bool = False
    #: Clear inputs only for these tools (the list form of ``clear_tool_inputs``; source: none).
    clear_tool_inputs_for: tuple[str, ...] = ()
    #: Text a cleared result gets (ours; the source does not publish its text).
    placeholder: str = PLACEHOLDER
    #: Variant: with ``clear_at_least``, move the cleared point only in steps of that many reclaimed
    #: tokens, so that a prompt cache survives between steps (source: none; module docstring).
    clear_in_batches: bool = False

    def __post_init__(self) -> None:
        if self.keep < 0 or self.trigger_value < 0 or (self.clear_at_least or 0) < 0:
            raise ValueError("AnthropicClearToolUsesPolicy: keep, trigger_value and clear_at_least must be >= 0")
        if self.trigger_fraction is not None and not 0 < self.trigger_fraction <= 1:
            raise ValueError("AnthropicClearToolUsesPolicy.trigger_fraction must be in (0, 1]")
        if self.clear_in_batches and not self.clear_at_least:
            raise ValueError("AnthropicClearToolUsesPolicy.clear_in_batches needs clear_at_least > 0 "
                             "(the size of a batch, in tokens)")
        for name in ("exclude_tools", "clear_tool_inputs_for"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def clears_inputs_of(self, tool: str) -> bool:
        """Whether a cleared use of ``tool`` also loses its input."""
        return self.clear_tool_inputs or tool in self.clear_tool_inputs_for


TokenCounter = Callable[[Sequence[Message]], int]


def _count(messages: Sequence[Message]) -> int:
    return tokens.count_messages(list(messages))


def clear_tool_uses(messages: Sequence[Message], policy: AnthropicClearToolUsesPolicy, *,
                    input_tokens: int | None = None, trigger_tokens: int | None = None,
                    count: TokenCounter = _count) -> Outcome:
    """The edit over ``messages`` (``input_tokens``: the request's count; by default ``count(messages)``)."""
    owner_of: dict[str, int] = {}
    uses: list[tuple[int, int]] = []  # (assistant index, result index), oldest first
    for i, m in enumerate(messages):
        if m.role == "assistant":
            for c in m.tool_calls:
                owner_of[c.id] = i
        elif m.role == "tool" and m.tool_call_id in owner_of:
            uses.append((owner_of[m.tool_call_id], i))
    if policy.trigger_type == "tool_uses":
        if len(uses) <= policy.trigger_value:
            return Outcome.unchanged(messages)
    else:
        limit = policy.trigger_value if trigger_tokens is None else trigger_tokens
        if (count(messages) if input_tokens is None else input_tokens) <= limit:
            return Outcome.unchanged(messages)
    candidates = uses[:-policy.keep] if policy.keep else uses
    if policy.clear_in_batches:
        candidates = _batch(messages, candidates, policy)
    out = list(messages)
    for owner, result in candidates:
        m = out[result]
        call = next(c for c in out[owner].tool_calls if c.id == m.tool_call_id)
        if call.name in policy.exclude_tools or m.content == policy.placeholder:
            continue
        out[result] = m.with_content(policy.placeholder)
        if policy.clears_inputs_of(call.name):
            out[owner] = Message(role="assistant", content=out[owner].content, name=out[owner].name,
                                 tool_calls=tuple(ToolCall(c.id, c.name, "{}") if c.id == call.id else c
                                                  for c in out[owner].tool_calls))
    if policy.clear_at_least is not None and count(messages) - count(out) < policy.clear_at_least:
        return Outcome(tuple(messages), tuple(range(len(messages))), fired=True)
    return Outcome(tuple(out), tuple(range(len(out))), fired=True)


def _batch(messages: Sequence[Message], candidates: list[tuple[int, int]],
           policy: AnthropicClearToolUsesPolicy) -> list[tuple[int, int]]:
    """The oldest ``candidates`` up to the first at which the reclaimed tokens reach the largest multiple of a batch.

    A result's reclaim is its content's tokens less the placeholder's (an excluded or already
    cleared result reclaims nothing). ``clear_at_least`` is the batch.
    """
    batch = policy.clear_at_least or 1
    placeholder = tokens.count_text(policy.placeholder)
    reclaimed: list[int] = []
    total = 0
    for owner, result in candidates:
        m = messages[result]
        call = next(c for c in messages[owner].tool_calls if c.id == m.tool_call_id)
        if call.name not in policy.exclude_tools and m.content != policy.placeholder:
            total += max(0, tokens.count_text(m.content) - placeholder)
        reclaimed.append(total)
    goal = total - total % batch
    if goal == 0:
        return []
    return candidates[:next(i for i, r in enumerate(reclaimed) if r >= goal) + 1]


class AnthropicClearToolUses(PeerMechanism):
    """``clear_tool_uses_20250919`` run client-side at the compaction stage (stateless, like the API)."""

    policy_name: ClassVar[str] = "anthropic_clear_tool_uses"
    policy_class: ClassVar[type[Any]] = AnthropicClearToolUsesPolicy
    source: ClassVar[str] = (
        "Anthropic context editing docs; anthropic-sdk-python@009b0353 beta_clear_tool_uses_20250919_edit_param.py")
    trigger_fraction_field: ClassVar[str] = "trigger_fraction"
    stage: ClassVar[Stage] = COMPACT
    sees_system: ClassVar[bool] = True
    policy: AnthropicClearToolUsesPolicy

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """Clear old tool results when the whole request is over the trigger."""
        p = self.policy
        trigger = int(inv.context_window * p.trigger_fraction) if p.trigger_fraction and inv.context_window else None
        input_tokens = tokens.count_messages(messages, [t.declaration() for t in draft.tools] or None)
        return clear_tool_uses(messages, p, input_tokens=input_tokens, trigger_tokens=trigger)


__all__ = ["PLACEHOLDER", "AnthropicClearToolUses", "AnthropicClearToolUsesPolicy", "clear_tool_uses"]
