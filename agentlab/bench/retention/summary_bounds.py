"""Summarising arms with no model: their cost at a stated summary length, their retention as two bounds.

A summarising arm (``Arm.needs_model``: LangChain's summarisation, Codex's compaction, "The
Complexity Trap"'s ``swe_agent_summary`` …) calls a model to write its summaries. Without one, two
things are still known exactly once the summary's length is stated:

* **what the arm sends and when.** Its mechanisms run as they would, with
  :class:`PlaceholderSummariser` as the summariser: every call records what it was sent (the
  summariser's request, priced as input) and returns a text of exactly ``summary_tokens`` tokens of
  agentlab's tokeniser (priced as output). The summary then sits in the next requests at that
  length, so the triggers, the kept tails and the prompt-cache effect of rewriting the prefix (a
  request whose start changed is written to the cache again) are the arm's own. The summariser's
  requests go through the same prompt cache as the agent's, in the order they were sent (a
  summariser sent the agent's history reads it from the cache).
* **what the summary could hold.** Between two bounds. **Lower**: it keeps none of what it
  covers — the placeholder text holds no support, so a support counts only where the request shows
  it verbatim (this is the arm's ``supported``). **Upper**: it keeps all of what it covers — a
  support counts too when it occurs in what the summariser was sent for a summary the request
  shows (its input messages' text and tool-call arguments; a previous summary in that input stands
  for what *it* covered, recursively). A real summary lies between: it keeps some values and
  paraphrases others.

The placeholder text is ``[agentlab-placeholder-summary-<k>]`` and filler: the marker finds the
summary in a request, whatever the policy wrapped around it. The output states the length used
(``--summary-tokens``, default :data:`DEFAULT_SUMMARY_TOKENS`).

What the bounds do not show: a real summary's length differs from call to call and changes the
later triggers; a summary that restates a value in other words keeps it for a reader but not for
the verbatim test; and a policy that summarises outside the request chain (the runtime's
``rolling_summary``, whose worker runs after a run completes) writes nothing here (its
``summary_calls`` is 0, and its bounds equal its ``supported``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlab.events import Message, Usage
from agentlab.model import tokens
from agentlab.model.base import ModelChunk, ModelInfo, ModelRequest, ModelResponse

#: The summary length the cost is stated at when ``--summary-tokens`` is not given, in agentlab's tokens.
DEFAULT_SUMMARY_TOKENS = 512
#: The shortest length accepted (the marker alone takes about a dozen tokens).
MIN_SUMMARY_TOKENS = 16
MARK = "agentlab-placeholder-summary"
_MARK_RE = re.compile(re.escape(MARK) + r"-(\d+)")
NAME = "placeholder-summariser"


def placeholder_text(k: int, n_tokens: int) -> str:
    """Summary ``k``'s text: its marker, then filler, exactly ``n_tokens`` tokens (agentlab's tokeniser)."""
    text = f"[{MARK}-{k}]"
    base = tokens.count_text(text)
    if n_tokens < base:
        raise ValueError(f"a summary of {n_tokens} tokens cannot hold its marker ({base} tokens); "
                         f"state at least {MIN_SUMMARY_TOKENS}")
    text += " x" * (n_tokens - base)
    assert tokens.count_text(text) == n_tokens, (k, n_tokens)
    return text


def markers(text: str) -> set[int]:
    """The placeholder summaries ``text`` shows, by number."""
    return {int(m) for m in _MARK_RE.findall(text)}


def message_texts(messages: Sequence[Message]) -> list[str]:
    """What messages show, per message: content, then the tool calls' arguments."""
    return ["\n".join([m.content, *(c.arguments for c in m.tool_calls)]) if m.tool_calls else m.content
            for m in messages]


@dataclass(frozen=True)
class SummaryCall:
    """One call of the summariser: before which step, what it was sent, what it covers."""

    #: Ledger index of the assistant step whose request was being projected.
    step: int
    number: int
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    input_tokens: int
    #: What the summary covers, whitespace-collapsed: its input's text, earlier summaries expanded.
    covered: str


