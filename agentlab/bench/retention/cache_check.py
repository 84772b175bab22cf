"""The prompt-cache model checked against the provider's bill: recorded Claude Code sessions, call by call.

Every response of a Claude Code log carries the usage Anthropic billed: uncached input, cache read,
cache write (:class:`agentlab.bench.datasets.claude_code.RecordedUsage`). For ``long_context`` (the
recorded history, as the loader reconstructs it) this module predicts each call's three figures
with :mod:`agentlab.model.prompt_caching` and compares them with the bill.

Two things the logs lack are estimated from the bill, and printed:

* **the tokenizer ratio** ``r`` — provider tokens per agentlab token: the sum over every pair of
  consecutive calls of the growth of the recorded prompt, over the sum of the growth of ours
  (the growth is what the log holds: the previous response and the tool results);
* **the hidden prefix** ``S`` of each session — the system prompt and tool definitions Claude Code
  sent, which are not in the log: the median over its calls of ``recorded prompt - r x ours``.

Each request is then the hidden prefix (``S / r`` tokens of ids no message has, the same in every
call of the session) followed by the messages, replayed through the profile; every token figure
is multiplied by ``r``. The per-call error is the predicted minus the recorded *cached share*
(cache read over prompt), in percentage points; the per-session cost is priced with one model's
prices (``claude-sonnet-4-5`` by default, the sessions' model) for the predicted and the recorded
figures, input side only (the output tokens are the recording's in both).

Variants (each profile is checked in each, so what a fix changed is visible):

* ``as before`` — the profile as it was: a fresh cache per session, entries never expire;
* ``warm + clock`` — the first call finds the part of the hidden prefix that the bill says it
  read already cached (another session of the same agent cached it: the recorded first calls read
  1,970 to 27,589 tokens), and the recorded times of the calls expire entries unused for longer
  than the profile's lifetime (Anthropic: 5 minutes). The first call's read is thus taken from the
  bill; its error is reported with the rest.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentlab.bench.datasets.claude_code import RecordedUsage
from agentlab.bench.datasets.trajectories import Trajectory
from agentlab.bench.scoring.metrics import percentile
from agentlab.events import Message
from agentlab.model.prices import PER_TOKENS, Price
from agentlab.model.prompt_caching import (
    PRIMING_MARKERS,
    CacheReplay,
    RequestTokens,
    get_profile,
    message_segment,
)

#: The profiles checked, and the variants of the model each is checked in.
PROFILES: tuple[str, ...] = ("anthropic", "openai")
VARIANTS: tuple[str, ...] = ("as before", "warm + clock")


@dataclass(frozen=True)
class Call:
    """One recorded call: its usage and our token count of the messages it sent."""

    traj_id: str
    step: int
    recorded: RecordedUsage
    #: agentlab tokens of the messages (thinking of the current turn included), and of that thinking alone.
    ours: int
    thinking: int
    time: float | None


@dataclass(frozen=True)
class Estimate:
    """What the bill says about what the logs lack."""

    #: Provider tokens per agentlab token (pooled over consecutive calls).
    ratio: float
    #: The same, with the thinking of the current turn left out of the reconstruction.
    ratio_without_thinking: float
    #: Median |recorded - (S + r x ours)| / recorded per call, with and without thinking.
    fit_error: float
    fit_error_without_thinking: float
    #: Hidden prefix (system prompt + tools) per session, provider tokens.
    hidden: dict[str, float] = field(default_factory=dict)


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p5, p25, median, p75, p95 (:func:`agentlab.bench.scoring.metrics.percentile`) and the mean absolute value."""
    if not values:
        return {k: None for k in ("p5", "p25", "median", "p75", "p95", "mean_abs")}
    return {"p5": percentile(values, 5), "p25": percentile(values, 25), "median": percentile(values, 50),
            "p75": percentile(values, 75), "p95": percentile(values, 95),
            "mean_abs": sum(abs(v) for v in values) / len(values)}


def recorded_calls(traj: Trajectory) -> tuple[list[Call], list[list[Message]]]:
    """The calls of one session with recorded usage, and the messages each sent (long_context)."""
    calls: list[Call] = []
    requests: list[list[Message]] = []
    messages: list[Message] = []
    ours = thinking = 0
    for i, event in enumerate(traj.events):
        usage = event.metadata.get("usage") if event.message is not None and event.message.role == "assistant" else None
        if isinstance(usage, RecordedUsage):
            calls.append(Call(traj.traj_id, i, usage, ours, thinking, event.metadata.get("time")))
            requests.append(list(messages))
        if event.message is not None:
            messages.append(event.message)
            ours += event.token_count or 0
            thinking += int(event.metadata.get("thinking_tokens") or 0)
    return calls, requests


def _ratio(sessions: Sequence[Sequence[Call]], with_thinking: bool) -> float:
    grown_rec = grown_ours = 0.0
    for calls in sessions:
        for a, b in zip(calls, calls[1:], strict=False):
            grown_rec += b.recorded.prompt_tokens - a.recorded.prompt_tokens
            grown_ours += (b.ours - a.ours) - (0 if with_thinking else b.thinking - a.thinking)
    return grown_rec / grown_ours if grown_ours > 0 else 1.0


