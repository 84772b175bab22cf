"""Google ADK token-threshold events compaction: summarise old events, keep the last N raw.

Source: PyPI ``google-adk==2.13.0`` (``google/adk-python``): ``google/adk/apps/compaction.py``
(``_run_compaction_for_token_threshold_config``, ``_events_to_compact_for_token_threshold``,
``_safe_token_compaction_split_index``, ``_longest_self_contained_prefix``,
``_is_range_worth_compacting``, ``_latest_prompt_token_count``, ``_count_chars_in_content``,
``_get_compaction_ranges``), ``apps/llm_event_summarizer.py`` (``LlmEventSummarizer``) and
``flows/llm_flows/context/_compaction.py`` (``CompactionRequestProcessor``,
``_process_compaction_events``).

What it does before each model call (``CompactionRequestProcessor``) when the latest reported
prompt token count — or, without one since the last compaction, the characters of the request
contents / 4 — reaches ``token_threshold``: the raw events after the last compaction are the
candidates; if there are more than ``event_retention_size``, all but the last
``event_retention_size`` are compacted, the split moved earlier so that no kept function
response loses its call, and cut back to the longest prefix with no open call. The previous
summary is put in front as a ``model`` event (a rolling seed), so the new summary supersedes it.
A compaction is skipped when the range could not remove more characters than the last summary
has. The summary is *appended* as a compaction event covering ``[first, last]`` timestamp; a
request shows, in timestamp order, each surviving summary (as a model turn at its end time) and
the raw events outside every covered range.

Our messages map to ADK contents as follows (the differential tests use the same mapping): a
user message is a ``user`` text part; an assistant message is a ``model`` content with a text
part (when it has text) and one ``function_call`` part per call (``args`` = the parsed JSON); a
tool result is a ``user`` content with one ``function_response`` part whose ``response`` is
``{"result": <content>}``.

Departures from the source, and why:

* ADK appends the compaction event to the session; here the compactions are state of the
  mechanism (per session view, in process) and the ledger is untouched. A compaction is placed
  in the event stream right after the event that was last when it was made, as ADK's append
  would place it.
* ``token_threshold`` and ``event_retention_size`` have no defaults in ADK (both must be set);
  the preset's ``token_threshold_fraction=0.9`` of the window and ``event_retention_size=10``
  are ours.
* The sliding-window trigger (every ``compaction_interval`` invocations) is not part of this
  policy. Rewinds, branches, isolation scopes, HITL confirmations and long-running tools do not
  exist in agentlab's ledger, so the second ("provably dead calls") pass of
  ``_longest_self_contained_prefix`` and ``_recover_compacted_function_calls`` have nothing to do.
* :data:`SUMMARY_PROMPT` is our paraphrase of ``_DEFAULT_PROMPT_TEMPLATE``; the history is
  formatted as ``_format_events_for_prompt`` does (text, tool calls and responses, each capped at
  2,000 characters).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from agentlab.core.mechanism import RequestDraft, Stage
from agentlab.events import Event, Message
from agentlab.policies._base import PEER_SUMMARY, Outcome, PeerMechanism, Summarizer
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: ``LlmEventSummarizer._MAX_TOOL_CONTENT_CHARS``.
MAX_TOOL_CONTENT_CHARS = 2000

#: Our paraphrase of ADK's summary prompt; ``{conversation_history}`` takes the formatted events.
SUMMARY_PROMPT = (
    "Below is the history of a conversation between a user and an AI agent; it may begin with an earlier "
    "summary. Restate the user's request and summarise the context so far: the decisions made, the "
    "information obtained, and the questions or tasks still open. Start with the language the user writes "
    "in (for example \"Conversation Language: English\"), and name exactly every tool the agent called. "
    "Keep the rest short.\n\n{conversation_history}"
)


@dataclass(frozen=True)
class AdkCompactionPolicy(PolicyJSON):
    """``EventsCompactionConfig``'s token-threshold pair (ADK has no defaults: these are ours)."""

    #: Compact when the prompt reaches this many tokens (source: required, no default); none = the fraction.
    token_threshold: int | None = None
    #: Variant: the threshold as this share of the context window (ours: 0.9).
    token_threshold_fraction: float = 0.9
    #: Raw events kept after the compacted range (source: required, no default; ours: 10).
    event_retention_size: int = 10

    def __post_init__(self) -> None:
        if self.token_threshold is not None and self.token_threshold <= 0:
            raise ValueError("AdkCompactionPolicy.token_threshold must be > 0")
        if self.event_retention_size < 0:
            raise ValueError("AdkCompactionPolicy.event_retention_size must be >= 0")
        if not 0 < self.token_threshold_fraction <= 1:
            raise ValueError("AdkCompactionPolicy.token_threshold_fraction must be in (0, 1]")

    def threshold(self, context_window: int) -> int | None:
        """The token threshold (``None``: neither set nor derivable)."""
        if self.token_threshold is not None:
            return self.token_threshold
        return int(context_window * self.token_threshold_fraction) if context_window else None


