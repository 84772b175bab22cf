"""Letta's sliding-window compaction: evict the oldest share of messages into a summary.

Sources (``letta-ai/letta``, read through the search index): ``letta/services/summarizer/
summarizer_sliding_window.py`` and ``summarizer/constants.py`` @ ``63d3146f``; the trigger
(``get_compaction_trigger_threshold``: 0.9 × window) and ``CompactionSettings`` defaults
(``sliding_window_percentage=0.3``, ``clip_chars=50_000``) and the summary packaging
(``letta/system.py``) at ``letta-ai/letta`` @ ``56ba9c25``, the packaging text also checked
against ``letta-ai/letta-code``'s ``packageLocalSummaryMessage``.

What it does when the request is over 0.9 × the window: the system message (index 0) always
stays. ``eviction_percentage`` starts at ``sliding_window_percentage`` (0.3) and grows by 0.10
*before* each try (so the first try evicts 40%); the cutoff is ``round(pct × N)``, moved back to
the nearest assistant message at or before it (never index 0); the kept part is
``[system, *messages[cutoff:]]``, and the loop stops when its count is under
``(1 − 0.3) × window``. The messages ``1 … cutoff−1`` (an earlier summary sits at index 1, so it
is folded in) go to the summariser; a summary over ``clip_chars`` is cut and gets
``... [summary truncated to fit]``. The request becomes ``[system, summary, *kept]``. The kept
part starts on an assistant message, so a call is never separated from its results. When no
cutoff works (or it would be the last message) Letta falls back to summarising everything
(``all`` mode): ``[system, summary]``.

Departures from the source, and why:

* Letta could not be run: the PyPI package ``letta`` (0.34.12) now ships Letta Code with no
  Python server modules, and the server repository is archived; checked by hand-worked
  examples in ``tests/policies/test_letta_sliding_window.py``.
* Letta compacts after a step (and reactively on a context-window error); here the check runs
  before each model call on the request being built, which is when the next step would see the
  compacted context.
* Tokens: agentlab's tokeniser × 1.3 (``COMPACTION_TOKEN_HEURISTIC_SAFETY_MARGIN``, which Letta
  applies to its approximate counter), over the system text and the messages.
* The summary message is a user message (Letta's role is ``summary``, or ``user`` in legacy
  mode) holding the ``system_alert`` JSON without its ``time`` and ``compaction_stats`` fields,
  so that the same ledger always projects to the same request (the call cache depends on it).
  Its count of hidden messages is the number summarised.
* :data:`SLIDING_PROMPT` is our paraphrase (same sections). Evicted messages stay in the ledger
  (Letta's Recall memory); agentlab's recall tools can reach them when configured.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentlab.core.mechanism import COMPACT, RequestDraft, Stage
from agentlab.events import Message
from agentlab.model import tokens
from agentlab.policies._base import Outcome, PeerMechanism
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: ``SUMMARY_TRUNCATION_SUFFIX`` and ``COMPACTION_TOKEN_HEURISTIC_SAFETY_MARGIN`` (constants.py), verbatim.
SUMMARY_TRUNCATION_SUFFIX = "... [summary truncated to fit]"
SAFETY_MARGIN = 1.3
#: The sliding-window summary alert (``package_summarize_message``), verbatim.
HIDDEN_NOTE = ("Note: {n} messages from the beginning of the conversation have been hidden from view due to "
               "memory constraints.\nThe following is a summary of the previous messages:\n {summary}")
#: The ``all``-mode alert, verbatim.
ALL_HIDDEN_NOTE = ("Note: prior messages have been hidden from view due to conversation memory constraints.\n"
                   "The following is a summary of the previous messages:\n {summary}")

#: Our paraphrase of Letta's sliding-window summary prompt (same sections).
SLIDING_PROMPT = """The oldest part of this conversation is about to leave the context window. Write a summary \
of it (under 300 words) that the agent can rely on afterwards, with these parts:
1. High-level goals: what the user is trying to achieve.
2. What happened: the main steps and outcomes, including what a previous summary (if one is evicted) said.
3. Important details: identifiers, file names, URLs and ticket numbers, word for word.
4. Errors and fixes.
5. Lookup hints: what could be searched for later to find the evicted messages."""

TokenCounter = Callable[[Sequence[Message]], float]


@dataclass(frozen=True)
class LettaSlidingWindowPolicy(PolicyJSON):
    """Letta's compaction settings; defaults are the source's."""

    #: Compact when the request is over this share of the window (``SUMMARIZATION_TRIGGER_MULTIPLIER``, 0.9).
    trigger_fraction: float = 0.9
    #: Starting eviction share; the goal is to keep under (1 − this) × window (source: 0.30).
    sliding_window_percentage: float = 0.3
    #: Longest summary kept, in characters (source: 50,000); none = no cut.
    clip_chars: int | None = 50_000

    def __post_init__(self) -> None:
        if not 0 < self.trigger_fraction <= 1:
            raise ValueError("LettaSlidingWindowPolicy.trigger_fraction must be in (0, 1]")
        if not 0 <= self.sliding_window_percentage <= 1:
            raise ValueError("LettaSlidingWindowPolicy.sliding_window_percentage must be in [0, 1]")


def letta_count(messages: Sequence[Message]) -> float:
    """Tokens as Letta's approximate counter gives them: our count × the 1.3 safety margin."""
    return tokens.count_messages(list(messages)) * SAFETY_MARGIN