def estimate(sessions: Sequence[Sequence[Call]]) -> Estimate:
    """The tokenizer ratio and each session's hidden prefix (definitions in the module docstring)."""
    fits: dict[bool, tuple[float, float, dict[str, float]]] = {}
    for with_thinking in (True, False):
        r = _ratio(sessions, with_thinking)
        errors: list[float] = []
        hidden: dict[str, float] = {}
        for calls in sessions:
            if not calls:
                continue
            ours = [c.ours - (0 if with_thinking else c.thinking) for c in calls]
            s = statistics.median(c.recorded.prompt_tokens - r * o for c, o in zip(calls, ours, strict=True))
            hidden[calls[0].traj_id] = max(0.0, s)
            errors += [abs(c.recorded.prompt_tokens - (s + r * o)) / max(1, c.recorded.prompt_tokens)
                       for c, o in zip(calls, ours, strict=True)]
        fits[with_thinking] = (r, statistics.median(errors) if errors else 0.0, hidden)
    return Estimate(fits[True][0], fits[False][0], fits[True][1], fits[False][1], fits[True][2])


@dataclass(frozen=True)
class Predicted:
    """One call's predicted read / write / uncached input (provider tokens) beside the recorded ones."""

    traj_id: str
    step: int
    read: float
    write: float
    uncached: float
    recorded: RecordedUsage

    @property
    def share_error(self) -> float:
        """Predicted minus recorded cached share, in percentage points."""
        prompt = self.read + self.write + self.uncached
        rec = self.recorded
        return 100 * ((self.read / prompt if prompt else 0.0) - rec.cache_read_input_tokens / max(1, rec.prompt_tokens))


def _cost(read: float, write: float, uncached: float, price: Price) -> float:
    if price.cache_write is None:  # the bill has cache writes: pricing them at another rate would be a guess
        raise ValueError(f"{price.model} has no cache_write price in data/prices.toml, and the recorded bill has "
                         "cache writes; name a model with one (--price-model claude-sonnet-4-5)")
    return (uncached * price.input + read * price.cached_input + write * price.cache_write) / PER_TOKENS


def predict_session(calls: Sequence[Call], requests: Sequence[Sequence[Message]], hidden: float, ratio: float,
                    profile: str, variant: str) -> list[Predicted]:
    """Every call of one session through ``profile`` in ``variant`` (see the module docstring)."""
    from agentlab.model.prompt_caching import hidden_ids

    p = get_profile(profile)
    prefix = hidden_ids(round(hidden / ratio))
    cache = CacheReplay(p)
    clock = variant == "warm + clock"
    if clock and calls:
        warm = min(len(prefix), round(calls[0].recorded.cache_read_input_tokens / ratio))
        if warm:
            cache.seed(RequestTokens((prefix[:warm], PRIMING_MARKERS)), at=calls[0].time)
    out = []
    for call, messages in zip(calls, requests, strict=True):
        request = RequestTokens((prefix, *(message_segment(m) for m in messages), PRIMING_MARKERS))
        result = cache.add(request, at=call.time if clock else None)
        read, write = ratio * result.cached_tokens, ratio * result.cache_write_tokens
        uncached = ratio * result.prompt_tokens - read - write
        out.append(Predicted(call.traj_id, call.step, read, write, uncached, call.recorded))
    return out


@dataclass(frozen=True)
class SessionCost:
    """One session's input-side cost, predicted and recorded (USD)."""

    traj_id: str
    profile: str
    variant: str
    n_calls: int
    predicted: float
    recorded: float