@dataclass
class PlaceholderSummariser:
    """A :class:`~agentlab.model.base.Model` that writes summaries of a fixed length holding nothing, and records every call.

    Set :attr:`at_step` before projecting each step's request (the replay does).
    """

    summary_tokens: int
    context_window: int
    calls: list[SummaryCall] = field(default_factory=list)
    at_step: int = -1

    def __post_init__(self) -> None:
        if self.summary_tokens < MIN_SUMMARY_TOKENS:
            raise ValueError(f"summary length {self.summary_tokens} tokens: state at least {MIN_SUMMARY_TOKENS}")

    @property
    def info(self) -> ModelInfo:
        """The replay's budget as the window (the summariser is not a model)."""
        return ModelInfo(NAME, self.context_window, "the replay's context budget")

    def covered(self, number: int) -> str:
        """What summary ``number`` covers (empty for a number it never wrote)."""
        return self.calls[number].covered if 0 <= number < len(self.calls) else ""

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Record the call; answer with the next placeholder text."""
        k = len(self.calls)
        texts = message_texts(request.messages)
        nested = sorted({j for t in texts for j in markers(t) if j < k})
        covered = " ".join("\n".join([*texts, *(self.covered(j) for j in nested)]).split())
        prompt = tokens.count_messages(list(request.messages), list(request.tools) or None)
        self.calls.append(SummaryCall(self.at_step, k, tuple(request.messages), tuple(request.tools), prompt,
                                      covered))
        return ModelResponse(Message.assistant(placeholder_text(k, self.summary_tokens)),
                             Usage(prompt, self.summary_tokens), NAME, finish_reason="stop")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """The whole placeholder as one chunk."""
        response = await self.generate(request)
        yield ModelChunk(delta=response.message.content, response=response)


def covered_by(summariser: PlaceholderSummariser, texts: Sequence[str]) -> list[str]:
    """What the summaries a request shows (in ``texts``) cover: one whitespace-collapsed text per summary."""
    shown = sorted({k for t in texts for k in markers(t)})
    return [summariser.covered(k) for k in shown]


def calls_before(summariser: PlaceholderSummariser | None, step: int) -> list[SummaryCall]:
    """The summariser calls made while the request of ``step`` was projected, in order."""
    return [] if summariser is None else [c for c in summariser.calls if c.step == step]


@dataclass(frozen=True)
class SummaryCosts:
    """A trajectory's summariser calls: how many, their input and their output tokens."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @staticmethod
    def of(summariser: PlaceholderSummariser | None) -> SummaryCosts:
        """The totals of ``summariser``'s calls (zero without one)."""
        if summariser is None:
            return SummaryCosts()
        return SummaryCosts(len(summariser.calls), sum(c.input_tokens for c in summariser.calls),
                            len(summariser.calls) * summariser.summary_tokens)


def summary_cost_means(rows: Sequence[Any], price: Any) -> dict[str, Any]:
    """Means per trajectory of the summariser figures, and (with ``price``) the summaries' output cost.

    The summariser's input is in the rows' cache figures already (its requests went through the
    cache); its output is priced here, at the output price.
    """
    n = max(1, len(rows))
    out: dict[str, Any] = {
        "summary_calls": sum(r.summary_calls for r in rows) / n,
        "summary_input_tokens": sum(r.summary_input_tokens for r in rows) / n,
        "summary_output_tokens": sum(r.summary_output_tokens for r in rows) / n,
    }
    if price is not None:
        out["summary_output_cost_usd"] = out["summary_output_tokens"] * price.output / 1e6
    return out


def with_summary_costs(extra: dict[str, Any], rows: Sequence[Any], price: Any) -> dict[str, Any]:
    """``extra`` (a summary's cache means) with the summariser figures, its output cost added to raw and net cost."""
    figures = summary_cost_means(rows, price)
    out = {**extra, **figures}
    if "summary_output_cost_usd" in figures:
        for key in ("raw_cost_usd", "net_cost_usd"):
            if key in out:
                out[key] = out[key] + figures["summary_output_cost_usd"]
    return out


def format_summary_costs(summaries: Sequence[Any]) -> str:
    """The summarising arms' summariser figures, one line per arm (means per trajectory); empty without any."""
    rows = [s for s in summaries if s.summary_tokens is not None]
    if not rows:
        return ""
    w = max([28, *(len(s.arm) for s in rows)])
    priced = all("summary_output_cost_usd" in s.extra for s in rows)
    lines = [f"{'summariser of':{w}s} {'tokens':>6s} {'calls':>6s} {'input':>8s} {'output':>7s}"
             + (f" {'output $':>9s}" if priced else "")]
    for s in rows:
        e = s.extra
        lines.append(f"{s.arm:{w}s} {s.summary_tokens:6d} {e.get('summary_calls', 0.0):6.2f} "
                     f"{e.get('summary_input_tokens', 0.0):8.0f} {e.get('summary_output_tokens', 0.0):7.0f}"
                     + (f" {e['summary_output_cost_usd']:9.5f}" if priced else ""))
    return "\n".join(lines) + "\n"


__all__ = [
    "DEFAULT_SUMMARY_TOKENS",
    "MIN_SUMMARY_TOKENS",
    "PlaceholderSummariser",
    "SummaryCall",
    "SummaryCosts",
    "calls_before",
    "format_summary_costs",
    "covered_by",
    "markers",
    "message_texts",
    "placeholder_text",
    "summary_cost_means",
    "with_summary_costs",
]