@dataclass(frozen=True)
class Compaction:
    """One compaction: the covered timestamp range and the summary text."""

    start: float
    end: float
    summary: str


@dataclass(frozen=True)
class AdkEvent:
    """An event as ADK's compaction sees it: a message (or a compaction), its time and its author."""

    timestamp: float
    message: Message | None = None
    compaction: Compaction | None = None
    author: str = "agent"
    prompt_tokens: int | None = None
    source: int | None = None  # index in the request's messages


# ------------------------------------------------------------------------------- contents


def content_of(event: AdkEvent) -> dict[str, Any] | None:
    """The ADK content of ``event`` as a plain dict (a compaction contributes its summary)."""
    if event.compaction is not None:
        return {"parts": [{"text": event.compaction.summary}], "role": "model"}
    m = event.message
    if m is None:
        return None
    if m.role == "tool":
        return {"parts": [{"function_response": {"id": m.tool_call_id, "name": m.name,
                                                 "response": {"result": m.content}}}], "role": "user"}
    if m.role == "assistant":
        parts: list[dict[str, Any]] = [{"text": m.content}] if m.content else []
        parts += [{"function_call": {"id": c.id, "args": json.loads(c.arguments or "{}"), "name": c.name}}
                  for c in m.tool_calls]
        return {"parts": parts, "role": "model"}
    return {"parts": [{"text": m.content}], "role": "user"}


def count_chars(content: dict[str, Any] | None) -> int:
    """``_count_chars_in_content``."""
    total = 0
    for part in (content or {}).get("parts", []):
        total += len(part.get("text") or "")
        if "function_call" in part:
            call = part["function_call"]
            total += len(call.get("name") or "")
            if call.get("args"):
                total += len(json.dumps(call["args"]))
        if "function_response" in part:
            response = part["function_response"]
            total += len(response.get("name") or "")
            if response.get("response"):
                total += len(json.dumps(response["response"]))
    return total


def serialized_size(events: Sequence[AdkEvent]) -> int:
    """``_serialized_size``: the summed JSON length of each event's content."""
    total = 0
    for e in events:
        content = content_of(e)
        if content is not None:
            total += len(json.dumps(content, separators=(",", ":"), ensure_ascii=False))
    return total


# ------------------------------------------------------------------------------- ranges


def compaction_ranges(events: Sequence[AdkEvent]) -> list[tuple[int, float, float]]:
    """``_get_compaction_ranges``: the compactions no other one contains, in stream order."""
    ranges = [(i, e.compaction.start, e.compaction.end) for i, e in enumerate(events) if e.compaction is not None]
    retained: set[int] = set()
    max_end: float | None = None
    for index, _, end in sorted(ranges, key=lambda r: (r[1], -r[2], -r[0])):
        if max_end is None or end > max_end:
            retained.add(index)
            max_end = end
    return [r for r in ranges if r[0] in retained]


def latest_compaction(events: Sequence[AdkEvent]) -> AdkEvent | None:
    """``_latest_compaction_event``."""
    ranges = compaction_ranges(events)
    return events[ranges[-1][0]] if ranges else None


