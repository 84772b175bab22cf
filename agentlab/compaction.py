"""Request-side compaction: shrink old tool payloads in the projected context, never the ledger.

Compaction runs last in the request chain, over the events already chosen for this model call.
It works on *units* (one user request and everything the agent did for it, keyed by
``event.request_id``). The current unit and the ``keep_recent_requests`` most recent completed
units are protected; a unit is completed once it holds a final assistant answer.

* Pass 0 (policy): results of ``force_clean_tools`` outside protected units become a short
  policy placeholder, whatever their size.
* Pass 1 (historical): results over ``tool_result_max_tokens`` outside protected units become a
  recoverable placeholder that says the call succeeded and was consumed and names event_id,
  tool_call_id and tool name (pointing to ``session_load`` only when that tool is offered).
* Pass 2 (oversized, includes the current unit; off unless ``oversized_tool_result_max_tokens``
  > 0): any result still over that size is cut to head + tail around a marker.

A replacement is used only when it is strictly smaller (pass 0 excepted: it is a policy, not a
size decision). Copy-on-write: a changed entry is a new Event with a new Message; the ledger's
events and messages are never touched.

The pre-model pressure path (:func:`relieve_context_pressure`) runs a synchronous summary when
the finished request is at or over ``sync_summary_ratio`` of the window, and rebuilds the request
only if the summary boundary advanced.

"The reference" and a "reference" default are trpc-agent-go's context compaction
(docs/sources.md#request-side-compaction).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import agentlab.model.window as model_window
from agentlab.core.mechanism import (
    COMPACT,
    ContextMechanism,
    EventsRole,
    PendingRequest,
    RequestDraft,
    StagedProcessor,
)
from agentlab.core.rules import completed_units, unit_of
from agentlab.core.rules import protected_units as _protected_units
from agentlab.core.services import SummaryService
from agentlab.events import Event
from agentlab.model import tokens
from agentlab.model.base import ModelRequest
from agentlab.model.tokens import event_tokens
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

log = logging.getLogger(__name__)

#: Window assumed when neither the run nor the model states one (reference fallback). Every
#: built-in backend states its window (an HTTP model resolves it from its server or stops), so
#: this is reached only by a custom Model whose ``info.context_window`` is 0.
FALLBACK_CONTEXT_WINDOW = 8192
#: The recall tool a recoverable placeholder may point to.
SESSION_LOAD_TOOL = "session_load"

PLACEHOLDER_VERSION = "compaction-placeholders-v1"

# Placeholder wording is paraphrased from the reference.
POLICY_PLACEHOLDER = "[tool result left out by the context compaction policy]"

RECOVERABLE_HEADER = (
    "[tool result elided] This earlier tool call succeeded and its result was already used; the "
    "payload was dropped from this request to save context. Check the summary and any recovery "
    "hints first. If the exact data is essential, re-run only read-only or idempotent tools; never "
    "repeat a side-effecting operation just to get the result back."
)
RECOVER_WITH_SESSION_LOAD = (
    "To read the full result, call session_load with this event_id (use content_offset and "
    "content_limit to page through it)."
)
RECOVER_UNAVAILABLE = (
    "The full result cannot be fetched with the tools available now; re-run only safe tools if you "
    "really need it."
)

TRUNCATION_MARKER = "[... {n} characters truncated ...]"
TRUNCATION_MARKER_RECOVERABLE = (
    "[... {n} characters truncated from tool result; event_id={event_id}; tool_call_id={tool_call_id}; "
    "tool_name={tool_name}; use session_load with event_id and content_offset to read the rest ...]"
)
TRUNCATION_MARKER_COMPACT = "[... {n} chars truncated; event_id={event_id}; see session_load ...]"


@dataclass(frozen=True)
class CompactionPolicy(PolicyJSON, ContextMechanism):
    """Knobs of request-side compaction. Defaults are the reference defaults."""

    #: Master switch (reference: off).
    enabled: bool = False
    #: Most recent *completed* request units kept whole, besides the current one (reference 1).
    keep_recent_requests: int = 1
    #: Pass 1: older tool results over this many tokens become a recoverable placeholder (1,024).
    tool_result_max_tokens: int = 1024
    #: Pass 2: any tool result over this many tokens is cut to head + tail; 0 = off (reference
    #: default; 8,192 recommended).
    oversized_tool_result_max_tokens: int = 0
    #: Pass 0: results of these tools (outside protected units) are always replaced.
    force_clean_tools: tuple[str, ...] = ()
    #: Results of these tools are never compacted by any pass.
    keep_tools: tuple[str, ...] = ()
    #: Pre-model synchronous summary when the request reaches this share of the window (0.7).
    sync_summary_ratio: float = 0.7
    #: Floor of that threshold, in tokens (reference 2,000); the threshold never exceeds the window.
    sync_summary_floor_tokens: int = 2000
    #: Window assumed when neither the run nor the model states one (reference 8,192). Spelt as
    #: ``SummaryPolicy.context_fallback_window``; the old name ``fallback_context_window`` is refused
    #: with this one (``RENAMED_FIELDS``) and still readable as a property.
    context_fallback_window: int = FALLBACK_CONTEXT_WINDOW

    RENAMED_FIELDS: ClassVar[dict[str, str]] = {"fallback_context_window": "context_fallback_window"}

    def __post_init__(self) -> None:
        if not 0 < self.sync_summary_ratio <= 1:
            raise ValueError(f"CompactionPolicy.sync_summary_ratio must be in (0, 1], got {self.sync_summary_ratio}")
        for name in ("keep_recent_requests", "tool_result_max_tokens", "oversized_tool_result_max_tokens",
                     "sync_summary_floor_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"CompactionPolicy.{name} must be >= 0, got {getattr(self, name)}")
        if self.context_fallback_window <= 0:
            raise ValueError("CompactionPolicy.context_fallback_window must be > 0")
        for name in ("force_clean_tools", "keep_tools"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ValueError(f"CompactionPolicy.{name} must be a list of tool names, not a string")
            object.__setattr__(self, name, tuple(value))

    def sync_threshold(self, window: int) -> int:
        """Tokens at which the pressure path fires: ratio x window, floored, capped at the window."""
        return min(max(int(window * self.sync_summary_ratio), self.sync_summary_floor_tokens), window)

    @property
    def fallback_context_window(self) -> int:
        """The old name of :attr:`context_fallback_window` (read-only)."""
        return self.context_fallback_window

    def request_processors(self) -> list[StagedProcessor]:
        """Passes 0/1/2 over the finished event list, when compaction is on."""
        return [StagedProcessor(COMPACT, CompactionProcessor(self))] if self.enabled else []

    def describe(self) -> str:
        """``"compaction"``."""
        return "compaction"

    async def before_request(self, inv: Invocation, pending: PendingRequest) -> tuple[ModelRequest, RequestDraft] | None:
        """The pre-model pressure path (:func:`relieve_pressure`), when compaction is on."""
        if not self.enabled:
            return None
        request, draft = await relieve_pressure(inv, pending, self)
        return None if request is pending.request else (request, draft)


# ---------------------------------------------------------------------------------------------
# Placeholders
# ---------------------------------------------------------------------------------------------


def recoverable_placeholder(event: Event, *, session_load_available: bool) -> str:
    """The pass-1 placeholder: the call succeeded and was used; how to get the payload back."""
    m = event.message
    tool_call_id = (m.tool_call_id if m else "") or ""
    tool_name = (m.name if m else "") or "tool"
    lines = [RECOVERABLE_HEADER, f"event_id: {event.id}", f"tool_call_id: {tool_call_id}",
             f"tool_name: {tool_name}"]
    if event.id or tool_call_id:
        lines.append("reason: historical_compaction")
        lines.append(RECOVER_WITH_SESSION_LOAD if session_load_available and event.id else RECOVER_UNAVAILABLE)
    else:
        lines.append("recoverable: false")
        lines.append(RECOVER_UNAVAILABLE)
    return "\n".join(lines)


def cut_middle(text: str, max_tokens: int, marker: str, *, max_keep: int | None = None) -> str | None:
    """Longest head + tail of ``text`` around ``marker`` that fits ``max_tokens`` tokens.

    ``marker`` is a format string whose ``{n}`` becomes the number of characters left out. Head
    and tail each get half of the kept characters, found by binary search over at most
    ``max_keep`` kept characters (default: all but one). ``None`` when not even the bare marker
    fits. Shared with the summariser's input trimming (``agentlab.summary.render``).
    """
    def build(keep: int) -> str:
        head = keep // 2
        tail = keep - head
        return text[:head] + "\n" + marker.format(n=len(text) - keep) + "\n" + (
            text[len(text) - tail:] if tail else "")

    best = build(0)
    if tokens.count_text(best) > max_tokens:
        return None
    low, high = 0, len(text) - 1 if max_keep is None else min(len(text) - 1, max_keep)
    while low <= high:
        mid = (low + high) // 2
        candidate = build(mid)
        if tokens.count_text(candidate) <= max_tokens:
            best, low = candidate, mid + 1
        else:
            high = mid - 1
    return best


def head_tail_truncate(content: str, max_tokens: int, markers: list[str]) -> str | None:
    """Longest head + tail of ``content`` around a marker that fits ``max_tokens`` tokens.

    ``markers`` are format strings tried in order (the first one whose bare form fits is used);
    ``None`` if none fits. Head and tail each get half of the retained characters.
    """
    for marker in markers:
        # Retained characters can never exceed ~8 per token of budget: search no further.
        cut = cut_middle(content, max_tokens, marker, max_keep=max_tokens * 8)
        if cut is not None:
            return cut
    return None


# ---------------------------------------------------------------------------------------------
# The processor
# ---------------------------------------------------------------------------------------------


def protected_units(events: list[Event], current_unit: str | None, keep_recent: int) -> set[str]:
    """The current unit plus the ``keep_recent`` most recent completed units (:func:`agentlab.core.protected_units`)."""
    return set(_protected_units((unit_of(e) for e in reversed(events)), completed_units(events), current_unit,
                                keep_recent))


#: The per-event token count (one home: :func:`agentlab.model.tokens.event_tokens`).
_event_tokens = event_tokens


class CompactionProcessor:
    """Passes 0/1/2 over ``draft.events`` (copy-on-write); leaves a stats record when it acts."""

    name = "compaction"
    events_role = EventsRole.COMPACTION

    def __init__(self, policy: CompactionPolicy | None = None) -> None:
        self.policy = policy or CompactionPolicy(enabled=True)

    # -- the CompactionStep protocol (what the incremental projection mirrors) -----------------

    @property
    def keep_recent_requests(self) -> int:
        """Completed units kept whole besides the current one (the policy's)."""
        return self.policy.keep_recent_requests

    def signature(self, draft: RequestDraft) -> tuple[Any, ...]:
        """What :meth:`decide` depends on besides the event: the policy and whether ``session_load`` is offered."""
        return (self.policy, offers_session_load(draft.tools))

    def decide(self, e: Event, *, historical: bool, has_current: bool,
               draft_signature: tuple[Any, ...]) -> tuple[Event, str] | None:
        """:meth:`compact_event` with the flags of :meth:`signature`."""
        return self.compact_event(e, historical=historical, has_current=has_current, session_load=draft_signature[1])

    def stat(self, results: int, tokens_before: int, tokens_after: int, passes: dict[str, int]) -> dict[str, Any]:
        """The stats record (:func:`compaction_stat`)."""
        return compaction_stat(results, tokens_before, tokens_after, passes.get("pass0", 0), passes.get("pass1", 0),
                               passes.get("pass2", 0))

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        """Compact ``draft.events`` and record the stats when anything changed."""
        stat = self.compact(draft, current_unit=inv.request_id or None)
        if stat is not None:
            draft.stats.append(stat)

    def compact(self, draft: RequestDraft, *, current_unit: str | None) -> dict[str, Any] | None:
        """Passes 0/1/2 over the draft's events; the stats record, or ``None`` when nothing changed."""
        events = draft.events
        session_load = offers_session_load(draft.tools)
        protected = protected_units(events, current_unit, self.policy.keep_recent_requests)
        replaced: dict[int, tuple[Event, str]] = {}  # index -> (new event, pass)
        for i, e in enumerate(events):
            if not e.is_tool_result():
                continue
            unit = unit_of(e)
            decision = self.compact_event(e, historical=unit is not None and unit not in protected,
                                          has_current=current_unit is not None, session_load=session_load)
            if decision is not None:
                replaced[i] = decision
        if not replaced:
            return None
        # Copy-on-write: a new list; untouched entries are the same (unmodified) objects.
        new_events = list(events)
        for i, (new_event, _) in replaced.items():
            new_events[i] = new_event
        draft.events = new_events
        before = sum(_event_tokens(e) for e in events)
        saved_old = sum(_event_tokens(events[i]) for i in replaced)
        saved_new = sum(_event_tokens(new_event) for new_event, _ in replaced.values())
        passes = [p for _, p in replaced.values()]
        return compaction_stat(len(replaced), before, before - saved_old + saved_new,
                               passes.count("pass0"), passes.count("pass1"), passes.count("pass2"))

    def compact_event(self, e: Event, *, historical: bool, has_current: bool,
                      session_load: bool) -> tuple[Event, str] | None:
        """The replacement of one event (a copy and the pass that made it), or ``None`` to keep it.

        A pure function of the event, the policy and the three flags, so the incremental
        projection can compute it once per (event, policy) and reuse it on every later call.
        ``historical``: the event's unit is outside the protected units; ``has_current``: the
        request has a current unit; ``session_load``: that tool is offered in the request.
        """
        if not e.is_tool_result() or e.metadata.get("compacted"):
            return None
        policy = self.policy
        m = e.message
        assert m is not None
        name = m.name or ""
        if name in policy.keep_tools:
            return None
        # Pass 0: a policy decision, independent of size.
        if historical and name in policy.force_clean_tools:
            return None if m.content == POLICY_PLACEHOLDER else (_replaced(e, POLICY_PLACEHOLDER, "pass0"), "pass0")
        # Pass 1: only once there is a current unit to protect.
        if historical and has_current:
            limit = policy.tool_result_max_tokens
            if e.token_count is None or e.token_count > limit:
                size = tokens.count_text(m.content)
                if size > limit:
                    placeholder = recoverable_placeholder(e, session_load_available=session_load)
                    if tokens.count_text(placeholder) < size:
                        return _replaced(e, placeholder, "pass1"), "pass1"
        # Pass 2: oversized results anywhere, the current unit included.
        limit2 = policy.oversized_tool_result_max_tokens
        if limit2 > 0 and name != SESSION_LOAD_TOOL and (e.token_count is None or e.token_count > limit2):
            size = tokens.count_text(m.content)
            if size > limit2:
                markers = [TRUNCATION_MARKER]
                if session_load and e.id:
                    markers = [TRUNCATION_MARKER_RECOVERABLE, TRUNCATION_MARKER_COMPACT, TRUNCATION_MARKER]
                markers = [mk.replace("{event_id}", e.id).replace("{tool_call_id}", m.tool_call_id or "")
                           .replace("{tool_name}", name or "tool") for mk in markers]
                cut = head_tail_truncate(m.content, limit2, markers)
                if cut is not None and tokens.count_text(cut) < size:
                    return _replaced(e, cut, "pass2"), "pass2"
        return None


def offers_session_load(tools: list[Any]) -> bool:
    """Whether the request offers ``session_load`` (recoverable placeholders point to it then)."""
    return any(getattr(t, "name", "") == SESSION_LOAD_TOOL for t in tools)


def _replaced(original: Event, content: str, pass_name: str) -> Event:
    """Copy-on-write replacement of an event's content, with its own token count."""
    message = original.message
    assert message is not None
    new_event = original.copy_with(
        choices=[message.with_content(content)],
        metadata={**original.metadata, "compacted": pass_name},
        token_count=None,
    )
    new_event.token_count = tokens.count_event(new_event)
    return new_event


def compaction_stat(results: int, tokens_before: int, tokens_after: int, pass0: int, pass1: int,
                    pass2: int) -> dict[str, Any]:
    """The stats record one compaction leaves in the draft (and in the run's events)."""
    return {
        "kind": "tool_results",
        "results_compacted": results,
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "pass0": pass0,
        "pass1": pass1,
        "pass2": pass2,
        "placeholder_version": PLACEHOLDER_VERSION,
    }


# ---------------------------------------------------------------------------------------------
# Pre-model pressure path
# ---------------------------------------------------------------------------------------------


def resolve_window(agent: Any, inv: Invocation, fallback: int = FALLBACK_CONTEXT_WINDOW) -> int:
    """Run override -> the agent model's window -> the fallback window."""
    return model_window.resolve_context_window(inv.options.context_window, getattr(agent, "model", None), fallback=fallback)


async def relieve_pressure(inv: Invocation, pending: PendingRequest, policy: CompactionPolicy, *,
                          agent: Any = None) -> tuple[ModelRequest, RequestDraft]:
    """If the request is at or over the sync threshold, summarise now and rebuild once.

    The summary comes from the run's :class:`~agentlab.core.SummaryService` (the summary
    mechanism registers its worker there). The rebuilt request is used only when the summary
    boundary advanced; otherwise (no summary service, no advance, any failure) the original
    request and draft go out unchanged. The window is the run's override, else the model's of
    ``agent`` (default: ``inv.agent``), else the policy's fallback.
    """
    request, draft = pending.request, pending.draft
    if not policy.enabled:
        return request, draft
    window = resolve_window(agent if agent is not None else inv.agent, inv, policy.context_fallback_window)
    threshold = policy.sync_threshold(window)
    before = pending.prompt_tokens
    if before < threshold:
        return request, draft
    worker = inv.services.get(SummaryService)  # type: ignore[type-abstract]
    if worker is None:
        log.debug("request has %d tokens (threshold %d) but no summary is configured", before, threshold)
        return request, draft
    try:
        advanced = await worker.summarize(inv.session, inv.filter_key, context_window=window,
                                          parent_request=request)
    except Exception as exc:  # pressure relief is best effort; the original request still goes out
        log.warning("synchronous summary failed (%s: %s); sending the request as it was",
                    type(exc).__name__, exc)
        return request, draft
    if not advanced:
        return request, draft
    try:
        rebuilt_draft = await pending.rebuild()
        rebuilt = rebuilt_draft.to_model_request()
    except Exception as exc:
        log.warning("rebuilding the request after a synchronous summary failed (%s: %s); "
                    "sending the original", type(exc).__name__, exc)
        return request, draft
    after = rebuilt_draft.prompt_tokens(rebuilt)
    rebuilt_draft.stats.append({
        "kind": "sync_summary",
        "results_compacted": 0,
        "tokens_before": before,
        "tokens_after": after,
        "pass0": 0,
        "pass1": 0,
        "pass2": 0,
        "threshold": threshold,
        "window": window,
    })
    return rebuilt, rebuilt_draft


async def relieve_context_pressure(agent: Any, inv: Invocation, request: ModelRequest, draft: RequestDraft,
                                   *, allow_tools: bool,
                                   policy: CompactionPolicy | None = None) -> tuple[ModelRequest, RequestDraft]:
    """:func:`relieve_pressure` for an agent (older form): rebuilds with ``agent.build_draft``.

    ``policy`` defaults to the agent's ``compaction``; without one the request goes out as it is.
    """
    if policy is None:
        policy = getattr(agent, "compaction", None)
    if policy is None:
        return request, draft

    async def rebuild() -> RequestDraft:
        built: RequestDraft = await agent.build_draft(inv, allow_tools=allow_tools)
        return built

    return await relieve_pressure(inv, PendingRequest(request, draft, allow_tools, rebuild), policy, agent=agent)


__all__ = [
    "POLICY_PLACEHOLDER",
    "RECOVERABLE_HEADER",
    "CompactionPolicy",
    "CompactionProcessor",
    "cut_middle",
    "head_tail_truncate",
    "protected_units",
    "recoverable_placeholder",
    "relieve_context_pressure",
    "relieve_pressure",
    "resolve_window",
    "unit_of",
]
