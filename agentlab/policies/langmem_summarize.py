"""LangMem ``summarize_messages``: a running summary with an explicit boundary and a verbatim tail.

Source: ``langchain-ai/langmem`` @ ``b5dbe4aa34055face022cb4a6db153edd5826377`` (= PyPI
``langmem==0.0.30``), ``src/langmem/short_term/summarization.py``.

What it does on every call: a leading system message is set aside (its tokens come out of the
budget). Scanning starts after the running summary's last summarised message; tokens are summed
oldest first, and the cutoff is the first message where the sum reaches
``max_tokens_before_summary`` (default: ``max_tokens``) *and* what follows fits in
``max_tokens − max_summary_tokens − system``. If the last message to summarise is an assistant
message with tool calls, its results are summarised with it. The summariser sees those messages
(trimmed to the last ``max_tokens − |summary|`` tokens when longer) and a user message asking to
create — or, with a running summary, to *extend* — the summary (both texts LangMem's, verbatim).
The request becomes ``[system?] + System("Summary of the conversation so far: …") +
messages after the boundary``; with no summary yet and nothing to summarise, the messages go
out as they are. The main history is never changed (LangMem's node writes to
``summarized_messages``); the running summary is state beside it.

Departures from the source, and why:

* ``max_tokens`` has no default in LangMem (it is required); the preset's default is
  ``max_tokens_fraction=0.5`` of the run's context window, and an explicit ``max_tokens`` wins.
* The running summary lives in the mechanism, per session view, in process (LangMem keeps it in
  the graph state); when its last summarised message is no longer among the request's events
  (e.g. another mechanism cut the history) it starts over instead of raising.
* agentlab sends one system message: the summary system message is appended to the request's
  system text rather than sent as a second system message.
* Parallel tool calls: LangMem can cut between an assistant message and some of its results
  (langmem #126); the core reproduces that, and the mechanism's pairing guard then leaves the
  orphaned results out of the request (counted in the stats record).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentlab.core.mechanism import RequestDraft, Stage
from agentlab.events import Message
from agentlab.policies._base import (
    PEER_SUMMARY,
    Outcome,
    PeerMechanism,
    Summarizer,
    count_tokens_approximately,
)
from agentlab.policies.langchain_summarization import trim_last
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: LangMem's prompts and final summary message (summarization.py), verbatim.
INITIAL_SUMMARY_PROMPT = "Create a summary of the conversation above:"
EXISTING_SUMMARY_PROMPT = ("This is summary of the conversation so far: {existing_summary}\n\n"
                           "Extend this summary by taking into account the new messages above:")
FINAL_SUMMARY = "Summary of the conversation so far: {summary}"

TokenCounter = Callable[[Sequence[Message]], int]


@dataclass(frozen=True)
class LangMemSummarizePolicy(PolicyJSON):
    """``summarize_messages``' knobs; defaults are langmem 0.0.30's where it has them."""

    #: The request's token budget (source: required, no default); none = ``max_tokens_fraction``.
    max_tokens: int | None = None
    #: Variant: the budget as this share of the context window when ``max_tokens`` is none (ours: 0.5).
    max_tokens_fraction: float = 0.5
    #: Tokens that must accumulate before a summary (source: none = ``max_tokens``).
    max_tokens_before_summary: int | None = None
    #: The summary's share of the budget, for the calculation only (source: 256).
    max_summary_tokens: int = 256

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_summary_tokens >= self.max_tokens:
            raise ValueError("LangMemSummarizePolicy: max_summary_tokens must be less than max_tokens")
        if not 0 < self.max_tokens_fraction <= 1:
            raise ValueError("LangMemSummarizePolicy.max_tokens_fraction must be in (0, 1]")

    def budget(self, context_window: int) -> int:
        """``max_tokens``: the absolute one, or the share of ``context_window``."""
        if self.max_tokens is not None:
            return self.max_tokens
        if context_window <= 0:
            raise ValueError("LangMemSummarizePolicy needs max_tokens when the context window is unknown")
        return int(context_window * self.max_tokens_fraction)


@dataclass(frozen=True)
class RunningSummary:
    """LangMem's ``RunningSummary``: the text, the ids summarised, the last one (the boundary)."""

    summary: str
    summarized_ids: frozenset[str]
    last_summarized_id: str | None


@dataclass(frozen=True)
class SummaryPlan:
    """The messages to summarise (input indices) and what the summariser is shown."""

    to_summarize: tuple[int, ...]
    summarizer_input: tuple[Message, ...]


@dataclass(frozen=True)
class _Scan:
    system: int | None
    start: int  # first input index after the system message
    total_summarized: int
    to_summarize: tuple[int, ...]
    n_tokens: int
    max_to_summarize: int