def process_compaction_events(events: Sequence[AdkEvent]) -> list[AdkEvent]:
    """``_process_compaction_events``: surviving summaries at their end time, uncovered raw events."""
    infos = compaction_ranges(events)
    retained = {i for i, _, _ in infos}
    coverage: list[list[float]] = []
    for start, end in sorted((s, e) for _, s, e in infos if s <= e):
        if coverage and start <= coverage[-1][1]:
            coverage[-1][1] = max(coverage[-1][1], end)
        else:
            coverage.append([start, end])
    items: list[tuple[float, int, AdkEvent]] = []
    for i, e in enumerate(events):
        if e.compaction is not None and i in retained:
            items.append((e.compaction.end, i, AdkEvent(e.compaction.end, compaction=e.compaction, author="agent")))
    for i, e in enumerate(events):
        if e.compaction is not None:
            continue
        if any(start <= e.timestamp <= end for start, end in coverage):
            continue
        items.append((e.timestamp, i, e))
    items.sort(key=lambda item: (item[0], item[1]))
    return [e for _, _, e in items]


def estimate_prompt_tokens(events: Sequence[AdkEvent]) -> int | None:
    """``_latest_prompt_token_count``: the latest reported count since the last compaction, else chars // 4."""
    for e in reversed(events):
        if e.compaction is not None:
            break
        if e.prompt_tokens is not None:
            return e.prompt_tokens
    total = sum(count_chars(content_of(e)) for e in process_compaction_events(events))
    return total // 4 if total > 0 else None


# ------------------------------------------------------------------------------- selection


def _call_ids(e: AdkEvent) -> set[str]:
    return {c.id for c in e.message.tool_calls if c.id} if e.message is not None and e.compaction is None else set()


def _response_ids(e: AdkEvent) -> set[str]:
    m = e.message
    return {m.tool_call_id} if m is not None and m.role == "tool" and m.tool_call_id and e.compaction is None else set()


def safe_split_index(candidates: Sequence[AdkEvent], retention: int) -> int:
    """``_safe_token_compaction_split_index``."""
    initial = len(candidates) - retention
    if initial <= 0:
        return 0
    unmatched: set[str] = set()
    for i in range(len(candidates) - 1, -1, -1):
        unmatched |= _response_ids(candidates[i])
        unmatched -= _call_ids(candidates[i])
        if not unmatched and i <= initial:
            return i
    return 0


def self_contained_prefix(events: Sequence[AdkEvent]) -> list[AdkEvent]:
    """``_longest_self_contained_prefix`` (its strict pass: no open call at the end of the prefix)."""
    open_ids: set[str] = set()
    safe = 0
    for i, e in enumerate(events):
        open_ids -= _response_ids(e)
        open_ids |= _call_ids(e)
        if not open_ids:
            safe = i + 1
    return list(events[:safe])


def events_to_compact(events: Sequence[AdkEvent], retention: int) -> list[AdkEvent]:
    """``_events_to_compact_for_token_threshold``: the range, with the previous summary as a seed."""
    latest = latest_compaction(events)
    last_end = latest.compaction.end if latest is not None and latest.compaction is not None else 0.0
    candidates = [e for e in events if e.compaction is None and e.timestamp > last_end]
    if len(candidates) <= retention:
        return []
    picked = candidates if retention == 0 else candidates[:safe_split_index(candidates, retention)]
    picked = self_contained_prefix(picked)
    if not picked:
        return []
    if latest is not None and latest.compaction is not None:
        seed = AdkEvent(latest.compaction.start, Message.assistant(latest.compaction.summary), author="model")
        return [seed, *picked]
    return picked


def worth_compacting(events: Sequence[AdkEvent], picked: Sequence[AdkEvent]) -> bool:
    """``_is_range_worth_compacting``: an empty summary of the range saves more than the last summary's size."""
    stamps = [e.timestamp for e in picked]
    weightless = AdkEvent(max(stamps), compaction=Compaction(min(stamps), max(stamps), ""), author="model")
    saved = serialized_size(process_compaction_events(events)) - serialized_size(
        process_compaction_events([*events, weightless]))
    latest = latest_compaction(events)
    previous = serialized_size([latest]) if latest is not None else 0
    return saved > previous


def _cap(text: str) -> str:
    if len(text) <= MAX_TOOL_CONTENT_CHARS:
        return text
    return f"{text[:MAX_TOOL_CONTENT_CHARS]}... [truncated {len(text) - MAX_TOOL_CONTENT_CHARS} chars]"


def _python_str(value: Any) -> str:
    """``str()`` of the parsed JSON value, as ADK formats ``args`` and ``response``."""
    return str(value)


