"""The chain's own request processors: instruction, history, current input (the steps no mechanism owns).

A request is built by an ordered chain of processors over a :class:`RequestDraft`::

    instruction -> (memory preload) -> history -> (summary) -> (preload recall)
    -> (recall overview) -> current input -> (compaction)

The processors in parentheses are contributed by the context mechanisms, each at its declared
stage (:mod:`agentlab.core.mechanism`).

Processors may replace ``draft.events`` with copies but never mutate the ledger's events:
the session history stays exactly as it was appended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab.core.mechanism import (
    EventsRole,
    RequestDraft,
    is_history_event,
    round_start,
    summary_step,
    visible_keys,
)

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation


class InstructionProcessor:
    """The agent's instruction, first in the system message."""

    name = "instruction"
    events_role = EventsRole.UNTOUCHED

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        """Append the agent's instruction (if it has one) to the system text."""
        instruction = getattr(inv.agent, "instruction", "")
        if instruction:
            draft.system_parts.append(instruction)


class HistoryProcessor:
    """All message events of the session visible under the invocation's filter key.

    When a summary step follows, only the tail that can survive it is scanned: from the
    last user turn at or before the summary boundary onwards (the summary step needs that
    round to keep split tool rounds well-formed). Projection cost then grows with the events
    after the boundary, not with the whole history.
    """

    name = "history"
    events_role = EventsRole.HISTORY

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        """Set ``draft.events`` to the visible history events (from the scan start on)."""
        events = inv.session.events
        start = projection_start(inv)
        visible = visible_keys(inv.filter_key)
        draft.events = [
            e for e in events[start:] if (visible is None or e.filter_key in visible) and is_history_event(e)
        ]


def projection_start(inv: Invocation) -> int:
    """Index of the first ledger event a request can still show (0 without a summary)."""
    step = summary_step(getattr(inv.agent, "processors", ()))
    if step is None:
        return 0
    session = inv.session
    summary = step.pick(session, inv.filter_key)
    if summary is None or summary.boundary is None or not summary.boundary.last_event_id:
        return 0
    index = session.event_index(summary.boundary.last_event_id)
    if index < 0:
        return 0
    return round_start(session.events, index)


class CurrentInputProcessor:
    """Make sure the current user input is in the request even if a summary covered it."""

    name = "current_input"
    events_role = EventsRole.CURRENT_INPUT

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        """Insert the run's user event before the run's other events when it is missing."""
        current = inv.user_event
        if current is None or any(e.id == current.id for e in draft.events):
            return
        position = next((i for i, e in enumerate(draft.events) if e.invocation_id == inv.id), len(draft.events))
        draft.events.insert(position, current)


__all__ = ["CurrentInputProcessor", "HistoryProcessor", "InstructionProcessor", "projection_start"]
