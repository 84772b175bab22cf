"""OpenAI Codex CLI local ("inline") auto-compaction, with its tool-output truncation.

Sources (``openai/codex``, Rust): ``codex-rs/core/src/compact.rs`` @ ``0100b103`` (the handoff:
``build_compacted_history``, ``collect_user_messages``, ``COMPACT_USER_MESSAGE_MAX_TOKENS``, the
drop-oldest retry); ``codex-rs/core/templates/compact/summary_prefix.md`` @ ``50a53333`` and
``prompt.md`` @ ``11baefb5``; ``codex-rs/utils/output-truncation/src/lib.rs`` @ ``820f85cf``
(``truncate_text``, the 1.2 serialization allowance) and ``codex-rs/utils/string/src/truncate.rs``
@ ``b24d7f3c`` (``truncate_middle_with_token_budget``, ``truncate_middle_chars``,
``approx_token_count`` = bytes / 4 rounded up); ``codex-rs/protocol/src/openai_models.rs`` @
``0d4367d0`` (the default limit, 9/10 of the window).

What it does:

* **Tool output** is cut when it is recorded, to the truncation policy × 1.2: head and tail
  around ``…N tokens truncated…`` (token mode; N = removed bytes / 4, rounded up) or
  ``…N chars truncated…`` (byte mode). Default: ``tokens`` mode, 10,000 (the catalog value of
  the GPT-5 codex models).
* **Auto-compaction** fires when the request reaches ``model_auto_compact_token_limit``
  (default 9/10 of the window). The summariser gets the whole history plus a user message with
  the compaction prompt; the history is then *replaced* by: the user messages (earlier
  summaries excluded), newest first within 20,000 approximate tokens — the first that does not
  fit is cut to what is left and selection stops — in their original order, then one user
  message: ``SUMMARY_PREFIX``, a newline, the summary. Every assistant message, call and result is
  gone, so nothing can be left unpaired. If the summariser's input does not fit the window, the
  oldest item (with its call or result) is dropped until it does.

Departures from the source, and why:

* Codex replaces its in-memory history; here the ledger is untouched and the replacement
  history carries over to the next request (:attr:`PeerMechanism.carries_over`). Codex truncates
  a tool output once when recording it; here each request shows the truncated copy of the
  ledger's full output (the model sees the same text).
* The "initial context" (developer instructions, AGENTS.md, environment context) is the
  request's system text, which stays; Codex re-sends it as history items.
* The compaction prompt (:data:`COMPACT_PROMPT`) is our paraphrase of ``prompt.md``.
* Codex retries the compaction call after a ``ContextWindowExceeded`` error, dropping the oldest
  item each time; here the input is checked against the window *before* the call (agentlab's
  token count), with the same drop-oldest rule. The "Trimmed N older items" notice and the
  "Heads up" warning are UI messages, not reproduced; ghost snapshots do not exist here.
* Tokens for the trigger are counted with agentlab's tokeniser over the request, not from the
  provider's reported usage; the newer ``body_after_prefix`` scope is not reproduced.
* ``auto_compact_token_limit`` (absolute) is the config override; the default is the source's
  fraction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from agentlab.core.mechanism import COMPACT, RequestDraft, Stage
from agentlab.events import Message
from agentlab.model import tokens
from agentlab.policies._base import Outcome, PeerMechanism, Summarizer
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: ``summary_prefix.md`` @ 50a53333, verbatim (the double space before "assist" is Codex's).
SUMMARY_PREFIX = (
    "Another language model started to solve this problem and produced a summary of its thinking process. "
    "You also have access to the state of the tools that were used by that language model. Use this to build "
    "on the work that has already been done and avoid duplicating work. Here is the summary produced by the "
    "other language model, use the information in this summary to  assist with your own analysis:"
)
#: The summary text when there is none (``build_compacted_history_with_limit``), verbatim.
NO_SUMMARY = "(no summary available)"
#: ``COMPACT_USER_MESSAGE_MAX_TOKENS``.
USER_MESSAGE_MAX_TOKENS = 20_000
#: ``with_serialization_allowance``: recorded tool output may use 1.2 × the policy's budget.
SERIALIZATION_ALLOWANCE = 1.2
APPROX_BYTES_PER_TOKEN = 4

#: Our paraphrase of Codex's ``prompt.md`` (a handoff summary for the model that resumes the task).
COMPACT_PROMPT = """You are writing a context checkpoint: a handoff summary for another model that will take \
over this task. Cover, as short bullet points:
- the goal the user set
- progress so far and the key decisions
- context, constraints and preferences that still apply
- what is left to do, as clear next steps
- any data, examples or references needed to continue