def _scan(messages: Sequence[Message], ids: Sequence[str], running: RunningSummary | None, max_tokens: int,
          before: int | None, max_summary_tokens: int, count: TokenCounter) -> _Scan:
    if max_summary_tokens >= max_tokens:
        raise ValueError("`max_summary_tokens` must be less than `max_tokens`.")
    before = max_tokens if before is None else before
    max_to_summarize = max_tokens
    max_remaining = max_tokens - max_summary_tokens
    system = 0 if messages and messages[0].role == "system" else None
    start = 1 if system is not None else 0
    if system is not None:
        max_remaining -= count([messages[0]])
    body = list(range(start, len(messages)))
    if not body:
        return _Scan(system, start, 0, (), 0, max_to_summarize)
    total_summarized = 0
    if running is not None:
        max_to_summarize -= count([Message.system(running.summary)])
        for k, i in enumerate(body):
            if ids[i] == running.last_summarized_id:
                total_summarized = k + 1
                break
    rest = body[total_summarized:]
    total = count([messages[i] for i in rest])
    n_tokens = 0
    cut = max(0, total_summarized - 1)
    results: dict[str, int] = {}
    found = False
    n_to_summarize = 0
    for k in range(total_summarized, len(body)):
        i = body[k]
        if running is not None and ids[i] in running.summarized_ids:
            raise ValueError(f"Message with ID {ids[i]} has already been summarized.")
        m = messages[i]
        if m.role == "tool" and m.tool_call_id:
            results[m.tool_call_id] = i
        n_tokens += count([m])
        if n_tokens >= before and total - n_tokens <= max_remaining and not found:
            n_to_summarize, found, cut = n_tokens, True, k
    picked = body[total_summarized:cut + 1] if found else []
    if picked and messages[picked[-1]].role == "assistant" and messages[picked[-1]].tool_calls:
        for c in messages[picked[-1]].tool_calls:
            if c.id in results:
                n_to_summarize += count([messages[results[c.id]]])
                picked.append(results[c.id])
    return _Scan(system, start, total_summarized, tuple(picked), n_to_summarize, max_to_summarize)


def plan(messages: Sequence[Message], ids: Sequence[str], running: RunningSummary | None, *, max_tokens: int,
         max_tokens_before_summary: int | None = None, max_summary_tokens: int = 256,
         count: TokenCounter = count_tokens_approximately) -> tuple[_Scan, SummaryPlan | None]:
    """What ``summarize_messages`` would summarise and show the summariser (``None``: no summary call)."""
    scan = _scan(messages, ids, running, max_tokens, max_tokens_before_summary, max_summary_tokens, count)
    if not scan.to_summarize:
        return scan, None
    picked = [messages[i] for i in scan.to_summarize]
    shown = picked
    if scan.n_tokens > scan.max_to_summarize:
        shown = trim_last(picked, scan.max_to_summarize, count) or picked
    prompt = (EXISTING_SUMMARY_PROMPT.format(existing_summary=running.summary) if running is not None
              else INITIAL_SUMMARY_PROMPT)
    return scan, SummaryPlan(scan.to_summarize, (*shown, Message.user(prompt)))


def finish(messages: Sequence[Message], ids: Sequence[str], scan: _Scan, todo: SummaryPlan | None,
           running: RunningSummary | None, summary: str | None) -> tuple[Outcome, RunningSummary | None]:
    """The request's messages and the new running summary (``summary``: the summariser's reply)."""
    existing = running
    if todo is not None and summary is not None:
        running = RunningSummary(summary, (running.summarized_ids if running else frozenset())
                                 | {ids[i] for i in todo.to_summarize}, ids[todo.to_summarize[-1]])
    body = range(scan.start, len(messages))
    if running is None or not body:
        return Outcome.unchanged(messages), running
    total = scan.total_summarized + len(todo.to_summarize if todo else ())
    out: list[Message] = []
    sources: list[int | None] = []
    if scan.system is not None and not (existing is not None and existing.summary in messages[0].content):
        out.append(messages[0])
        sources.append(0)
    out.append(Message.system(FINAL_SUMMARY.format(summary=running.summary)))
    sources.append(None)
    for i in list(body)[total:]:
        out.append(messages[i])
        sources.append(i)
    return Outcome(tuple(out), tuple(sources), fired=todo is not None), running


class LangMemSummarize(PeerMechanism):
    """LangMem's ``summarize_messages`` at :data:`PEER_SUMMARY`, its running summary kept per session view."""

    policy_name: ClassVar[str] = "langmem_summarize"
    policy_class: ClassVar[type[Any]] = LangMemSummarizePolicy
    source: ClassVar[str] = "langchain-ai/langmem@b5dbe4aa (0.0.30) short_term/summarization.py"
    needs_model: ClassVar[str] = "summarize_messages keeps a model-written running summary"
    stage: ClassVar[Stage] = PEER_SUMMARY
    sees_system: ClassVar[bool] = True
    policy: LangMemSummarizePolicy

    def __init__(self, policy: LangMemSummarizePolicy | None = None, *, summarizer: Summarizer | None = None) -> None:
        super().__init__(policy, summarizer=summarizer)
        self._running: dict[tuple[str, str], RunningSummary] = {}

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """Summarise up to the cutoff, extending the running summary; show it with the tail."""
        ids = ["system" if m.role == "system" and i == 0 else f"m{i}" for i, m in enumerate(messages)]
        history = [e for e in draft.events if e.message is not None and e.message.role != "system"]
        offset = 1 if messages and messages[0].role == "system" else 0
        for k, event in enumerate(history):
            ids[k + offset] = event.id
        key = self.key(inv)
        running = self._running.get(key)
        if running is not None and running.last_summarized_id not in ids:
            running = None
        p = self.policy
        scan, todo = plan(messages, ids, running, max_tokens=p.budget(inv.context_window),
                          max_tokens_before_summary=p.max_tokens_before_summary,
                          max_summary_tokens=p.max_summary_tokens)
        summary = await self.summarizer_for(inv)(list(todo.summarizer_input)) if todo is not None else None
        outcome, running = finish(messages, ids, scan, todo, running, summary)
        if running is not None:
            self._running[key] = running
        return outcome


__all__ = ["FINAL_SUMMARY", "LangMemSummarize", "LangMemSummarizePolicy", "RunningSummary", "finish", "plan"]
