"""Incremental request projection: each model call processes only what changed since the last one.

The processor chain (``runtime/context.py``, ``summary/inject.py``, ``compaction.py``) re-walks the whole projected
history on every call: it filters the ledger, finds the protected units, rebuilds the placeholder
of every old tool result and re-renders and re-counts every message. Between two calls of one
session almost none of that changes: the ledger only grows, and the units that change status are
the newest ones. :class:`ProjectionCache` keeps, per (app, user, session, filter key), the
projection of the previous call (one per compaction policy and tool offer, too) and redoes only the
part that can differ:

* the *kept history* ``K`` — history events visible under the filter key and after the summary
  boundary, in ledger order — grows by the events appended since (with per-unit and per-tool-call
  bookkeeping: last position, final answers, first tool result, first call / result per id);
* the protected units are found by walking back from the end over the last few units only;
* the previous output — compacted events, rendered messages, prefix sums of the token counts the
  stats and the pressure check need — is kept up to the first position anything could have
  changed (the first new event; the first tool result of a unit that entered or left the
  protected window; a tool call whose result arrived, or the reverse), and only the tail after
  it is computed again;
* a compacted copy (placeholder, truncation, and its token count) is computed once per (event,
  protection status) for a given policy, then reused.

Rebuilt from scratch: on the first call (also the first with a new compaction policy, ``session_load``
offer or processor chain), when the summary boundary moved, and when the ledger is not an extension
of the one seen before (a session deleted and recreated under the same id).
Handed back to the full chain (:meth:`ProjectionCache.project` returns ``None``): a legacy
time-only boundary, a ledger with empty or repeated event ids, a summary that split a tool round
or absorbed the current run, a current input that belongs in the middle of the history or is not
a plain user message — rare cases whose handling needs the whole list, kept in one place.

The result is the full chain's, message for message and stat for stat
(``tests/runtime/test_projection_cache.py`` compares them over random sessions). The ledger is
never touched: entries are ledger events or copies. A kept ledger event may be the object of an
earlier read of the same session (backends hand out copies); it is equal, the ledger never changes.
"""

from __future__ import annotations

import itertools
import logging
import operator
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlab.core.mechanism import (
    CompactionStep,
    EventsRole,
    RenderedHistory,
    RequestDraft,
    RequestProcessor,
    SummaryStep,
    is_history_event,
    render_history_message,
    round_start,
    run_processors,
    visible_keys,
)
from agentlab.core.rules import protected_units, unit_of
from agentlab.events import Event, Message
from agentlab.model import tokens
from agentlab.model.tokens import event_tokens
from agentlab.session.base import ledger_extends

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.session.base import Summary

log = logging.getLogger(__name__)

#: Sessions whose projection one agent keeps (least recently used dropped first).
DEFAULT_MAX_SESSIONS = 64

#: The roles this cache reproduces, in the only order it accepts them.
_MIRRORED = (EventsRole.HISTORY, EventsRole.SUMMARY, EventsRole.CURRENT_INPUT, EventsRole.COMPACTION)


@dataclass(frozen=True)
class ProjectionPlan:
    """The event processors of a chain this cache reproduces (the others run as they are)."""

    history: RequestProcessor
    current_input: RequestProcessor
    summary: SummaryStep | None = None
    compaction: CompactionStep | None = None