Keep it brief and structured, so the next model can carry on without rereading anything."""


@dataclass(frozen=True)
class CodexCompactionPolicy(PolicyJSON):
    """Codex's compaction and truncation knobs; defaults are the sources'."""

    #: Compact at this share of the context window (source: 9/10, ``auto_compact_token_limit()``).
    auto_compact_fraction: float = 0.9
    #: ``model_auto_compact_token_limit``: an absolute limit instead (source: none = the fraction).
    auto_compact_token_limit: int | None = None
    #: Budget of the user messages kept verbatim, approximate tokens (source: 20,000).
    user_message_max_tokens: int = USER_MESSAGE_MAX_TOKENS
    #: Tool-output truncation mode (source catalog: "tokens" for the GPT-5 codex models).
    truncation_mode: Literal["tokens", "bytes"] = "tokens"
    #: Tool-output truncation limit in that mode (source catalog: 10,000); 0 = no truncation.
    truncation_limit: int = 10_000

    def __post_init__(self) -> None:
        if not 0 < self.auto_compact_fraction <= 1:
            raise ValueError("CodexCompactionPolicy.auto_compact_fraction must be in (0, 1]")
        if self.truncation_limit < 0 or self.user_message_max_tokens < 0:
            raise ValueError("CodexCompactionPolicy: truncation_limit and user_message_max_tokens must be >= 0")

    def limit(self, context_window: int) -> int | None:
        """The auto-compaction limit in tokens (``None``: no limit is known)."""
        if self.auto_compact_token_limit is not None:
            return self.auto_compact_token_limit
        if not context_window:
            return None
        if self.auto_compact_fraction == 0.9:
            return context_window * 9 // 10  # integer arithmetic, as the source computes it
        return int(context_window * self.auto_compact_fraction)


# ------------------------------------------------------------------------------- truncation


def approx_token_count(text: str) -> int:
    """``approx_token_count``: UTF-8 bytes / 4, rounded up."""
    return (len(text.encode("utf-8")) + APPROX_BYTES_PER_TOKEN - 1) // APPROX_BYTES_PER_TOKEN


def _marker(use_tokens: bool, removed: int) -> str:
    return f"…{removed} tokens truncated…" if use_tokens else f"…{removed} chars truncated…"


def _truncate_with_byte_estimate(s: str, max_bytes: int, use_tokens: bool) -> str:
    """``truncate_with_byte_estimate``: head and tail on character boundaries around the marker."""
    if not s:
        return ""
    data = s.encode("utf-8")
    if max_bytes == 0:
        removed = (len(data) + 3) // 4 if use_tokens else len(s)
        return _marker(use_tokens, removed)
    if len(data) <= max_bytes:
        return s
    left_budget = max_bytes // 2
    right_budget = max_bytes - left_budget
    tail_start_target = max(0, len(data) - right_budget)
    prefix_end, suffix_start, removed_chars, started = 0, len(data), 0, False
    offset = 0
    for ch in s:
        size = len(ch.encode("utf-8"))
        if offset + size <= left_budget:
            prefix_end = offset + size
        elif offset >= tail_start_target:
            if not started:
                suffix_start, started = offset, True
        else:
            removed_chars += 1
        offset += size
    suffix_start = max(suffix_start, prefix_end)
    removed = (max(0, len(data) - max_bytes) + 3) // 4 if use_tokens else removed_chars
    return data[:prefix_end].decode("utf-8") + _marker(use_tokens, removed) + data[suffix_start:].decode("utf-8")


def truncate_text(content: str, mode: Literal["tokens", "bytes"], limit: int) -> str:
    """``truncate_text`` under ``TruncationPolicy::Tokens(limit)`` or ``::Bytes(limit)``."""
    if mode == "bytes":
        return _truncate_with_byte_estimate(content, limit, use_tokens=False)
    if not content:
        return ""
    if limit > 0 and len(content.encode("utf-8")) <= limit * APPROX_BYTES_PER_TOKEN:
        return content
    return _truncate_with_byte_estimate(content, limit * APPROX_BYTES_PER_TOKEN, use_tokens=True)


def truncate_tool_outputs(messages: Sequence[Message], policy: CodexCompactionPolicy) -> Outcome:
    """Every tool result cut as Codex cuts it when recording (the policy × the 1.2 allowance)."""
    if policy.truncation_limit == 0:
        return Outcome.unchanged(messages)
    limit = int(policy.truncation_limit * SERIALIZATION_ALLOWANCE)
    out = [m.with_content(truncate_text(m.content, policy.truncation_mode, limit)) if m.role == "tool" else m
           for m in messages]
    out = [new if new.content != old.content else old for new, old in zip(out, messages, strict=True)]
    return Outcome(tuple(out), tuple(range(len(out))), fired=any(n is not o for n, o in zip(out, messages,
                                                                                            strict=True)))


# ------------------------------------------------------------------------------- compaction


def is_summary_message(text: str) -> bool:
    """``is_summary_message``: an earlier handoff summary."""
    return text.startswith(SUMMARY_PREFIX + "\n")


def compacted_history(messages: Sequence[Message], summary: str, max_tokens: int = USER_MESSAGE_MAX_TOKENS
                      ) -> Outcome:
    """``build_compacted_history``: kept user messages, then the summary (``summary``: the reply)."""
    users = [i for i, m in enumerate(messages) if m.role == "user" and not is_summary_message(m.content)]
    picked: list[tuple[int, str]] = []
    if max_tokens > 0:
        remaining = max_tokens
        for i in reversed(users):
            if remaining == 0:
                break
            text = messages[i].content
            cost = approx_token_count(text)
            if cost <= remaining:
                picked.append((i, text))
                remaining -= cost
            else:
                picked.append((i, truncate_text(text, "tokens", remaining)))
                break
        picked.reverse()
    out = [messages[i] if text == messages[i].content else messages[i].with_content(text) for i, text in picked]
    # As in the source, the prefix makes the text non-empty, so NO_SUMMARY is never reached.
    summary_text = f"{SUMMARY_PREFIX}\n{summary}" or NO_SUMMARY
    return Outcome((*out, Message.user(summary_text)), (*(i for i, _ in picked), None), fired=True)


def drop_oldest(messages: list[Message]) -> list[Message]:
    """``remove_first_item``: the oldest item goes, with its call or its results."""
    if not messages:
        return messages
    first, rest = messages[0], messages[1:]
    if first.role == "assistant" and first.tool_calls:
        ids = {c.id for c in first.tool_calls}
        rest = [m for m in rest if not (m.role == "tool" and m.tool_call_id in ids)]
    elif first.role == "tool":
        rest = [m for m in rest if not (m.role == "assistant" and any(c.id == first.tool_call_id
                                                                        for c in m.tool_calls))]
    return rest


class CodexCompaction(PeerMechanism):
    """Codex's tool-output truncation and local auto-compaction, at the compaction stage."""

    policy_name: ClassVar[str] = "codex_compaction"
    policy_class: ClassVar[type[Any]] = CodexCompactionPolicy
    source: ClassVar[str] = (
        "openai/codex@0100b103 codex-rs/core/src/compact.rs; utils/string/src/truncate.rs@b24d7f3c")
    needs_model: ClassVar[str] = (
        "Codex auto-compaction at 90 % of the window writes a handoff summary with a model")
    stage: ClassVar[Stage] = COMPACT
    carries_over: ClassVar[bool] = True
    policy: CodexCompactionPolicy

    def __init__(self, policy: CodexCompactionPolicy | None = None, *, summarizer: Summarizer | None = None) -> None:
        super().__init__(policy, summarizer=summarizer)
        #: Tool outputs this mechanism already cut, by (call id, text): Codex cuts an output once,
        #: when recording it, and a carried-over copy must not be cut again.
        self._cut: set[tuple[str | None, str]] = set()

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """Truncate tool outputs; compact into a handoff when the request reaches the limit."""
        fresh = [m.role == "tool" and (m.tool_call_id, m.content) not in self._cut for m in messages]
        cut = truncate_tool_outputs([m if new else m.with_content("") for m, new in zip(messages, fresh, strict=True)],
                                    self.policy)
        shown_now = [c if new else m for m, c, new in zip(messages, cut.messages, fresh, strict=True)]
        for m, c, new in zip(messages, shown_now, fresh, strict=True):
            if new and c is not m:
                self._cut.add((c.tool_call_id, c.content))
        truncated = Outcome(tuple(shown_now), tuple(range(len(messages))), fired=cut.fired)
        shown = list(truncated.messages)
        system = [Message.system(p) for p in draft.system_parts if p]
        declared = [t.declaration() for t in draft.tools] or None
        limit = self.policy.limit(inv.context_window)
        if limit is None or tokens.count_messages(system + shown, declared) < limit:
            return truncated
        summarizer_input = [*shown, Message.user(COMPACT_PROMPT)]
        window = inv.context_window
        while window and len(summarizer_input) > 2 and tokens.count_messages(system + summarizer_input) > window:
            summarizer_input = [*drop_oldest(summarizer_input[:-1]), summarizer_input[-1]]
        summary = await self.summarizer_for(inv)(system + summarizer_input)
        handoff = compacted_history(shown, summary, self.policy.user_message_max_tokens)
        return Outcome(handoff.messages, tuple(truncated.sources[s] if s is not None else None
                                               for s in handoff.sources), fired=True)


__all__ = [
    "SUMMARY_PREFIX",
    "CodexCompaction",
    "CodexCompactionPolicy",
    "approx_token_count",
    "compacted_history",
    "truncate_text",
    "truncate_tool_outputs",
]
