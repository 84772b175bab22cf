"""The summariser: (previous summary, delta events) -> new summary text, within an input budget.

When the input does not fit, it retreats step by step (previous summary shortened, then the
longest prefix of whole events, then one event cut around a marker), so the boundary still
moves and the next rolling update continues from there. A cache-safe fork reuses the parent
request's prefix instead when the policy asks for it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentlab.events import Event, Message
from agentlab.model import tokens
from agentlab.model.base import ContextLengthError, GenerationConfig, Model, ModelRequest
from agentlab.summary.policy import SummaryPolicy
from agentlab.summary.prompts import (
    BUILTIN_PROMPTS,
    CURRENT_RUN_ARGS_NOTE,
    FORK_PROMPT,
    FORK_PROMPT_VERSION,
    SUMMARY_SYSTEM_PROMPT,
    WORD_LIMIT_LINE,
    validate_prompt_template,
)
from agentlab.summary.render import (
    previous_summary_event,
    render_event_line,
    strip_structured_summary,
    truncate_middle,
)

log = logging.getLogger(__name__)


@dataclass
class SummaryOutcome:
    """What one summariser run produced and which part of the delta it covers."""

    text: str
    #: How many leading delta events the text covers (the boundary may advance this far).
    covered: int
    input_tokens: int = 0
    budget: int = 0
    prompt_version: str = ""
    #: "standalone" (rendered conversation) or "fork" (parent request + one instruction).
    mode: str = "standalone"
    retried: bool = False
    #: Events that alone exceeded the budget and went in truncated around a marker.
    truncated_events: int = 0
    #: Whether the previous summary had to be shortened in the middle to fit.
    previous_trimmed: bool = False
    model_calls: int = 0


@dataclass
class _Plan:
    messages: list[Message]
    covered: int
    input_tokens: int
    truncated_events: int = 0
    previous_trimmed: bool = False
    tools: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "standalone"


class SummaryInputTooLarge(ValueError):
    """The prompt itself does not fit the summariser's budget."""