def sliding_cutoff(messages: Sequence[Message], context_window: int, percentage: float,
                   count: TokenCounter = letta_count) -> int | None:
    """The index the kept part starts at (``messages[0]`` is the system message); ``None``: no valid cutoff."""
    total = len(messages)
    maximum = total - 1
    eviction = percentage
    goal = (1 - percentage) * context_window
    approx: float = context_window
    cutoff: int | None = None
    while approx >= goal and eviction < 1.0:
        eviction += 0.10
        target = round(eviction * total)
        cutoff = next((i for i in reversed(range(1, target + 1)) if i < total and messages[i].role == "assistant"),
                      None)
        if cutoff is None:
            continue
        approx = count([messages[0], *messages[cutoff:]])
    if cutoff is None or eviction >= 1.0 or cutoff >= maximum:
        return None
    return cutoff


def clip(summary: str, clip_chars: int | None) -> str:
    """A summary over ``clip_chars`` cut, with Letta's suffix."""
    if clip_chars is not None and len(summary) > clip_chars:
        return summary[:clip_chars] + SUMMARY_TRUNCATION_SUFFIX
    return summary


def summary_message(summary: str, hidden: int | None) -> Message:
    """The ``system_alert`` JSON as a user message (``hidden``: ``None`` for ``all`` mode)."""
    note = ALL_HIDDEN_NOTE.format(summary=summary) if hidden is None else HIDDEN_NOTE.format(n=hidden, summary=summary)
    return Message.user(json.dumps({"type": "system_alert", "message": note}, ensure_ascii=False))


def finish(messages: Sequence[Message], cutoff: int | None, summary: str, policy: LettaSlidingWindowPolicy) -> Outcome:
    """``[system, summary, *messages[cutoff:]]`` (``cutoff`` ``None``: ``all`` mode, ``[system, summary]``)."""
    text = clip(summary, policy.clip_chars)
    if cutoff is None:
        return Outcome((messages[0], summary_message(text, None)), (0, None), fired=True)
    kept = range(cutoff, len(messages))
    return Outcome((messages[0], summary_message(text, cutoff - 1), *(messages[i] for i in kept)),
                   (0, None, *kept), fired=True)


def render(messages: Sequence[Message]) -> str:
    """The evicted messages as a transcript for the summariser."""
    return "\n".join(f"{m.role}{f' ({m.name})' if m.name else ''}: {m.content}"
                     + "".join(f" [calls {c.name}({c.arguments})]" for c in m.tool_calls) for m in messages)


class LettaSlidingWindow(PeerMechanism):
    """Letta's sliding-window compaction at the compaction stage; its in-context list carries over."""

    policy_name: ClassVar[str] = "letta_sliding_window"
    policy_class: ClassVar[type[Any]] = LettaSlidingWindowPolicy
    source: ClassVar[str] = "letta-ai/letta@63d3146f letta/services/summarizer/summarizer_sliding_window.py"
    needs_model: ClassVar[str] = "Letta evicts the oldest messages into a model-written summary"
    stage: ClassVar[Stage] = COMPACT
    sees_system: ClassVar[bool] = True
    carries_over: ClassVar[bool] = True
    policy: LettaSlidingWindowPolicy

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """Evict the oldest messages into a summary when the request is over the trigger."""
        window = inv.context_window
        padded = messages[0].role != "system" if messages else True
        inputs = [Message.system(""), *messages] if padded else list(messages)
        if not window or letta_count(inputs) <= int(window * self.policy.trigger_fraction):
            return Outcome.unchanged(messages)
        cutoff = sliding_cutoff(inputs, window, self.policy.sliding_window_percentage)
        evicted = inputs[1:cutoff] if cutoff is not None else inputs[1:]
        prompt = [Message.system(SLIDING_PROMPT), Message.user(render(evicted))]
        outcome = finish(inputs, cutoff, await self.summarizer_for(inv)(prompt), self.policy)
        if not padded:
            return outcome
        pairs = [(m, s - 1 if s is not None else None) for m, s in zip(outcome.messages, outcome.sources, strict=True)
                 if s != 0]
        return Outcome(tuple(m for m, _ in pairs), tuple(s for _, s in pairs), fired=True)


__all__ = ["LettaSlidingWindow", "LettaSlidingWindowPolicy", "finish", "sliding_cutoff", "summary_message"]
