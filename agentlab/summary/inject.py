"""The summary in the next request: the summary text, and only the events after its boundary."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from agentlab.core.mechanism import EventsRole
from agentlab.events import Event
from agentlab.session.base import Session, Summary
from agentlab.summary.coverage import summary_in_force
from agentlab.summary.policy import InjectionMode, SummaryPolicy
from agentlab.summary.prompts import (
    CURRENT_RUN_ARGS_NOTE,
    CURRENT_RUN_RESULT_PLACEHOLDER,
    SYSTEM_INJECTION_TEMPLATE,
    USER_INJECTION_TEMPLATE,
)

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.core.mechanism import RequestDraft


def pick_summary(session: Session, filter_key: str) -> Summary | None:
    """The summary in force under ``filter_key`` (:func:`agentlab.summary.coverage.summary_in_force`)."""
    return summary_in_force(session.summaries, filter_key)


def render_injection(summary_text: str, mode: InjectionMode) -> str:
    """The summary text in the wrapper of its injection mode (system message or user prefix)."""
    template = SYSTEM_INJECTION_TEMPLATE if mode == "system" else USER_INJECTION_TEMPLATE
    return template.format(summary=summary_text)


class SummaryInjectionProcessor:
    """The summary step of the request chain: summary + only the events after its boundary.

    When the boundary reaches into the current run (a synchronous summary absorbed this run's
    tool round), the latest complete tool round of the run is re-projected with its payloads
    replaced by a short note, so the model knows the work was done and does not repeat it.
    """

    name = "summary"
    events_role = EventsRole.SUMMARY

    def __init__(self, policy: SummaryPolicy | None = None) -> None:
        self.policy = policy or SummaryPolicy()

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        """Keep the events after the boundary (plus what :meth:`carried_over` adds); inject the text."""
        summary = self.pick(inv.session, inv.filter_key)
        if summary is None:
            return
        after = inv.session.events_after_boundary(summary.boundary)
        after_ids = {e.id for e in after}
        # draft.events follows ledger order, so the kept events are a suffix: walk back from the end.
        cut = len(draft.events)
        while cut > 0 and draft.events[cut - 1].id in after_ids:
            cut -= 1
        covered, kept = draft.events[:cut], draft.events[cut:]
        draft.events = self.carried_over(inv, covered, kept) + kept
        self.inject(draft, summary)

    def pick(self, session: Session, filter_key: str) -> Summary | None:
        """The summary a request under ``filter_key`` shows (see :func:`pick_summary`)."""
        return pick_summary(session, filter_key)

    def carried_over(self, inv: Invocation, covered: list[Event], kept: list[Event]) -> list[Event]:
        """Covered events that stay: this run's resumed tool round (elided), and calls of a split round."""
        return _resumed_tool_round(inv, covered) + _calls_of_split_round(covered, kept)

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
    pending: set[str | None] = set()
    for e in kept:  # results of a split round sit at the very start of the kept events
        m = e.message
        if m is None or not e.is_tool_result():
            break
        pending.add(m.tool_call_id)
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
    results = {e.message.tool_call_id: (e, e.message) for e in mine if e.is_tool_result() and e.message}
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
            result, result_message = results[c.id]
            out.append(result.copy_with(
                choices=[result_message.with_content(CURRENT_RUN_RESULT_PLACEHOLDER)],
                metadata={**result.metadata, "projection": "current_invocation_summary", "compacted": "resume"},
            ))
        return out
    return []