class Summarizer:
    """Turns (previous summary, delta events) into new summary text with a summary model."""

    def __init__(self, model: Model, policy: SummaryPolicy | None = None) -> None:
        self.model = model
        self.policy = policy or SummaryPolicy()
        self.template, self.prompt_version = BUILTIN_PROMPTS.get(
            self.policy.prompt, (self.policy.prompt, self.policy.prompt_version)
        )
        if self.policy.prompt not in BUILTIN_PROMPTS:
            validate_prompt_template(self.template, self.policy.max_summary_words)
        self._previous_in_template = "{previous_summary}" in self.template

    # -- sizes -----------------------------------------------------------------------------------

    @property
    def window(self) -> int:
        """The summary model's window (its stated one, else the policy's fallback)."""
        from agentlab.model.window import resolve_context_window

        return resolve_context_window(self.model, fallback=self.policy.context_fallback_window)

    @property
    def input_budget(self) -> int:
        """Tokens the summariser input may use: ``input_budget_ratio`` x the window."""
        return int(self.window * self.policy.input_budget_ratio)

    def generation(self) -> GenerationConfig:
        """Deterministic decoding, capped at ``max_output_tokens`` when set."""
        return GenerationConfig(temperature=0.0, max_tokens=self.policy.max_output_tokens)

    # -- prompt rendering ------------------------------------------------------------------------

    def render_prompt(self, lines: Sequence[str], previous: str) -> list[Message]:
        """The standalone request: system line + the template filled with the conversation."""
        if previous and not self._previous_in_template:
            lines = [render_event_line(previous_summary_event(previous)), *lines]
        words = self.policy.max_summary_words
        text = self.template
        if self.policy.prompt in BUILTIN_PROMPTS:
            text = text.replace("{word_limit_line}\n",
                                WORD_LIMIT_LINE.format(max_summary_words=words) + "\n" if words > 0 else "")
        text = (
            text.replace("{max_summary_words}", str(words))
            .replace("{previous_summary}", previous or "(none)")
            .replace("{conversation_text}", "\n".join(lines))
        )
        return [Message.system(SUMMARY_SYSTEM_PROMPT), Message.user(text)]

    def render_line(self, event: Event) -> str:
        """One event as an input line, a long tool result cut around a marker when the policy asks."""
        limit = self.policy.input_tool_result_max_tokens
        message = event.message
        if limit > 0 and message is not None and message.role == "tool" \
                and tokens.count_text(message.content) > limit:
            short = truncate_middle(message.content, limit,
                                    marker="[... {n} characters of this tool result omitted ...]")
            event = event.copy_with(choices=[message.with_content(short)])
        return render_event_line(event)

    def _cost(self, lines: Sequence[str], previous: str) -> int:
        return tokens.count_messages(self.render_prompt(lines, previous))

    def plan_standalone(self, events: Sequence[Event], previous: str, budget: int) -> _Plan:
        """Fit (previous summary, events) into ``budget`` tokens.

        Order of retreat: everything; the previous summary shortened in the middle to at most
        half the budget; the longest prefix of whole events that fits (safe prefix); and when
        not even the first event fits, that one event truncated around a marker so the
        boundary can still move past it.
        """
        lines = [self.render_line(e) for e in events]
        cost = self._cost(lines, previous)
        if cost <= budget:
            return _Plan(self.render_prompt(lines, previous), len(lines), cost)
        trimmed = False
        if previous and tokens.count_text(previous) > budget // 2:
            previous = truncate_middle(previous, budget // 2)
            trimmed = True
            cost = self._cost(lines, previous)
            if cost <= budget:
                return _Plan(self.render_prompt(lines, previous), len(lines), cost, previous_trimmed=True)
        base = self._cost([], previous)
        if base > budget:
            raise SummaryInputTooLarge(
                f"the summary prompt alone needs {base} tokens but the input budget is {budget} "
                f"(summary model window {self.window} x {self.policy.input_budget_ratio})"
            )
        # Safe prefix: binary search for the largest k whose rendering fits.
        low, high, best = 1, len(lines) - 1, 0
        while low <= high:
            mid = (low + high) // 2
            if self._cost(lines[:mid], previous) <= budget:
                best, low = mid, mid + 1
            else:
                high = mid - 1
        if best > 0:
            prefix = lines[:best]
            return _Plan(self.render_prompt(prefix, previous), best, self._cost(prefix, previous),
                         previous_trimmed=trimmed)
        # Not even one whole event fits: include it cut down to the room that is left.
        room = max(1, budget - base - tokens.TOKENS_PER_MESSAGE)
        first = truncate_middle(lines[0], room)
        while self._cost([first], previous) > budget and room > 1:
            room = max(1, room * 3 // 4)
            first = truncate_middle(lines[0], room)
        return _Plan(self.render_prompt([first], previous), 1, self._cost([first], previous),
                     truncated_events=1, previous_trimmed=trimmed)

    def plan_fork(self, parent: ModelRequest, budget: int) -> _Plan | None:
        """The parent request's messages plus one summary instruction, if it can be made to fit.

        Retreat order: drop the tool declarations, then replace tool payloads (results and call
        arguments) largest first. ``None`` when even that does not fit (use standalone).
        """
        instruction = FORK_PROMPT
        if self.policy.max_summary_words > 0:
            instruction += " " + WORD_LIMIT_LINE.format(max_summary_words=self.policy.max_summary_words)
        instruction += "\n\nSummary:"
        messages = [*parent.messages, Message.user(instruction)]
        tools_decl = list(parent.tools)
        cost = tokens.count_messages(messages, tools_decl or None)
        if cost <= budget:
            return _Plan(messages, -1, cost, tools=tools_decl, mode="fork")
        tools_decl = []
        cost = tokens.count_messages(messages)
        if cost <= budget:
            return _Plan(messages, -1, cost, mode="fork")
        payloads = []
        for i, m in enumerate(messages[:-1]):
            if m.role == "tool":
                payloads.append((tokens.count_text(m.content), i))
            elif m.tool_calls:
                payloads.append((sum(tokens.count_text(c.arguments) for c in m.tool_calls), i))
        for _, i in sorted(payloads, reverse=True):
            m = messages[i]
            if m.role == "tool":
                messages[i] = m.with_content(
                    f"[tool result omitted to fit the summary request; tool_name={m.name}; "
                    f"tool_call_id={m.tool_call_id}]"
                )
            else:
                messages[i] = replace(m, tool_calls=tuple(
                    replace(c, arguments=CURRENT_RUN_ARGS_NOTE) for c in m.tool_calls))
            cost = tokens.count_messages(messages)
            if cost <= budget:
                return _Plan(messages, -1, cost, mode="fork")
        return None

    # -- calling the model -----------------------------------------------------------------------

    async def _call(self, plan: _Plan) -> str:
        request = ModelRequest(messages=plan.messages, tools=plan.tools, config=self.generation(),
                               purpose="summary")
        response = await self.model.generate(request)
        if response.message.tool_calls and not response.message.content:
            return ""
        text = response.message.content or ""
        if self.policy.prompt == "nine_section" or "<summary>" in text:
            text = strip_structured_summary(text)
        return text.strip()

    def select_events(self, delta: Sequence[Event], previous: str) -> list[Event]:
        """Apply ``skip_recent``; an input with no user message and no previous summary is empty."""
        events = list(delta)
        if self.policy.skip_recent:
            events = events[: max(0, len(events) - self.policy.skip_recent)]
        if not events:
            return []
        if not previous and not any(e.role == "user" and e.text for e in events):
            return []
        return events

    async def summarize(self, delta: Sequence[Event], previous_summary: str = "", *,
                        parent_request: ModelRequest | None = None) -> SummaryOutcome:
        """Summarise ``delta`` on top of ``previous_summary``.

        Returns the text and how many leading delta events it covers. Empty text means "do not
        update". A context-length error or an empty reply is retried once, standalone, at half
        the budget; a second failure propagates (the caller leaves the old summary untouched).
        """
        events = self.select_events(delta, previous_summary)
        budget = self.input_budget
        outcome = SummaryOutcome(text="", covered=0, budget=budget, prompt_version=self.prompt_version)
        if not events:
            return outcome
        plan: _Plan | None = None
        if self.policy.cache_safe_fork and parent_request is not None and not self.policy.skip_recent:
            plan = self.plan_fork(parent_request, budget)
            if plan is not None:
                plan.covered = len(events)
                outcome.prompt_version = FORK_PROMPT_VERSION
        if plan is None:
            plan = self.plan_standalone(events, previous_summary, budget)
        failure: Exception | None = None
        text = ""
        try:
            outcome.model_calls += 1
            text = await self._call(plan)
        except ContextLengthError as exc:
            failure = exc
        if not text:
            half = max(1, budget // 2)
            log.info("summary retry at half budget (%d tokens) after %s", half,
                     f"{type(failure).__name__}: {failure}" if failure else "an empty reply")
            plan = self.plan_standalone(events, previous_summary, half)
            outcome.retried = True
            outcome.budget = half
            outcome.prompt_version = self.prompt_version
            outcome.model_calls += 1
            text = await self._call(plan)
        outcome.text = text
        outcome.covered = plan.covered if text else 0
        outcome.input_tokens = plan.input_tokens
        outcome.mode = plan.mode
        outcome.truncated_events = plan.truncated_events
        outcome.previous_trimmed = plan.previous_trimmed
        return outcome

