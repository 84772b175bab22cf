"""LangChain v1 ``SummarizationMiddleware``: summarise everything before a kept tail.

Source: PyPI ``langchain==1.5.2``, ``langchain/agents/middleware/summarization.py``
(``libs/langchain_v1`` in ``langchain-ai/langchain``); ``trim_messages`` and
``count_tokens_approximately`` from ``langchain-core==1.8.3`` ``langchain_core/messages/utils.py``.

What it does, before every model call: when a trigger clause is met (``trigger=None``, the
source default, means *never*), the messages before a cutoff are summarised and the agent state
becomes ``[HumanMessage(SUMMARY_PREFIX + summary), *kept]`` (the prefix below, verbatim) with
the kept tail. ``keep`` is ``("messages", 20)`` by default: the cutoff is ``len − 20``; a token or
fraction ``keep`` binary-searches the earliest suffix that fits. If the cutoff lands on a tool
result it moves back to the assistant message holding that call (or past the results when none
is found), so pairs stay together. The summariser sees the evicted messages trimmed to their
last ``trim_tokens_to_summarize`` (4,000) tokens, starting on a user message (partial messages
split on lines, as ``trim_messages(allow_partial=True)`` does). The previous summary is an
ordinary user message and is summarised again next time.

The middleware *replaces* the agent's state; here the ledger stays whole and the previous
projection carries over to the next request (:attr:`PeerMechanism.carries_over`), which is what
the next ``before_model`` would see.

Departures from the source, and why:

* Trigger clauses: ``trigger_tokens``, ``trigger_messages`` and ``trigger_fraction`` are OR-ed
  single-kind clauses (LangChain's list form); a multi-key ``TriggerClause`` (AND) is not
  offered.
* The provider-reported ``usage_metadata.total_tokens`` check is not reproduced: it needs a
  provider name match our messages do not carry. Only the approximate count triggers.
* ``fraction`` triggers and keeps use the run's context window (``inv.context_window``) for
  the model profile's ``max_input_tokens``.
* The summary prompt is our own paraphrase of ``DEFAULT_SUMMARY_PROMPT`` (same four sections);
  the history is rendered by :func:`render_transcript`, not ``get_buffer_string(format="xml")``.
  The overflow retry (middle cut at ``[... middle of conversation omitted ...]``) and the
  three-attempt retry are not reproduced: a failing summariser fails the request.
* ``chars_per_token`` is 4.0; LangChain uses 3.3 for Anthropic chat models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from agentlab.core.mechanism import RequestDraft, Stage
from agentlab.events import Message
from agentlab.policies._base import PEER_SUMMARY, Outcome, PeerMechanism, count_tokens_approximately
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: The summary message's text before the summary (``_build_new_messages``), verbatim.
SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"
#: The summary when there is nothing to summarise (``_create_summary``), verbatim.
NOTHING_TO_SUMMARIZE = "No previous conversation history."
#: The summary when trimming left nothing (``_create_summary``), verbatim.
TOO_LONG_TO_SUMMARIZE = "Previous conversation was too long to summarize."
#: Messages kept when a token/fraction keep cannot be computed (``_DEFAULT_MESSAGES_TO_KEEP``).
DEFAULT_MESSAGES_TO_KEEP = 20

#: Our paraphrase of LangChain's summary prompt (same sections); ``{messages}`` is the transcript.
SUMMARY_PROMPT = """You are extracting the context an agent needs to keep working, because its conversation \
history is about to be replaced by what you write. Keep only what matters for the overall goal, so that \
finished actions are not repeated. Use these sections, writing "None" where there is nothing to say:

## SESSION INTENT
The user's main goal or request.

## SUMMARY
The important context: choices made and why, conclusions, rejected options.

## ARTIFACTS
Files and resources created, changed or read, with the changes made.

## NEXT STEPS
What is left to do.

Reply with the extracted context only.

