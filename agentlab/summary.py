"""Rolling session Summary: triggers, the summariser, the rolling update with its boundary,
per-scope locks, the background worker, and the injection of the summary into requests.

Three words stay distinct here. *History* is the ledger of events and is never rewritten. The
*Summary* is durable rolling state per filter key, anchored to the last event it covers by a
``SummaryBoundary``. The *context* is what one model call is shown: instruction + summary +
the events after the boundary + the current input.

A rolling update reads only the *delta* (events after the boundary), with the previous summary
in front of it as a synthetic system event, asks the summary model for new text, and writes text
and boundary together, only when the text is non-empty. When the delta does not fit the summary
model's input budget, only the longest prefix of whole events that fits is summarised and the
boundary advances that far; the next update continues from there. That is what lets a model with
a small window summarise a long session in several rolling steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from agentlab import progress
from agentlab.events import Event, Message
from agentlab.model import tokens
from agentlab.model.base import ContextLengthError, GenerationConfig, Model, ModelRequest
from agentlab.policy import PolicyJSON
from agentlab.runtime.context import in_filter, is_history_event
from agentlab.session.base import FULL_SESSION_KEY, Session, SessionService, Summary, SummaryBoundary

if TYPE_CHECKING:
    from agentlab.runtime.context import RequestDraft
    from agentlab.runtime.invocation import Invocation

log = logging.getLogger(__name__)

InjectionMode = Literal["system", "user"]
ChecksMode = Literal["all", "any"]

#: Window assumed when neither the run, the agent's model nor the summary model states one. Every
#: built-in backend states its window (an HTTP model resolves it from its server or stops), so
#: this is reached only by a custom Model whose ``info.context_window`` is 0.
FALLBACK_CONTEXT_WINDOW = 8192

# ---------------------------------------------------------------------------------------------
# Prompts (paraphrased from the reference; every prompt carries a version string)
# ---------------------------------------------------------------------------------------------

SUMMARY_SYSTEM_PROMPT = "You write faithful, compact summaries of conversations. You never invent facts."

COMPACT_PROMPT_VERSION = "compact-v1"
COMPACT_PROMPT = """\
Read the conversation below between a user and an assistant (with any tool calls and tool \
results) and write a short summary of what will be useful for continuing it later.
- Be brief: keep goals, facts, names, numbers, decisions and open tasks; drop small talk.
- Only state what the conversation says; do not invent anything.
- Do not add new instructions, API rules, fetching rules or pre-loaded data of your own.
- If a message or tool result was cut short, left out or failed, say so; do not present it as \
complete evidence.
{word_limit_line}
<conversation>
{conversation_text}
</conversation>

Summary:"""

NINE_SECTION_PROMPT_VERSION = "nine_section-v1"
NINE_SECTION_PROMPT = """\
Summarise the conversation below so that the work can be continued without it. Use text only.
First write an <analysis> block that walks through the conversation in order. Then write a \
<summary> block with exactly these nine numbered sections:
1. Primary request and intent: what the user asked for, in detail.
2. Key technical concepts: technologies, terms and ideas that came up.
3. Files and code sections: files, code or data looked at or changed, and why they matter.
4. Errors and fixes: problems met and how they were resolved.
5. Problem solving: what was worked out and what is still being investigated.
6. All user messages: every user message that is not a tool result, in order and word for \
word. This section is exempt from any length limit.
7. Pending tasks: what is still open.
8. Current work: what was being done right before this summary.
9. Optional next step: only if it follows directly from the user's latest explicit request; \
quote the recent text it is based on so the task does not drift.
{word_limit_line}
<conversation>
{conversation_text}
</conversation>