def plan_or_reason(processors: Sequence[RequestProcessor]) -> tuple[ProjectionPlan | None, str]:
    """The plan for a chain, or ``None`` and why this cache cannot mirror it.

    Each processor declares what it does to ``draft.events`` (:class:`~agentlab.core.EventsRole`).
    Required: exactly one history and one current-input step, at most one summary step (between
    them) and one compaction step (after current input), and every other processor declared as
    leaving the events untouched. The roles are the whole contract: a summary step implements
    :class:`~agentlab.core.SummaryStep`, a compaction step :class:`~agentlab.core.CompactionStep`,
    whatever their class.
    """
    found: dict[EventsRole, RequestProcessor] = {}
    order: list[EventsRole] = []
    for p in processors:
        role = getattr(p, "events_role", None)
        if role is EventsRole.UNTOUCHED:
            continue
        name = getattr(p, "name", type(p).__name__)
        if role is None:
            return None, f"processor {name!r} declares no events_role"
        if role not in _MIRRORED:
            return None, f"processor {name!r} declares {role}, which the cache does not mirror"
        if role in found:
            return None, f"two processors declare {role} ({getattr(found[role], 'name', '?')!r} and {name!r})"
        found[role] = p
        order.append(role)
    if EventsRole.HISTORY not in found or EventsRole.CURRENT_INPUT not in found:
        return None, "the chain has no history step or no current-input step"
    if order != [r for r in _MIRRORED if r in found]:
        return None, "the event steps are not in the order history, summary, current input, compaction"
    return ProjectionPlan(
        history=found[EventsRole.HISTORY],
        current_input=found[EventsRole.CURRENT_INPUT],
        summary=found.get(EventsRole.SUMMARY),  # type: ignore[arg-type]  # the SUMMARY role promises SummaryStep
        compaction=found.get(EventsRole.COMPACTION),  # type: ignore[arg-type]  # the COMPACTION role: CompactionStep
    ), ""


def plan_for(processors: Sequence[RequestProcessor]) -> ProjectionPlan | None:
    """The plan for a chain, or ``None`` (logged at debug level, with the reason) to take the full chain."""
    plan, reason = plan_or_reason(processors)
    if plan is None:
        log.debug("projection cache: the full chain builds every request: %s", reason)
    return plan


class PlanMemo:
    """:func:`plan_for` of the last chain asked about, worked out again only when the chain changed.

    An agent asks before every request; working the plan out costs more than the rest of a
    warm incremental call's events stage. The chain counts as unchanged while it holds the same
    processor objects, in the same order, each declaring the same ``events_role``.
    """

    __slots__ = ("_plan", "_processors", "_roles")

    def __init__(self) -> None:
        self._processors: tuple[RequestProcessor, ...] = ()
        self._roles: list[Any] = []
        self._plan: ProjectionPlan | None = None

    def plan(self, processors: Sequence[RequestProcessor]) -> ProjectionPlan | None:
        """:func:`plan_for` ``processors``."""
        roles = [getattr(p, "events_role", None) for p in processors]
        known = self._processors
        if (not known or len(known) != len(processors) or not all(map(operator.is_, known, processors))
                or roles != self._roles):
            self._plan = plan_for(processors)
            self._processors, self._roles = tuple(processors), roles
        return self._plan


@dataclass
class Projected:
    """The events stage of one request, as the full chain would have left it."""

    events: list[Event]
    rendered: RenderedHistory
    summary: Summary | None
    stat: dict[str, Any] | None



@dataclass
class _Projection:
    """Everything kept for one (app, user, session, filter key, signature)."""

    # -- ledger layer: every ledger event seen so far ----------------------------------------
    ledger_len: int = 0
    last_id: str = ""
    positions: dict[str, int] = field(default_factory=dict)
    #: An empty or repeated event id: the fast path cannot tell kept from covered events.
    broken: bool = False
    # -- kept-history layer (valid for one boundary) --------------------------------------------
    signature: tuple[Any, ...] | None = None
    boundary: int = -2  # ledger index of the last covered event; -1 = nothing covered
    covered: list[Event] = field(default_factory=list)
    kept: list[Event] = field(default_factory=list)
    kept_ids: set[str] = field(default_factory=set)
    kept_until: int = 0  # ledger events examined for ``kept``
    first_of_invocation: dict[str, int] = field(default_factory=dict)
    unit_finals: dict[str, int] = field(default_factory=dict)
    first_tool_result: dict[str, int] = field(default_factory=dict)
    called: set[str] = field(default_factory=set)
    answered: set[str | None] = field(default_factory=set)
    first_call: dict[str, int] = field(default_factory=dict)
    first_result: dict[str | None, int] = field(default_factory=dict)
    # -- output layer: the previous call's result over E = kept (+ the current input) ----------
    out_events: list[Event] = field(default_factory=list)
    msgs: list[Message] = field(default_factory=list)
    msg_at: list[int] = field(default_factory=lambda: [0])
    #: Prefix sums per position: tokens before, replaced tokens (old, new), pass 0/1/2 counts.
    sums: list[tuple[int, int, int, int, int, int]] = field(default_factory=lambda: [(0, 0, 0, 0, 0, 0)])
    msg_tokens: list[int] = field(default_factory=lambda: [0])
    valid_upto: int = 0  # output positions known to be current (the dirty tail starts here)
    protected: frozenset[str] = frozenset()
    #: Compacted copy (or ``None``) per (event id, historical); valid for ``signature``.
    decisions: dict[tuple[str, bool], tuple[Event, str] | None] = field(default_factory=dict)

    def reset_kept(self, signature: tuple[Any, ...], boundary: int) -> None:
        decisions = self.decisions if signature == self.signature else {}
        fresh = _Projection(ledger_len=self.ledger_len, last_id=self.last_id, positions=self.positions,
                            broken=self.broken)
        self.__dict__.update(fresh.__dict__)
        self.signature = signature
        self.boundary = boundary
        self.decisions = decisions

    def mark_dirty(self, position: int) -> None:
        if position < self.valid_upto:
            self.valid_upto = position