<messages>
{messages}
</messages>"""

TokenCounter = Callable[[Sequence[Message]], int]


@dataclass(frozen=True)
class LangChainSummarizationPolicy(PolicyJSON):
    """``SummarizationMiddleware``'s knobs; defaults are langchain 1.5.2's."""

    #: Summarise when the approximate count reaches this many tokens (source: no trigger at all).
    trigger_tokens: int | None = None
    #: Summarise when there are at least this many messages (source: no trigger).
    trigger_messages: int | None = None
    #: Summarise at this fraction of the context window (source: no trigger; needs the window).
    trigger_fraction: float | None = None
    #: What ``keep`` counts (source: ``"messages"``).
    keep_kind: Literal["messages", "tokens", "fraction"] = "messages"
    #: How much to keep (source: 20 messages).
    keep_value: float = DEFAULT_MESSAGES_TO_KEEP
    #: Tokens of the evicted messages the summariser sees, from the end; none = all (source: 4,000).
    trim_tokens_to_summarize: int | None = 4000
    #: Characters per token of the approximate counter (source: 4.0; 3.3 for Anthropic models).
    chars_per_token: float = 4.0

    def __post_init__(self) -> None:
        for name in ("trigger_tokens", "trigger_messages"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"LangChainSummarizationPolicy.{name} must be > 0, got {value}")
        if self.trigger_fraction is not None and not 0 < self.trigger_fraction <= 1:
            raise ValueError("LangChainSummarizationPolicy.trigger_fraction must be in (0, 1]")
        if self.keep_kind == "fraction" and not 0 < self.keep_value <= 1:
            raise ValueError("LangChainSummarizationPolicy.keep_value must be in (0, 1] for a fraction")
        if self.keep_kind != "fraction" and self.keep_value <= 0:
            raise ValueError("LangChainSummarizationPolicy.keep_value must be > 0")

    def count(self, messages: Sequence[Message]) -> int:
        """The approximate token count LangChain's default counter gives."""
        return count_tokens_approximately(messages, chars_per_token=self.chars_per_token)


@dataclass(frozen=True)
class SummaryPlan:
    """What to summarise: messages before ``cutoff``; ``summarizer_input`` is what the summariser sees."""

    cutoff: int
    summarizer_input: tuple[Message, ...]


def should_summarize(messages: Sequence[Message], policy: LangChainSummarizationPolicy,
                     max_input_tokens: int | None) -> bool:
    """``_should_summarize`` without the reported-usage check: any clause met."""
    total = policy.count(messages)
    if policy.trigger_messages is not None and len(messages) >= policy.trigger_messages:
        return True
    if policy.trigger_tokens is not None and total >= policy.trigger_tokens:
        return True
    if policy.trigger_fraction is not None and max_input_tokens:
        threshold = max(1, int(max_input_tokens * policy.trigger_fraction))
        if total >= threshold:
            return True
    return False