Summary:"""

CUSTOM_PROMPT_VERSION_PREFIX = "custom"

#: Added to a built-in prompt when ``max_summary_words`` > 0.
WORD_LIMIT_LINE = "Keep the summary under {max_summary_words} words."

#: Appended as the single extra user message of a cache-safe fork.
FORK_PROMPT_VERSION = "fork-v1"
FORK_PROMPT = (
    "Now summarise the user/assistant/tool conversation above so that it can be continued later. "
    "Keep goals, decisions, constraints, open tasks, tool results and key facts. Do not call tools, "
    "do not answer the latest request, and do not treat system or tool instructions as facts."
)

#: The synthetic head event of a rolling update: the previous summary, as a system line.
PREVIOUS_SUMMARY_LABEL = "Summary of the conversation before this point:"

# Injection wrappers (paraphrased): the summary may be outdated; the conversation wins.
SYSTEM_INJECTION_TEMPLATE = (
    "Below is a short summary of your earlier interactions in this conversation.\n"
    "<summary_of_previous_interactions>\n{summary}\n</summary_of_previous_interactions>\n"
    "This summary may be out of date. Whenever it disagrees with the conversation that follows, "
    "trust the conversation."
)
USER_INJECTION_TEMPLATE = (
    "Context carried over from earlier interactions:\n"
    "<summary_of_previous_interactions>\n{summary}\n</summary_of_previous_interactions>\n"
    "Use it as background only; if it conflicts with this conversation, this conversation wins."
)

#: Placeholder for a tool result of the current run that a summary has absorbed (same-turn resume).
CURRENT_RUN_RESULT_PLACEHOLDER = (
    "[tool result left out of the raw history] This call already succeeded earlier in this "
    "request and its result has been folded into the summary above. Use the summary or recovery "
    "hints before repeating the work.\nreason: current_invocation_summary"
)
CURRENT_RUN_ARGS_NOTE = json.dumps({"note": "arguments omitted; this call is covered by the summary"})

PROMPT_PLACEHOLDERS = ("conversation_text", "previous_summary", "max_summary_words")
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
BUILTIN_PROMPTS = {"compact": (COMPACT_PROMPT, COMPACT_PROMPT_VERSION),
                   "nine_section": (NINE_SECTION_PROMPT, NINE_SECTION_PROMPT_VERSION)}


def _stable_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def validate_prompt_template(template: str, max_summary_words: int) -> None:
    """Check a custom template up front; raise ``ValueError`` naming what is wrong."""
    names = _PLACEHOLDER_RE.findall(template)
    unknown = sorted({n for n in names if n not in PROMPT_PLACEHOLDERS})
    if unknown:
        raise ValueError(
            f"summary prompt template has unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)}; "
            f"allowed: {{conversation_text}}, {{previous_summary}}, {{max_summary_words}}"
        )
    if "conversation_text" not in names:
        raise ValueError("summary prompt template must contain {conversation_text}")
    if max_summary_words > 0 and "max_summary_words" not in names:
        raise ValueError(
            f"summary prompt template must contain {{max_summary_words}} when max_summary_words="
            f"{max_summary_words} (set it to 0 or add the placeholder)"
        )


# ---------------------------------------------------------------------------------------------
# Policy
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SummaryPolicy(PolicyJSON):
    """Every knob of the rolling summary. Defaults are the reference defaults.

    Trigger checks are off unless set (the reference has no default check: with no check the
    summary is refreshed whenever there is new content). Set several and they combine all-of
    (``checks_mode="all"``, the reference default) or any-of.
    """

    #: Context-ratio check: fire when previous summary + delta exceed ``context_ratio`` x the
    #: resolved window (reference ratio 0.5 when the check is used). ``None`` = check off.
    context_ratio: float | None = None
    #: Floor of the context-ratio threshold, in tokens (reference 2,000).
    context_floor_tokens: int = 2000
    #: Window used when neither the run, the agent's model nor the summary model states one (8,192).
    context_fallback_window: int = FALLBACK_CONTEXT_WINDOW
    #: Fire when the delta has strictly more than N message events. ``None`` = check off.
    events_over: int | None = None
    #: Fire when the delta has strictly more than N tokens. ``None`` = check off.
    tokens_over: int | None = None
    #: Fire when the conversation sat idle for more than N seconds before the current request
    #: (or, outside a run, since its last event). ``None`` = check off.
    idle_over: float | None = None
    #: How several checks combine: "all" (reference default) or "any".
    checks_mode: ChecksMode = "all"
    #: "compact" (default), "nine_section", or a custom template using {conversation_text}
    #: (required), {previous_summary} and {max_summary_words}.
    prompt: str = "compact"
    #: Word limit stated in the prompt; 0 = none (reference: optional, off).
    max_summary_words: int = 0
    #: Leave the last N delta events out of the summary (they stay raw in the context); 0 = off.
    skip_recent: int = 0
    #: Where the summary goes in the request: "system" (reference default) or "user".
    injection: InjectionMode = "system"
    #: Summarise by forking the parent request (same prefix, one appended instruction) when one
    #: is available, so a provider's prompt cache can be reused (reference: off).
    cache_safe_fork: bool = False
    #: Summariser input budget as a fraction of the summary model's window (reference 0.7).
    input_budget_ratio: float = 0.7
    #: Upper bound on the summary's output tokens; ``None`` = the model's default.
    max_output_tokens: int | None = None
    #: Cut each tool result in the summariser's input to at most this many tokens (head + tail
    #: around a marker); 0 = off. Not a reference knob (the reference leaves this to a
    #: pre-summary hook); it keeps a small summary model from spending its budget on payloads.
    input_tool_result_max_tokens: int = 0
    #: Also refresh the full-session summary when a branch filter key is summarised (cascade).
    cascade_full_session: bool = False
    #: Branch filter keys that may be summarised (hierarchical prefix match either way); empty = all.
    filter_key_allowlist: tuple[str, ...] = ()
    #: Background summary workers (reference 3).
    workers: int = 3
    #: Queue size per worker (reference 100); a full queue runs the job in the caller.
    queue_size: int = 100
    #: Seconds one background summary job may take (reference 60).
    job_timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.context_ratio is not None and not 0 < self.context_ratio <= 1:
            raise ValueError(f"SummaryPolicy.context_ratio must be in (0, 1], got {self.context_ratio}")
        if not 0 < self.input_budget_ratio <= 1:
            raise ValueError(f"SummaryPolicy.input_budget_ratio must be in (0, 1], got {self.input_budget_ratio}")
        if self.checks_mode not in ("all", "any"):
            raise ValueError(f"SummaryPolicy.checks_mode must be 'all' or 'any', got {self.checks_mode!r}")
        if self.injection not in ("system", "user"):
            raise ValueError(f"SummaryPolicy.injection must be 'system' or 'user', got {self.injection!r}")
        for name in ("events_over", "tokens_over", "idle_over"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"SummaryPolicy.{name} must be >= 0 or None, got {value}")
        for name in ("max_summary_words", "skip_recent", "context_floor_tokens", "input_tool_result_max_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"SummaryPolicy.{name} must be >= 0, got {getattr(self, name)}")
        if self.context_fallback_window <= 0:
            raise ValueError("SummaryPolicy.context_fallback_window must be > 0")
        if self.workers < 1 or self.queue_size < 1 or self.job_timeout <= 0:
            raise ValueError("SummaryPolicy.workers and queue_size must be >= 1 and job_timeout > 0")
        if self.prompt not in BUILTIN_PROMPTS:
            if "{" not in self.prompt and len(self.prompt.split()) <= 1:
                # One bare word is a misspelt built-in name, not a template without placeholders.
                raise ValueError(
                    f"SummaryPolicy.prompt: unknown built-in prompt {self.prompt!r}; built-in prompts: "
                    f"{', '.join(BUILTIN_PROMPTS)} (or a custom template containing {{conversation_text}})")
            validate_prompt_template(self.prompt, self.max_summary_words)
        # a JSON round-trip turns tuples into lists; keep the frozen value hashable
        object.__setattr__(self, "filter_key_allowlist", tuple(self.filter_key_allowlist))

    @property
    def prompt_version(self) -> str:
        builtin = BUILTIN_PROMPTS.get(self.prompt)
        if builtin is not None:
            return builtin[1]
        return f"{CUSTOM_PROMPT_VERSION_PREFIX}-{_stable_hash(self.prompt)}"

    def trigger_checks(self) -> list[TriggerCheck]:
        checks: list[TriggerCheck] = []
        if self.context_ratio is not None:
            checks.append(ContextRatioCheck(self.context_ratio, self.context_floor_tokens))
        if self.events_over is not None:
            checks.append(EventsOverCheck(self.events_over))
        if self.tokens_over is not None:
            checks.append(TokensOverCheck(self.tokens_over))
        if self.idle_over is not None:
            checks.append(IdleOverCheck(self.idle_over))
        return checks

    def allows_key(self, filter_key: str) -> bool:
        """Whether this filter key may be summarised (the full-session key always may)."""
        if not filter_key or not self.filter_key_allowlist:
            return True
        return any(_hierarchical_match(filter_key, allowed) for allowed in self.filter_key_allowlist)


def _hierarchical_match(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


# ---------------------------------------------------------------------------------------------
# Trigger checks
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TriggerObservation:
    """What the checks look at for one candidate update."""

    #: Message events after the boundary (under the filter key).
    delta_events: int
    #: Tokens of those events.
    delta_tokens: int
    #: Tokens of the previous summary (part of what the model sees next to the delta).
    previous_summary_tokens: int = 0
    #: Resolved context window (run override -> agent model -> summary model -> fallback).
    context_window: int = FALLBACK_CONTEXT_WINDOW
    #: Idle gap before the current request, or time since the last delta event.
    idle_seconds: float | None = None


@runtime_checkable
class TriggerCheck(Protocol):
    name: str

    def passes(self, obs: TriggerObservation) -> bool: ...


@dataclass(frozen=True)
class ContextRatioCheck:
    ratio: float = 0.5
    floor_tokens: int = 2000
    name: str = "context_ratio"

    def threshold(self, window: int) -> int:
        return max(int(window * self.ratio), self.floor_tokens)

    def passes(self, obs: TriggerObservation) -> bool:
        return obs.delta_tokens + obs.previous_summary_tokens > self.threshold(obs.context_window)


@dataclass(frozen=True)
class EventsOverCheck:
    threshold: int
    name: str = "events_over"

    def passes(self, obs: TriggerObservation) -> bool:
        return obs.delta_events > self.threshold


@dataclass(frozen=True)
class TokensOverCheck:
    threshold: int
    name: str = "tokens_over"

    def passes(self, obs: TriggerObservation) -> bool:
        return obs.delta_tokens > self.threshold


@dataclass(frozen=True)
class IdleOverCheck:
    seconds: float
    name: str = "idle_over"

    def passes(self, obs: TriggerObservation) -> bool:
        return obs.idle_seconds is not None and obs.idle_seconds > self.seconds


def checks_pass(checks: Sequence[TriggerCheck], mode: ChecksMode, obs: TriggerObservation) -> bool:
    """No checks: fire whenever there is new content. Otherwise all-of or any-of."""
    if obs.delta_events == 0:
        return False
    if not checks:
        return True
    if mode == "any":
        return any(c.passes(obs) for c in checks)
    return all(c.passes(obs) for c in checks)


# ---------------------------------------------------------------------------------------------
# Rendering events into summariser input
# ---------------------------------------------------------------------------------------------


def render_event_line(event: Event) -> str:
    """One event as a conversation line: ``author: text`` with tool calls/results in brackets."""
    m = event.message
    if m is None:
        return ""
    if m.role == "tool":
        body = f"[{m.name or 'tool'} returned: {m.content}]"
    elif m.tool_calls:
        calls = []
        for c in m.tool_calls:
            args = (c.arguments or "").strip()
            calls.append(f"[Called tool: {c.name} with args: {args}]" if args and args != "{}"
                         else f"[Called tool: {c.name}]")
        body = " ".join(([m.content] if m.content else []) + calls)
    else:
        body = m.content
    return f"{event.author or m.role}: {body}"


def previous_summary_event(text: str) -> Event:
    """The synthetic head event of a rolling update."""
    return Event(author="system", choices=[Message.system(f"{PREVIOUS_SUMMARY_LABEL}\n{text}")],
                 id="summary:previous")


def truncate_middle(text: str, max_tokens: int, marker: str = "[... {n} characters omitted ...]") -> str:
    """Keep a head and a tail of ``text`` around a marker so it fits ``max_tokens`` (binary search)."""
    if tokens.count_text(text) <= max_tokens:
        return text

    def build(keep: int) -> str:
        head = keep // 2
        tail = keep - head
        omitted = len(text) - keep
        return text[:head] + "\n" + marker.format(n=omitted) + "\n" + (text[-tail:] if tail else "")

    low, high = 0, len(text) - 1
    best = build(0)
    while low <= high:
        mid = (low + high) // 2
        candidate = build(mid)
        if tokens.count_text(candidate) <= max_tokens:
            best, low = candidate, mid + 1
        else:
            high = mid - 1
    return best


def strip_structured_summary(text: str) -> str:
    """Drop an <analysis> block and unwrap a <summary> block (the nine-section post-step)."""
    text = re.sub(r"<analysis>.*?</analysis>", "", text, flags=re.DOTALL | re.IGNORECASE)
    found = re.search(r"<summary>(.*?)(?:</summary>|$)", text, flags=re.DOTALL | re.IGNORECASE)
    if found:
        text = found.group(1)
    return text.strip()


# ---------------------------------------------------------------------------------------------
# The summariser
# ---------------------------------------------------------------------------------------------


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
        info = getattr(self.model, "info", None)
        return int(getattr(info, "context_window", 0) or 0) or self.policy.context_fallback_window

    @property
    def input_budget(self) -> int:
        return int(self.window * self.policy.input_budget_ratio)

    def generation(self) -> GenerationConfig:
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


# ---------------------------------------------------------------------------------------------
# Locks: one per (app, user, session, filter key), released and forgotten when unused
# ---------------------------------------------------------------------------------------------

LockKey = tuple[str, str, str, str]


class _ScopeLocks:
    """Process-local locks with a reference count, so idle scopes cost nothing."""

    def __init__(self) -> None:
        self._locks: dict[LockKey, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: LockKey) -> AsyncIterator[None]:
        lock, refs = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, refs + 1)
        try:
            async with lock:
                yield
        finally:
            lock, refs = self._locks[key]
            if refs <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, refs - 1)

    def __len__(self) -> int:
        return len(self._locks)


#: Shared by every worker in the process: two workers on one session still serialise.
SCOPE_LOCKS = _ScopeLocks()


# ---------------------------------------------------------------------------------------------
# The worker: rolling update, cascade, background pool, runner hook
# ---------------------------------------------------------------------------------------------


def delta_after_boundary(session: Session, boundary: SummaryBoundary | None, filter_key: str) -> list[Event]:
    """Message events after the boundary visible under ``filter_key`` (the summariser's input)."""
    return [e for e in session.events_after_boundary(boundary)
            if is_history_event(e) and in_filter(e.filter_key, filter_key)]


def _event_tokens(event: Event) -> int:
    return event.token_count if event.token_count is not None else tokens.count_event(event)


@dataclass
class _Job:
    session: Session
    filter_key: str
    context_window: int | None
    idle_seconds: float | None
    context: contextvars.Context


@dataclass
class WorkerStats:
    enqueued: int = 0
    ran_in_caller: int = 0
    completed: int = 0
    advanced: int = 0
    failed: int = 0
    timed_out: int = 0
    model_calls: int = 0
    skipped_no_delta: int = 0
    skipped_by_trigger: int = 0
    #: One record per summariser run (input tokens, covered events, ...), for analysis.
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: The latest summariser error (a failed update is logged and swallowed; callers that must
    #: explain why a summary stopped advancing read it here).
    last_error: Exception | None = None


class SummaryWorker:
    """Runs rolling summary updates: on demand (:meth:`summarize`) and in the background.

    The background pool has ``policy.workers`` workers, each with a bounded queue; a job goes to
    the worker chosen by its session, so one session's jobs stay in order. A full queue runs the
    job in the caller. Each job is limited to ``policy.job_timeout`` seconds.
    """

    def __init__(self, session_service: SessionService, summarizer: Summarizer,
                 policy: SummaryPolicy | None = None, *, checks: Sequence[TriggerCheck] | None = None) -> None:
        self.session_service = session_service
        self.summarizer = summarizer
        self.policy = policy or summarizer.policy
        self.checks = list(checks) if checks is not None else self.policy.trigger_checks()
        self.stats = WorkerStats()
        #: Summariser runs per scope, for progress reports ("summary step k").
        self._steps: dict[LockKey, int] = {}
        self._queues: list[asyncio.Queue[_Job]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._pending = 0

    # -- the rolling update ----------------------------------------------------------------------

    async def summarize(self, session: Session, filter_key: str = FULL_SESSION_KEY, force: bool = False, *,
                        context_window: int | None = None, parent_request: ModelRequest | None = None,
                        idle_seconds: float | None = None) -> bool:
        """Update the summary of ``filter_key`` (and cascade targets); True iff a boundary advanced.

        ``force`` skips the trigger checks; with no new events there is still nothing to summarise
        and no model call. A partial (safe-prefix) advance returns True; call again to continue.
        """
        targets: list[str] = []
        if self.policy.allows_key(filter_key):
            targets.append(filter_key)
        if filter_key and self.policy.cascade_full_session:
            targets.append(FULL_SESSION_KEY)
        if not targets:
            return False
        kwargs = dict(force=force, context_window=context_window, parent_request=parent_request,
                      idle_seconds=idle_seconds)
        if len(targets) == 2 and filter_key in targets:
            history = [e for e in session.events if is_history_event(e)]
            if all(in_filter(e.filter_key, filter_key) for e in history):
                # The branch sees every event: summarise once and copy to the full-session key.
                return await self._summarize_key(session, filter_key, copy_to_full=True, **kwargs)
        results = await asyncio.gather(*(self._summarize_key(session, key, **kwargs) for key in targets))
        return any(results)

    async def _current_summary(self, session: Session, filter_key: str) -> Summary | None:
        stored = await self.session_service.get_summary(session, filter_key)
        in_memory = session.summaries.get(filter_key)
        if stored is None:
            return in_memory
        if in_memory is not None and in_memory.updated_at > stored.updated_at:
            # an in-memory advance whose persistence failed is still the newest state we know
            return in_memory
        return stored

    async def _summarize_key(self, session: Session, filter_key: str, *, force: bool,
                             context_window: int | None, parent_request: ModelRequest | None,
                             idle_seconds: float | None, copy_to_full: bool = False) -> bool:
        key = (session.app_name, session.user_id, session.id, filter_key)
        async with SCOPE_LOCKS.hold(key):
            previous = await self._current_summary(session, filter_key)
            previous_text = previous.text if previous else ""
            previous_boundary = previous.boundary if previous else None
            delta = delta_after_boundary(session, previous_boundary, filter_key)
            if not delta and not force:
                self.stats.skipped_no_delta += 1
                return False
            if not force:
                obs = self.observe(delta, previous_text, context_window, idle_seconds)
                if not checks_pass(self.checks, self.policy.checks_mode, obs):
                    self.stats.skipped_by_trigger += 1
                    return False
            started = time.perf_counter()
            try:
                outcome = await self.summarizer.summarize(delta, previous_text, parent_request=parent_request)
            except Exception as exc:  # the old summary stays; a failed update is not fatal to a run
                self.stats.failed += 1
                self.stats.last_error = exc
                log.warning("summary update failed for %s (old summary kept): %s: %s",
                            _describe(key), type(exc).__name__, exc)
                return False
            self.stats.model_calls += outcome.model_calls
            self.stats.runs.append({
                "filter_key": filter_key, "delta_events": len(delta),
                "delta_tokens": sum(_event_tokens(e) for e in delta),
                "previous_summary_tokens": tokens.count_text(previous_text),
                "input_tokens": outcome.input_tokens, "budget": outcome.budget, "covered": outcome.covered,
                "mode": outcome.mode, "retried": outcome.retried, "truncated_events": outcome.truncated_events,
                "summary_tokens": tokens.count_text(outcome.text), "prompt_version": outcome.prompt_version,
                "latency_ms": round((time.perf_counter() - started) * 1000, 3),
            })
            self._report_step(session, key, delta, outcome.covered if outcome.text else 0)
            if not outcome.text:
                return False
            boundary = previous_boundary
            if delta and outcome.covered > 0:
                last = delta[min(outcome.covered, len(delta)) - 1]
                boundary = SummaryBoundary(filter_key=filter_key, cutoff_at=last.timestamp, last_event_id=last.id)
            summary = Summary(text=outcome.text, updated_at=time.time(), boundary=boundary)
            advanced = boundary is not None and boundary != previous_boundary
            await self._write(session, filter_key, summary)
            if copy_to_full:
                full_key = (session.app_name, session.user_id, session.id, FULL_SESSION_KEY)
                async with SCOPE_LOCKS.hold(full_key):
                    copied = Summary(text=summary.text, updated_at=summary.updated_at,
                                     boundary=SummaryBoundary(FULL_SESSION_KEY, boundary.cutoff_at,
                                                              boundary.last_event_id) if boundary else None)
                    await self._write(session, FULL_SESSION_KEY, copied)
            if advanced:
                self.stats.advanced += 1
            return advanced

    def _report_step(self, session: Session, key: LockKey, delta: Sequence[Event], covered: int) -> None:
        """Progress of a (rolling) summary of this scope: step k, history tokens covered so far.

        The number of steps is not known in advance (it depends on how much of the remaining
        history each safe prefix holds), so the step has no total; the tokens do.
        """
        self._steps[key] = step = self._steps.get(key, 0) + 1
        if not progress.listening():
            return
        history = delta_after_boundary(session, None, key[3])
        total = sum(_event_tokens(e) for e in history)
        remaining = sum(_event_tokens(e) for e in delta[covered:])
        progress.report_progress("summary", step, tokens=total - remaining, tokens_total=total)

    async def _write(self, session: Session, filter_key: str, summary: Summary) -> None:
        try:
            await self.session_service.write_summary(session, filter_key, summary)
        except Exception as exc:
            # Keep the advance in memory so this run's next request still benefits.
            session.summaries[filter_key] = summary
            log.warning("summary for %s advanced in memory but could not be persisted: %s: %s",
                        _describe((session.app_name, session.user_id, session.id, filter_key)),
                        type(exc).__name__, exc)

    def resolve_window(self, context_window: int | None) -> int:
        if context_window:
            return int(context_window)
        return self.summarizer.window or self.policy.context_fallback_window

    def observe(self, delta: Sequence[Event], previous_text: str, context_window: int | None,
                idle_seconds: float | None) -> TriggerObservation:
        if idle_seconds is None and delta:
            idle_seconds = time.time() - delta[-1].timestamp
        return TriggerObservation(
            delta_events=len(delta),
            delta_tokens=sum(_event_tokens(e) for e in delta),
            previous_summary_tokens=tokens.count_text(previous_text),
            context_window=self.resolve_window(context_window),
            idle_seconds=idle_seconds,
        )

    # -- the runner hook -------------------------------------------------------------------------

    @staticmethod
    def qualifies(session: Session, event: Event) -> bool:
        """Whether a persisted event may trigger a summary job (reference runner rules).

        Yes for a tool result that completes its tool round, and for a final assistant answer.
        Never for user input, a bare tool call, an error, an invalid or partial event, or an event
        marked ``metadata["skip_summarization"]``.
        """
        if event.error or event.partial or not event.done or not event.has_valid_content():
            return False
        if event.metadata.get("skip_summarization"):
            return False
        if event.is_final_response():
            return True
        if not event.is_tool_result():
            return False
        return _tool_round_complete(session, event)

    async def on_event_appended(self, inv: Invocation, event: Event) -> None:
        if not self.qualifies(inv.session, event):
            return
        await self.enqueue(inv.session, inv.filter_key, context_window=_invocation_window(inv, self),
                           idle_seconds=_idle_before_request(inv))

    # -- the background pool ---------------------------------------------------------------------

    def _ensure_started(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._tasks:
            return
        self._loop = loop
        self._pending = 0
        self._queues = [asyncio.Queue(maxsize=self.policy.queue_size) for _ in range(self.policy.workers)]
        self._tasks = [loop.create_task(self._work(q), name=f"summary-worker-{i}")
                       for i, q in enumerate(self._queues)]

    async def enqueue(self, session: Session, filter_key: str = FULL_SESSION_KEY, *,
                      context_window: int | None = None, idle_seconds: float | None = None) -> None:
        """Queue a non-forced update; a full queue (or a closed worker) runs it in the caller."""
        job = _Job(session, filter_key, context_window, idle_seconds, contextvars.copy_context())
        if self._closed:
            self.stats.ran_in_caller += 1
            await self._run_job(job)
            return
        self._ensure_started()
        queue = self._queues[hash((session.app_name, session.user_id, session.id)) % len(self._queues)]
        try:
            queue.put_nowait(job)
            self._pending += 1
            self.stats.enqueued += 1
        except asyncio.QueueFull:
            self.stats.ran_in_caller += 1
            await self._run_job(job)

    async def _work(self, queue: asyncio.Queue[_Job]) -> None:
        while True:
            job = await queue.get()
            try:
                # Run in the enqueuer's context so call observers attribute summary calls correctly.
                task = job.context.run(asyncio.ensure_future, self._run_job(job))
                await task
            except asyncio.CancelledError:
                raise
            except Exception:  # _run_job already logs; never let one job kill the worker
                pass
            finally:
                self._pending -= 1
                queue.task_done()

    async def _run_job(self, job: _Job) -> None:
        try:
            await asyncio.wait_for(
                self.summarize(job.session, job.filter_key, False, context_window=job.context_window,
                               idle_seconds=job.idle_seconds),
                timeout=self.policy.job_timeout,
            )
            self.stats.completed += 1
        except asyncio.TimeoutError:
            self.stats.timed_out += 1
            log.warning("summary job for session %s timed out after %.1fs", job.session.id,
                        self.policy.job_timeout)
        except Exception as exc:
            self.stats.failed += 1
            log.warning("summary job for session %s failed: %s: %s", job.session.id, type(exc).__name__, exc)

    async def drain(self) -> None:
        """Wait until every queued job has finished."""
        while self._pending:
            for q in self._queues:
                await q.join()

    async def close(self) -> None:
        """Finish queued work, then stop the workers; later jobs run in the caller."""
        try:
            if self._loop is not None and self._loop is asyncio.get_running_loop():
                await self.drain()
        finally:
            self._closed = True
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                    await task
            self._tasks = []


def _describe(key: LockKey) -> str:
    app, user, session, filter_key = key
    return f"app={app!r} user={user!r} session={session!r} filter_key={filter_key!r}"


def _tool_round_complete(session: Session, result: Event) -> bool:
    """A tool result completes its round when every call of its assistant message has a result."""
    call_id = result.message.tool_call_id if result.message else None
    answered: set[str] = set()
    for e in reversed(session.events):
        m = e.message
        if m is None:
            continue
        if m.role == "tool" and m.tool_call_id:
            answered.add(m.tool_call_id)
        elif m.role == "assistant" and m.tool_calls and any(c.id == call_id for c in m.tool_calls):
            return all(c.id in answered for c in m.tool_calls)
    return True  # the call is not in view; treat the result as complete


def _invocation_window(inv: Invocation, worker: SummaryWorker | None = None) -> int | None:
    """Run override -> agent model's window -> (None: the worker falls back to the summary model)."""
    if inv.options.context_window:
        return int(inv.options.context_window)
    info = getattr(getattr(inv.agent, "model", None), "info", None)
    window = int(getattr(info, "context_window", 0) or 0)
    return window or None


def _idle_before_request(inv: Invocation) -> float | None:
    """The gap between the current user input and the event before it (the runner's observation)."""
    current = inv.user_event
    if current is None:
        return None
    previous: Event | None = None
    for e in reversed(inv.session.events):
        if e.id == current.id:
            continue
        if e.timestamp <= current.timestamp:
            previous = e
            break
    return None if previous is None else max(0.0, current.timestamp - previous.timestamp)


def summary_worker_for(agent: Any, session_service: SessionService) -> SummaryWorker:
    """The worker an agent's policies ask for: its ``summary`` policy and ``summary_model``."""
    policy: SummaryPolicy = agent.summary
    model: Model = getattr(agent, "summary_model", None) or agent.model
    return SummaryWorker(session_service, Summarizer(model, policy), policy)


# ---------------------------------------------------------------------------------------------
# Injection into the next request
# ---------------------------------------------------------------------------------------------


def pick_summary(session: Session, filter_key: str) -> Summary | None:
    """The exact key's summary, else the full-session summary."""
    found = session.summaries.get(filter_key)
    if found is not None and found.text:
        return found
    if filter_key:
        full = session.summaries.get(FULL_SESSION_KEY)
        if full is not None and full.text:
            return full
    return None


def render_injection(summary_text: str, mode: InjectionMode) -> str:
    template = SYSTEM_INJECTION_TEMPLATE if mode == "system" else USER_INJECTION_TEMPLATE
    return template.format(summary=summary_text)


class SummaryInjectionProcessor:
    """Request processor (after HistoryProcessor): summary + only the events after its boundary.

    When the boundary reaches into the current run (a synchronous summary absorbed this run's
    tool round), the latest complete tool round of the run is re-projected with its payloads
    replaced by a short note, so the model knows the work was done and does not repeat it.
    """

    name = "summary"

    def __init__(self, policy: SummaryPolicy | None = None) -> None:
        self.policy = policy or SummaryPolicy()

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        summary = pick_summary(inv.session, inv.filter_key)
        if summary is None:
            return
        draft.summary = summary
        after = inv.session.events_after_boundary(summary.boundary)
        after_ids = {e.id for e in after}
        # draft.events follows ledger order, so the kept events are a suffix: walk back from the end.
        cut = len(draft.events)
        while cut > 0 and draft.events[cut - 1].id in after_ids:
            cut -= 1
        covered, kept = draft.events[:cut], draft.events[cut:]
        draft.events = _resumed_tool_round(inv, covered) + _calls_of_split_round(covered, kept) + kept
        self.inject(draft, summary)

    def inject(self, draft: RequestDraft, summary: Summary) -> None:
        """Put the summary text into the request (the events are decided separately)."""
        draft.summary = summary
        wrapper = render_injection(summary.text, self.policy.injection)
        if self.policy.injection == "system":
            draft.system_parts.append(wrapper)
        else:
            draft.user_prefix.append(wrapper)


def _calls_of_split_round(covered: list[Event], kept: list[Event]) -> list[Event]:
    """Covered tool-call events whose results are still after the boundary.

    A safe-prefix update may end between a tool call and its result. The result is not covered,
    so it stays in the context, and it needs its call in view to stay a well-formed tool round.
    """
    pending = set()
    for e in kept:  # results of a split round sit at the very start of the kept events
        if not e.is_tool_result():
            break
        pending.add(e.message.tool_call_id)  # type: ignore[union-attr]
    if not pending:
        return []
    pulled: list[Event] = []
    # Walk back from the boundary only as far as the round goes (a round never spans a user turn),
    # so the cost does not grow with the covered history.
    for e in reversed(covered):
        m = e.message
        if m is None:
            continue
        if m.role == "user":
            break
        if m.tool_calls and any(c.id in pending for c in m.tool_calls):
            pulled.append(e)
    pulled.reverse()
    return pulled


def _resumed_tool_round(inv: Invocation, covered: list[Event]) -> list[Event]:
    """Copies of this run's latest complete tool round that the summary covered, payloads elided."""
    # This run's events are the tail of the covered part: walk back only over them.
    start = len(covered)
    while start > 0 and covered[start - 1].invocation_id == inv.id:
        start -= 1
    mine = covered[start:]
    if not any(e.is_tool_result() for e in mine):
        return []
    results = {e.message.tool_call_id: e for e in mine if e.is_tool_result() and e.message}
    for call_event in reversed(mine):
        m = call_event.message
        if m is None or not m.tool_calls or not all(c.id in results for c in m.tool_calls):
            continue
        call_copy = call_event.copy_with(
            choices=[replace(m, tool_calls=tuple(replace(c, arguments=CURRENT_RUN_ARGS_NOTE) for c in m.tool_calls))],
            metadata={**call_event.metadata, "projection": "current_invocation_summary"},
        )
        out = [call_copy]
        for c in m.tool_calls:
            result = results[c.id]
            out.append(result.copy_with(
                choices=[result.message.with_content(CURRENT_RUN_RESULT_PLACEHOLDER)],  # type: ignore[union-attr]
                metadata={**result.metadata, "projection": "current_invocation_summary", "compacted": "resume"},
            ))
        return out
    return []


__all__ = [
    "COMPACT_PROMPT",
    "COMPACT_PROMPT_VERSION",
    "FORK_PROMPT",
    "FORK_PROMPT_VERSION",
    "NINE_SECTION_PROMPT",
    "NINE_SECTION_PROMPT_VERSION",
    "ContextRatioCheck",
    "EventsOverCheck",
    "IdleOverCheck",
    "SummaryInjectionProcessor",
    "SummaryInputTooLarge",
    "SummaryOutcome",
    "SummaryPolicy",
    "SummaryWorker",
    "Summarizer",
    "TokensOverCheck",
    "TriggerCheck",
    "TriggerObservation",
    "WorkerStats",
    "checks_pass",
    "delta_after_boundary",
    "pick_summary",
    "render_event_line",
    "render_injection",
    "summary_worker_for",
]