def format_events(events: Sequence[AdkEvent]) -> str:
    """``_format_events_for_prompt``: ``author: text``, tool calls and tool responses, one per line."""
    lines: list[str] = []
    for e in events:
        content = content_of(e)
        if not content or not content["parts"]:
            continue
        for part in content["parts"]:
            if part.get("text"):
                lines.append(f"{e.author}: {part['text']}")
            if "function_call" in part:
                call = part["function_call"]
                lines.append(f"{e.author} called tool: {call['name']}({_cap(_python_str(call['args']))})")
            if "function_response" in part:
                response = part["function_response"]
                lines.append(f"Tool response from {response['name']}: {_cap(_python_str(response['response']))}")
    return "\n".join(lines)


def view_outcome(events: Sequence[AdkEvent]) -> Outcome:
    """The request's messages: the compaction view, summaries as assistant turns."""
    shown = process_compaction_events(events)
    messages = tuple(Message.assistant(e.compaction.summary) if e.compaction is not None else e.message
                     for e in shown if e.compaction is not None or e.message is not None)
    sources = tuple(None if e.compaction is not None else e.source
                    for e in shown if e.compaction is not None or e.message is not None)
    return Outcome(messages, sources, fired=any(e.compaction is not None for e in events))  # type: ignore[arg-type]


@dataclass
class _SessionCompactions:
    """Compactions made for one session view: each with the id of the event it was appended after."""

    made: list[tuple[str, Compaction]] = field(default_factory=list)


class AdkCompaction(PeerMechanism):
    """ADK's token-threshold compaction before each model call, at :data:`PEER_SUMMARY`."""

    policy_name: ClassVar[str] = "adk_compaction"
    policy_class: ClassVar[type[Any]] = AdkCompactionPolicy
    source: ClassVar[str] = (
        "google-adk==2.13.0 apps/compaction.py (token threshold), flows/llm_flows/context/_compaction.py")
    needs_model: ClassVar[str] = "ADK's token-threshold compaction summarises old events with a model"
    stage: ClassVar[Stage] = PEER_SUMMARY
    policy: AdkCompactionPolicy

    def __init__(self, policy: AdkCompactionPolicy | None = None, *, summarizer: Summarizer | None = None) -> None:
        super().__init__(policy, summarizer=summarizer)
        self._compactions: dict[tuple[str, str], _SessionCompactions] = {}

    def stream(self, history: Sequence[Event], messages: Sequence[Message],
               made: _SessionCompactions) -> list[AdkEvent]:
        """The ADK event stream: each ledger event, and each compaction right after the event it followed."""
        after: dict[str, list[Compaction]] = {}
        for event_id, c in made.made:
            after.setdefault(event_id, []).append(c)
        out: list[AdkEvent] = []
        for i, (event, message) in enumerate(zip(history, messages, strict=True)):
            usage = event.usage.prompt_tokens if event.usage is not None and message.role == "assistant" else None
            out.append(AdkEvent(event.timestamp, message, author="user" if message.role == "user" else "agent",
                                prompt_tokens=usage or None, source=i))
            out += [AdkEvent(c.end, compaction=c, author="user") for c in after.get(event.id, [])]
        return out

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """Compact when the prompt reaches the threshold; show the compaction view."""
        history = [e for e in draft.events if e.message is not None and e.message.role != "system"]
        made = self._compactions.setdefault(self.key(inv), _SessionCompactions())
        known = {e.id for e in history}
        made.made = [(event_id, c) for event_id, c in made.made if event_id in known]
        events = self.stream(history, messages, made)
        threshold = self.policy.threshold(inv.context_window)
        tokens_now = estimate_prompt_tokens(events)
        if threshold is not None and tokens_now is not None and tokens_now >= threshold and history:
            picked = events_to_compact(events, self.policy.event_retention_size)
            if picked and worth_compacting(events, picked):
                prompt = SUMMARY_PROMPT.format(conversation_history=format_events(picked))
                summary = await self.summarizer_for(inv)([Message.user(prompt)])
                stamps = [e.timestamp for e in picked]
                made.made.append((history[-1].id, Compaction(min(stamps), max(stamps), summary)))
                events = self.stream(history, messages, made)
        return view_outcome(events)


__all__ = [
    "AdkCompaction",
    "AdkCompactionPolicy",
    "AdkEvent",
    "Compaction",
    "estimate_prompt_tokens",
    "events_to_compact",
    "format_events",
    "process_compaction_events",
    "worth_compacting",
]