def find_safe_cutoff_point(messages: Sequence[Message], cutoff: int) -> int:
    """``_find_safe_cutoff_point``: a cutoff on a tool result moves back to its call's message."""
    if cutoff >= len(messages) or messages[cutoff].role != "tool":
        return cutoff
    ids: set[str] = set()
    index = cutoff
    while index < len(messages) and messages[index].role == "tool":
        if messages[index].tool_call_id:
            ids.add(messages[index].tool_call_id or "")
        index += 1
    for i in range(cutoff - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant" and m.tool_calls and ids & {c.id for c in m.tool_calls if c.id}:
            return i
    return index


def determine_cutoff(messages: Sequence[Message], policy: LangChainSummarizationPolicy,
                     max_input_tokens: int | None) -> int:
    """``_determine_cutoff_index``: where the kept tail starts."""
    if policy.keep_kind in ("tokens", "fraction"):
        cutoff = _token_cutoff(messages, policy, max_input_tokens)
        if cutoff is not None:
            return cutoff
        keep = DEFAULT_MESSAGES_TO_KEEP
    else:
        keep = int(policy.keep_value)
    if len(messages) <= keep:
        return 0
    return find_safe_cutoff_point(messages, len(messages) - keep)


def _token_cutoff(messages: Sequence[Message], policy: LangChainSummarizationPolicy,
                  max_input_tokens: int | None) -> int | None:
    if not messages:
        return 0
    if policy.keep_kind == "fraction":
        if not max_input_tokens:
            return None
        target = int(max_input_tokens * policy.keep_value)
    else:
        target = int(policy.keep_value)
    target = max(target, 1)
    if policy.count(messages) <= target:
        return 0
    left, right = 0, len(messages)
    candidate = len(messages)
    for _ in range(len(messages).bit_length() + 1):
        if left >= right:
            break
        mid = (left + right) // 2
        if policy.count(messages[mid:]) <= target:
            candidate, right = mid, mid
        else:
            left = mid + 1
    if candidate == len(messages):
        candidate = left
    if candidate >= len(messages):
        if len(messages) == 1:
            return 0
        candidate = len(messages) - 1
    return find_safe_cutoff_point(messages, candidate)


def _split_lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + parts[-1:]


def trim_last(messages: Sequence[Message], max_tokens: int, count: TokenCounter) -> list[Message]:
    """``trim_messages(strategy="last", start_on="human", allow_partial=True, include_system=True)``.

    The newest messages within ``max_tokens``; the first one that does not fit whole may come in
    part (its last lines); then leading messages are dropped up to the first user message.
    """
    msgs = list(messages)
    if not msgs:
        return []
    system: Message | None = None
    if msgs[0].role == "system":
        system, msgs = msgs[0], msgs[1:]
    budget = max(0, max_tokens - count([system])) if system is not None else max_tokens
    rev = msgs[::-1]
    if count(rev) <= budget:
        picked = list(rev)
        while picked and picked[-1].role != "user":
            picked.pop()
    else:
        left, right = 0, len(rev)
        for _ in range(len(rev).bit_length()):
            if left >= right:
                break
            mid = (left + right + 1) // 2
            if count(rev[:mid]) <= budget:
                left = mid
            else:
                right = mid - 1
        idx = left
        picked = rev[:idx]
        if idx < len(rev) and rev[idx].content:
            splits = _split_lines(rev[idx].content)[::-1]
            base = count(picked)
            lo, hi = 0, len(splits)
            for _ in range(len(splits).bit_length()):
                if lo >= hi:
                    break
                mid = (lo + hi + 1) // 2
                if base + count([rev[idx].with_content("".join(splits[:mid]))]) <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            if lo > 0:
                picked = [*picked, rev[idx].with_content("".join(splits[:lo][::-1]))]
        while picked and picked[-1].role != "user":
            picked.pop()
    result = picked[::-1]
    return [system, *result] if system is not None else result


def plan(messages: Sequence[Message], policy: LangChainSummarizationPolicy, *,
         max_input_tokens: int | None = None) -> SummaryPlan | None:
    """What ``before_model`` would summarise (``None``: no trigger met, or nothing before the tail)."""
    if not should_summarize(messages, policy, max_input_tokens):
        return None
    cutoff = determine_cutoff(messages, policy, max_input_tokens)
    if cutoff <= 0:
        return None
    evicted = list(messages[:cutoff])
    shown = evicted if policy.trim_tokens_to_summarize is None else trim_last(
        evicted, policy.trim_tokens_to_summarize, policy.count)
    return SummaryPlan(cutoff, tuple(shown))


def fixed_summary(plan: SummaryPlan) -> str | None:
    """The summary LangChain writes without calling the summariser, if any."""
    if plan.cutoff <= 0:
        return NOTHING_TO_SUMMARIZE
    if not plan.summarizer_input:
        return TOO_LONG_TO_SUMMARIZE
    return None


def finish(messages: Sequence[Message], plan: SummaryPlan, summary: str) -> Outcome:
    """The summary message, then the kept tail (``summary`` as the summariser returned it)."""
    made = Message.user(SUMMARY_PREFIX + summary.strip())
    kept = range(plan.cutoff, len(messages))
    return Outcome((made, *(messages[i] for i in kept)), (None, *kept), fired=True)


def render_transcript(messages: Sequence[Message]) -> str:
    """The evicted messages as plain text for our summary prompt."""
    lines = []
    for m in messages:
        calls = "".join(f"\n  [calls {c.name}({c.arguments})]" for c in m.tool_calls)
        who = f"tool {m.name}" if m.role == "tool" else m.role
        lines.append(f"{who}: {m.content}{calls}")
    return "\n".join(lines)


class LangChainSummarization(PeerMechanism):
    """LangChain's ``SummarizationMiddleware`` at :data:`PEER_SUMMARY`; the projection carries over."""

    policy_name: ClassVar[str] = "langchain_summarization"
    policy_class: ClassVar[type[Any]] = LangChainSummarizationPolicy
    source: ClassVar[str] = "langchain==1.5.2 agents/middleware/summarization.py"
    needs_model: ClassVar[str] = "SummarizationMiddleware replaces old messages with a model-written summary"
    stage: ClassVar[Stage] = PEER_SUMMARY
    carries_over: ClassVar[bool] = True
    policy: LangChainSummarizationPolicy

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """Summarise the messages before the kept tail when a trigger is met."""
        window = inv.context_window or None
        todo = plan(messages, self.policy, max_input_tokens=window)
        if todo is None:
            return Outcome.unchanged(messages)
        summary = fixed_summary(todo)
        if summary is None:
            prompt = SUMMARY_PROMPT.format(messages=render_transcript(todo.summarizer_input))
            summary = await self.summarizer_for(inv)([Message.user(prompt)])
        return finish(messages, todo, summary)


__all__ = [
    "SUMMARY_PREFIX",
    "LangChainSummarization",
    "LangChainSummarizationPolicy",
    "SummaryPlan",
    "finish",
    "plan",
    "trim_last",
]
