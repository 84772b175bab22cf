"""Rules that several mechanisms and the runtime apply, each with exactly one home.

* request units and the protected units (compaction's passes and the incremental projection);
* the per-event token count is :func:`agentlab.model.tokens.event_tokens`, and "the ledger only
  grew" is :func:`agentlab.session.base.ledger_extends` (re-exported here), because layers below
  the core need them too;
* which summary is in force under a filter key is the summary package's
  (:func:`agentlab.summary.summary_in_force`), used by its injection, its coverage accessor and
  recall's hidden scope alike.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from agentlab.events import Event
from agentlab.model.tokens import event_tokens
from agentlab.session.base import ledger_extends


def unit_of(event: Event) -> str | None:
    """The request unit an event belongs to (request id, else invocation id, else none)."""
    if event.request_id:
        return event.request_id
    if event.invocation_id:
        return f"inv:{event.invocation_id}"
    return None


def protected_units(units_newest_first: Iterable[str | None], completed: Container[str],
                    current_unit: str | None, keep_recent: int) -> frozenset[str]:
    """The current unit plus the ``keep_recent`` most recent *completed* units.

    ``units_newest_first`` are the units of the projected events from the newest event back (the
    walk stops as soon as enough units are found, so a caller may pass a lazy iterator);
    ``completed`` holds the units with a final answer in view. Recency is a unit's last event.
    """
    recent: list[str] = []
    if keep_recent > 0:
        seen: set[str] = set()
        for unit in units_newest_first:
            if unit is None or unit in seen:
                continue
            seen.add(unit)
            if unit != current_unit and unit in completed:
                recent.append(unit)
                if len(recent) >= keep_recent:
                    break
    protected = set(recent)
    if current_unit:
        protected.add(current_unit)
    return frozenset(protected)


def completed_units(events: Iterable[Event]) -> set[str]:
    """Units holding a final assistant answer among ``events``."""
    return {u for e in events if e.is_final_response() and (u := unit_of(e)) is not None}


__all__ = ["completed_units", "event_tokens", "ledger_extends", "protected_units", "unit_of"]