class ProjectionCache:
    """Per-agent store of incremental projections (see the module docstring)."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._states: OrderedDict[tuple[str, str, str, str, tuple[Any, ...]], _Projection] = OrderedDict()
        self._lock = threading.Lock()
        #: Calls served incrementally, rebuilt from scratch, and handed to the full chain.
        self.counts = {"incremental": 0, "rebuilt": 0, "full_chain": 0}
        #: Why the latest call handed to the full chain did ("" before any did).
        self.last_reason = ""

    def clear(self) -> None:
        """Forget every kept projection (the next call of each session rebuilds)."""
        with self._lock:
            self._states.clear()

    async def build(self, inv: Invocation, processors: Sequence[RequestProcessor], plan: ProjectionPlan,
                    draft: RequestDraft) -> None:
        """Run the chain into ``draft``, with its events stage served from the cache when possible."""
        projected = self.project(inv, draft, plan)
        if projected is None:
            log.debug("projection cache: session %s takes the full chain for this call: %s", inv.session.id,
                      self.last_reason)
            await run_processors(inv, list(processors), draft)
            return
        for p in processors:
            if p is plan.history or p is plan.current_input:
                continue
            if p is plan.summary:
                if projected.summary is not None:
                    plan.summary.inject(draft, projected.summary)
                continue
            if p is plan.compaction:
                if projected.stat is not None:
                    draft.stats.append(projected.stat)
                continue
            await p.process(inv, draft)
        draft.events = projected.events
        draft.rendered_history = projected.rendered

    def project(self, inv: Invocation, draft: RequestDraft, plan: ProjectionPlan) -> Projected | None:
        """The events stage for this call, or ``None`` to let the full chain build it."""
        with self._lock:
            rebuilt_before = self.counts["rebuilt"]
            result = self._project(inv, draft, plan)
            if isinstance(result, str):
                self.last_reason = result
                self.counts["full_chain"] += 1
                return None
            elif self.counts["rebuilt"] == rebuilt_before:
                self.counts["incremental"] += 1
        return result

    # ------------------------------------------------------------------------------ internals

    def _state(self, key: tuple[str, str, str, str, tuple[Any, ...]]) -> _Projection:
        state = self._states.get(key)
        if state is None:
            state = _Projection()
            self._states[key] = state
            while len(self._states) > self.max_sessions:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(key)
        return state

    def _project(self, inv: Invocation, draft: RequestDraft, plan: ProjectionPlan) -> Projected | str:
        """The events stage, or why the full chain must build it."""
        session = inv.session
        ledger = session.events
        compaction = plan.compaction
        compaction_signature = compaction.signature(draft) if compaction is not None else None
        current_unit = inv.request_id or None
        # What the kept projection depends on besides the ledger and the boundary. It is part of
        # the key, so that requests which alternate (say, with and without tools once the tool
        # budget is spent) each keep their own projection instead of rebuilding one another's.
        signature = (compaction_signature, current_unit is not None, plan.summary is not None)
        key = (inv.app_name, inv.user_id, session.id, inv.filter_key, signature)
        state = self._state(key)
        if not ledger_extends(ledger, state.ledger_len, state.last_id):
            # Not the ledger seen before with events appended: the session was recreated. Start over.
            state = self._states[key] = _Projection()
        self._consume_ledger(state, ledger)
        if state.broken:
            return "the ledger has an empty or repeated event id"

        summary = plan.summary.pick(session, inv.filter_key) if plan.summary is not None else None
        boundary = -1
        if summary is not None and summary.boundary is not None:
            boundary = state.positions.get(summary.boundary.last_event_id, -1) if summary.boundary.last_event_id else -1
            if boundary < 0:
                return "the summary boundary names no event of the ledger (a time-only boundary)"
        if state.signature != signature or state.boundary != boundary:
            state.reset_kept(signature, boundary)
            self._rebuild_kept(state, ledger, inv.filter_key)
            self.counts["rebuilt"] += 1
        else:
            self._extend_kept(state, ledger, inv.filter_key)

        if plan.summary is not None and plan.summary.carried_over(inv, state.covered, state.kept):
            return "the summary boundary splits a tool round or covers this run's tool round"
        current = inv.user_event
        virtual: Event | None = None
        if current is not None and current.id not in state.kept_ids:
            m = current.message
            if inv.id in state.first_of_invocation or (m is not None and (m.role != "user" or m.tool_calls)):
                return "the current input is not a plain user message at the end of the history"
            virtual = current

        kept = state.kept
        n = len(kept) + (virtual is not None)
        protected = self._protected(state, virtual, current_unit,
                                    compaction.keep_recent_requests if compaction is not None else 0)
        if compaction is not None:
            for unit in protected.symmetric_difference(state.protected):
                first = state.first_tool_result.get(unit)
                if first is not None:
                    state.mark_dirty(first)
        state.protected = protected
        self._render_tail(state, virtual, n, protected, compaction, compaction_signature, current_unit is not None)
        state.valid_upto = len(kept)  # the current input (if virtual) is recomputed next time

        totals = state.sums[n]
        stat = None
        if compaction is not None and (totals[3] + totals[4] + totals[5]):
            before = totals[0]
            stat = compaction.stat(totals[3] + totals[4] + totals[5], before, before - totals[1] + totals[2],
                                   {name: count for name, count in zip(("pass0", "pass1", "pass2"), totals[3:], strict=True)
                                    if count})
        return Projected(events=list(state.out_events), rendered=RenderedHistory(list(state.msgs), state.msg_tokens[-1]),
                         summary=summary, stat=stat)

    @staticmethod
    def _consume_ledger(state: _Projection, ledger: list[Event]) -> None:
        positions = state.positions
        for index in range(state.ledger_len, len(ledger)):
            event_id = ledger[index].id
            if not event_id or event_id in positions:
                state.broken = True
            positions[event_id] = index
        if len(ledger) > state.ledger_len:
            state.ledger_len = len(ledger)
            state.last_id = ledger[-1].id

    def _rebuild_kept(self, state: _Projection, ledger: list[Event], filter_key: str) -> None:
        boundary = state.boundary
        if boundary >= 0:
            start = round_start(ledger, boundary)  # where the history processor starts too
            visible = visible_keys(filter_key)
            state.covered = [e for e in ledger[start:boundary + 1]
                             if (visible is None or e.filter_key in visible) and is_history_event(e)]
        state.kept_until = boundary + 1
        self._extend_kept(state, ledger, filter_key)

    @staticmethod
    def _extend_kept(state: _Projection, ledger: list[Event], filter_key: str) -> None:
        kept = state.kept
        state.mark_dirty(len(kept))
        visible = visible_keys(filter_key)
        for index in range(state.kept_until, len(ledger)):
            e = ledger[index]
            if not ((visible is None or e.filter_key in visible) and is_history_event(e)):
                continue
            position = len(kept)
            kept.append(e)
            state.kept_ids.add(e.id)
            state.first_of_invocation.setdefault(e.invocation_id, position)
            unit = unit_of(e)
            if unit is not None:
                if e.is_final_response():
                    state.unit_finals[unit] = state.unit_finals.get(unit, 0) + 1
                if e.is_tool_result():
                    state.first_tool_result.setdefault(unit, position)
            m = e.message
            assert m is not None  # a history event has a message
            if m.role == "assistant":
                for call in m.tool_calls:
                    if call.id not in state.called:
                        state.called.add(call.id)
                        # A result seen before its call was left out; it is in view now.
                        if call.id in state.first_result:
                            state.mark_dirty(state.first_result[call.id])
                    state.first_call.setdefault(call.id, position)
            elif m.role == "tool":
                if m.tool_call_id not in state.answered:
                    state.answered.add(m.tool_call_id)
                    # The call's message was rendered without this call; render it again.
                    if m.tool_call_id in state.first_call:
                        state.mark_dirty(state.first_call[m.tool_call_id])
                state.first_result.setdefault(m.tool_call_id, position)
        state.kept_until = len(ledger)

    @staticmethod
    def _protected(state: _Projection, virtual: Event | None, current_unit: str | None,
                   keep_recent: int) -> frozenset[str]:
        """:func:`agentlab.core.protected_units` over E, walking back only as far as the recent units go."""
        # Units from the newest event back (the walk stops once enough are found). A unit is
        # completed once any of its events in view is a final answer: ``unit_finals`` holds
        # exactly those units (the current input, a user message, never is one).
        newest_first: Iterator[str | None] = map(unit_of, reversed(state.kept))
        if virtual is not None:
            newest_first = itertools.chain((unit_of(virtual),), newest_first)
        return protected_units(newest_first, state.unit_finals, current_unit, keep_recent)

    @staticmethod
    def _render_tail(state: _Projection, virtual: Event | None, n: int, protected: frozenset[str],
                     compaction: CompactionStep | None, compaction_signature: tuple[Any, ...] | None,
                     has_current: bool) -> None:
        start = min(state.valid_upto, len(state.out_events))
        del state.out_events[start:]
        del state.sums[start + 1:]
        first_msg = state.msg_at[start]
        del state.msg_at[start + 1:]
        del state.msgs[first_msg:]
        del state.msg_tokens[first_msg + 1:]
        kept, decisions = state.kept, state.decisions
        called, answered = state.called, state.answered
        total = state.sums[start]
        msg_total = state.msg_tokens[-1]
        for position in range(start, n):
            e = kept[position] if position < len(kept) else virtual
            assert e is not None
            out = e
            replaced_old = replaced_new = 0
            passes = [0, 0, 0]
            if compaction is not None and e.is_tool_result():
                unit = unit_of(e)
                historical = unit is not None and unit not in protected
                key = (e.id, historical)
                if key in decisions:
                    decision = decisions[key]
                else:
                    decision = compaction.decide(e, historical=historical, has_current=has_current,
                                                 draft_signature=compaction_signature or ())
                    if e is not virtual:
                        decisions[key] = decision
                if decision is not None:
                    out, pass_name = decision
                    replaced_old, replaced_new = event_tokens(e), event_tokens(out)
                    passes[int(pass_name[-1])] = 1
            total = (total[0] + event_tokens(e), total[1] + replaced_old, total[2] + replaced_new,
                     total[3] + passes[0], total[4] + passes[1], total[5] + passes[2])
            state.sums.append(total)
            state.out_events.append(out)
            m = out.message
            if m is not None and m.role != "system":
                rendered = render_history_message(m, called, answered)
                if rendered is not None:
                    state.msgs.append(rendered)
                    msg_total += tokens.count_message(rendered)
                    state.msg_tokens.append(msg_total)
            state.msg_at.append(len(state.msgs))


__all__ = ["DEFAULT_MAX_SESSIONS", "PlanMemo", "Projected", "ProjectionCache", "ProjectionPlan", "plan_for",
           "plan_or_reason"]
