"""The knobs of the rolling summary (:class:`SummaryPolicy`) and its trigger checks.

A "reference" default is trpc-agent-go's (docs/sources.md#rolling-summary).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from agentlab.policy_json import PolicyJSON
from agentlab.summary.prompts import (
    BUILTIN_PROMPTS,
    CUSTOM_PROMPT_VERSION_PREFIX,
    stable_hash,
    validate_prompt_template,
)

InjectionMode = Literal["system", "user"]
ChecksMode = Literal["all", "any"]

#: Window assumed when neither the run, the agent's model nor the summary model states one. Every
#: built-in backend states its window (an HTTP model resolves it from its server or stops), so
#: this is reached only by a custom Model whose ``info.context_window`` is 0.
FALLBACK_CONTEXT_WINDOW = 8192


@dataclass(frozen=True)
class SummaryPolicy(PolicyJSON):
    """Every knob of the rolling summary. Defaults are the reference defaults.

    Plain settings: the mechanism an agent runs for it is :class:`~agentlab.summary.SummaryMechanism`
    (registered with :func:`agentlab.core.register_mechanism`, so ``LLMAgent(summary=policy)`` and
    ``mechanisms=[policy]`` both work).

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
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            # 0 once meant "the model's default" in the benchmark files; sent as max_tokens=0 it asks
            # for an empty summary, so it is refused rather than passed on.
            raise ValueError(f"SummaryPolicy.max_output_tokens must be >= 1, or none for the model's default; "
                             f"got {self.max_output_tokens}")
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
        """The version a summary made with this prompt records (built-in name, or a hash of the template)."""
        builtin = BUILTIN_PROMPTS.get(self.prompt)
        if builtin is not None:
            return builtin[1]
        return f"{CUSTOM_PROMPT_VERSION_PREFIX}-{stable_hash(self.prompt)}"

    def trigger_checks(self) -> list[TriggerCheck]:
        """The checks the set knobs switch on (none set: refresh whenever there is new content)."""
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
    """One condition of the summary trigger, judged on a :class:`TriggerObservation`."""

    @property
    def name(self) -> str:
        """The check's name in records and reports."""
        ...

    def passes(self, obs: TriggerObservation) -> bool:
        """Whether this check would let the update run."""
        ...


@dataclass(frozen=True)
class ContextRatioCheck:
    """Fire when previous summary + delta exceed ``ratio`` x the window (at least ``floor_tokens``)."""

    ratio: float = 0.5
    floor_tokens: int = 2000
    name: str = "context_ratio"

    def threshold(self, window: int) -> int:
        """The token threshold for a window: ratio x window, never under the floor."""
        return max(int(window * self.ratio), self.floor_tokens)

    def passes(self, obs: TriggerObservation) -> bool:
        """Whether this check lets the update run on ``obs``."""
        return obs.delta_tokens + obs.previous_summary_tokens > self.threshold(obs.context_window)


@dataclass(frozen=True)
class EventsOverCheck:
    """Fire when the delta has more than ``threshold`` message events."""

    threshold: int
    name: str = "events_over"

    def passes(self, obs: TriggerObservation) -> bool:
        """Whether this check lets the update run on ``obs``."""
        return obs.delta_events > self.threshold


@dataclass(frozen=True)
class TokensOverCheck:
    """Fire when the delta has more than ``threshold`` tokens."""

    threshold: int
    name: str = "tokens_over"

    def passes(self, obs: TriggerObservation) -> bool:
        """Whether this check lets the update run on ``obs``."""
        return obs.delta_tokens > self.threshold


@dataclass(frozen=True)
class IdleOverCheck:
    """Fire when the conversation sat idle for more than ``seconds``."""

    seconds: float
    name: str = "idle_over"

    def passes(self, obs: TriggerObservation) -> bool:
        """Whether this check lets the update run on ``obs``."""
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