@dataclass
class CheckResult:
    """Everything the check prints."""

    n_sessions: int
    n_calls: int
    estimate: Estimate
    price: Price
    #: (profile, variant) -> per-call share errors (percentage points).
    errors: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    sessions: list[SessionCost] = field(default_factory=list)
    output_tokens: int = 0

    def summary(self) -> list[dict[str, Any]]:
        """One row per (profile, variant): the error distribution and the per-session cost comparison."""
        rows = []
        for (profile, variant), errors in self.errors.items():
            costs = [s for s in self.sessions if s.profile == profile and s.variant == variant]
            ratios = [s.predicted / s.recorded for s in costs if s.recorded > 0]
            rows.append({"profile": profile, "variant": variant, "calls": len(errors),
                         "share_error_points": _percentiles(errors),
                         "cost_ratio": _percentiles([r - 1 for r in ratios]),
                         "predicted_usd_per_session": sum(s.predicted for s in costs) / max(1, len(costs)),
                         "recorded_usd_per_session": sum(s.recorded for s in costs) / max(1, len(costs))})
        return rows

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (the per-session costs included)."""
        hidden = list(self.estimate.hidden.values())
        return {"n_sessions": self.n_sessions, "n_calls": self.n_calls,
                "estimate": {**{k: v for k, v in asdict(self.estimate).items() if k != "hidden"},
                             "hidden_prefix_tokens": _percentiles(hidden) if hidden else None},
                "price": self.price.describe(), "summary": self.summary(),
                "sessions": [asdict(s) for s in self.sessions]}


def check(trajectories: Sequence[Trajectory], price: Price, profiles: Sequence[str] = PROFILES,
          variants: Sequence[str] = VARIANTS) -> CheckResult:
    """The check over every trajectory with recorded usage (the others are left out)."""
    loaded = [(t, *recorded_calls(t)) for t in trajectories]
    loaded = [(t, c, r) for t, c, r in loaded if c]
    est = estimate([c for _, c, _ in loaded])
    result = CheckResult(len(loaded), sum(len(c) for _, c, _ in loaded), est, price,
                         output_tokens=sum(x.recorded.output_tokens for _, c, _ in loaded for x in c))
    for profile in profiles:
        for variant in variants:
            errors = result.errors.setdefault((profile, variant), [])
            for traj, calls, requests in loaded:
                predicted = predict_session(calls, requests, est.hidden[traj.traj_id], est.ratio, profile, variant)
                errors += [x.share_error for x in predicted]
                rec = [x.recorded for x in predicted]
                result.sessions.append(SessionCost(
                    traj.traj_id, profile, variant, len(predicted),
                    sum(_cost(x.read, x.write, x.uncached, price) for x in predicted),
                    sum(_cost(u.cache_read_input_tokens, u.cache_creation_input_tokens, u.input_tokens, price)
                        for u in rec)))
    return result


def replay_prefixes(trajectories: Sequence[Trajectory]) -> tuple[dict[str, Any], Estimate | None]:
    """Per trajectory with recorded usage, its hidden prefix for a replay's cache, and the estimate behind it.

    The model the check validated (``warm + clock``): each session's hidden system prompt and tools
    (:func:`estimate`, over these trajectories' ``long_context`` calls) in agentlab's tokens (divided
    by the tokenizer ratio), its warm part the first call's recorded cache read, likewise. A
    trajectory without recorded usage gets none; ``None`` for the estimate when no trajectory has any.
    """
    from agentlab.model.prompt_caching import HiddenPrefix

    loaded = [(t, recorded_calls(t)[0]) for t in trajectories]
    loaded = [(t, c) for t, c in loaded if c]
    if not loaded:
        return {}, None
    est = estimate([c for _, c in loaded])
    out = {}
    for traj, calls in loaded:
        hidden = round(est.hidden[traj.traj_id] / est.ratio)
        out[traj.traj_id] = HiddenPrefix(hidden, min(hidden, round(calls[0].recorded.cache_read_input_tokens
                                                                   / est.ratio)))
    return out, est


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_check(result: CheckResult) -> str:
    """The printed report."""
    e = result.estimate
    hidden = _percentiles(list(e.hidden.values()))
    lines = [
        f"estimated from the bill: tokenizer ratio {e.ratio:.3f} provider tokens per agentlab token (pooled growth "
        f"of the prompt between consecutive calls); hidden system prompt + tools per recorded log "
        f"{_f(hidden['p5'], '.0f')} / {_f(hidden['median'], '.0f')} / {_f(hidden['p95'], '.0f')} tokens (p5 / median / p95)",
        f"reconstruction (thinking of the current turn counted, Anthropic's rule): median per-call prompt-size error "
        f"{100 * e.fit_error:.2f} %; with that thinking left out: {100 * e.fit_error_without_thinking:.2f} % "
        f"(ratio {e.ratio_without_thinking:.3f})",
        f"prices: {result.price.describe()}; input side only (recorded output: "
        f"{result.output_tokens / max(1, result.n_sessions):.0f} tokens per session, the same in every prediction)",
        "per-call error in cached share, predicted - recorded, percentage points; per-session cost, predicted / recorded - 1:",
        f"  {'profile':9s} {'variant':13s} {'calls':>6s} {'p5':>7s} {'p25':>7s} {'median':>7s} {'p75':>7s} {'p95':>7s} "
        f"{'mean|e|':>7s}   {'cost p5':>8s} {'median':>8s} {'p95':>8s} {'pred $':>8s} {'rec $':>8s}",
    ]
    for row in result.summary():
        s, c = row["share_error_points"], row["cost_ratio"]
        lines.append(
            f"  {row['profile']:9s} {row['variant']:13s} {row['calls']:6d} "
            + " ".join(f"{_f(s[k], '7.1f')}" for k in ("p5", "p25", "median", "p75", "p95", "mean_abs"))
            + "   " + " ".join(f"{_f(None if c[k] is None else 100 * c[k], '7.1f')}%" for k in ("p5", "median", "p95"))
            + f" {row['predicted_usd_per_session']:8.4f} {row['recorded_usd_per_session']:8.4f}")
    lines.append("(pred $ / rec $: mean input-side cost per session; the openai profile is OpenAI's rule priced at "
                 "these prices against Anthropic's bill: what that rule would have predicted, not a fit)")
    return "\n".join(lines) + "\n"


__all__ = [
    "PROFILES",
    "VARIANTS",
    "Call",
    "CheckResult",
    "Estimate",
    "Predicted",
    "SessionCost",
    "check",
    "estimate",
    "format_check",
    "predict_session",
    "recorded_calls",
    "replay_prefixes",
]
