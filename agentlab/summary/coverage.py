"""Which summary is in force under a filter key, and how far it reaches: the one home of that rule.

**The rule** (:func:`summary_in_force`): under filter key ``a/b/c`` the summary in force is the
first one with non-blank text among the keys ``a/b/c``, ``a/b``, ``a`` and the full-session key
``""``. A parent branch's summary covers the parent's view (its own events and its ancestors'),
all of which the child's view shows too (:func:`~agentlab.core.in_filter`), so it applies to the
child until the child has a summary of its own; the full-session summary is
the last resort, as before.

The request (the summary step, :mod:`agentlab.summary.inject`) shows that summary and cuts the
history at its boundary; recall's ``current_hidden`` scope searches exactly the events at or
before that same boundary (:func:`coverage_boundary`). Before this was one function the request
tried only the exact key and then the full session, while the hidden scope tried parents too:
under ``a/b`` with a summary only at ``a`` the request showed the full history while
``current_hidden`` searched as if it were hidden.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentlab.session.base import FULL_SESSION_KEY, Session, SessionService, Summary, SummaryBoundary

#: Session-state keys an older summariser left (legacy boundary source, read only as a last resort).
STATE_LAST_INCLUDED_EVENT_ID = "summary:last_included_event_id"
STATE_LAST_INCLUDED_TS = "summary:last_included_ts"


def covering_keys(filter_key: str) -> list[str]:
    """The filter key, its parents (``a/b`` for ``a/b/c``), then the full-session key."""
    parts = filter_key.split("/")
    candidates = [filter_key, *("/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1))]
    keys: list[str] = []
    for key in candidates:
        key = key.strip()
        if key and key not in keys:
            keys.append(key)
    return [*keys, FULL_SESSION_KEY]


def summary_in_force(summaries: Mapping[str, Summary | None], filter_key: str) -> Summary | None:
    """The summary in force under ``filter_key``: the nearest of the key, its parents, the full session
    (:func:`covering_keys`) whose text is not blank; ``None`` when there is none.
    """
    # Called for every request: walk the parents in place rather than building the key list.
    key = filter_key.strip()
    while True:
        summary = summaries.get(key)
        if summary is not None and summary.text.strip():
            return summary
        if not key:
            return None
        cut = key.rfind("/")
        key = key[:cut].strip() if cut > 0 else FULL_SESSION_KEY


async def coverage_boundary(session: Session, session_service: SessionService,
                            filter_key: str) -> SummaryBoundary | None:
    """The boundary of the summary that covers ``filter_key`` in ``session``, or ``None``.

    The boundary of :func:`summary_in_force` over the stored summaries (each key's stored
    summary, else the in-memory one) — the summary the request under ``filter_key`` shows — when
    it names an event or a time; without a summary in force, the legacy state keys.
    """
    summaries: dict[str, Summary | None] = {}
    for key in covering_keys(filter_key):
        summaries[key] = await session_service.get_summary(session, key) or session.summaries.get(key)
    in_force = summary_in_force(summaries, filter_key)
    if in_force is not None:
        boundary = in_force.boundary
        if boundary is not None and (boundary.last_event_id or boundary.cutoff_at):
            return boundary
        return None
    last_id = str(session.state.get(STATE_LAST_INCLUDED_EVENT_ID) or "").strip()
    cutoff = _parse_time(session.state.get(STATE_LAST_INCLUDED_TS))
    if last_id or cutoff:
        return SummaryBoundary(filter_key=FULL_SESSION_KEY, cutoff_at=cutoff, last_event_id=last_id)
    return None


def _parse_time(value: Any) -> float:
    """A legacy timestamp (seconds, or ISO 8601 with an optional ``Z``) as epoch seconds; 0 if unreadable."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


__all__ = ["STATE_LAST_INCLUDED_EVENT_ID", "STATE_LAST_INCLUDED_TS", "coverage_boundary", "covering_keys",
           "summary_in_force"]
