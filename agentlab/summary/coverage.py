"""How far the summaries of a session reach: the boundary other components read.

Recall's ``current_hidden`` scope searches exactly what a summary replaced. It asks here, and
never reads summary state itself, so that where the summary keeps its boundary (the session's
summaries, or legacy session-state keys) stays this package's business.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentlab.session.base import FULL_SESSION_KEY, Session, SessionService, SummaryBoundary

#: Session-state keys an older summariser left (legacy boundary source, read only as a last resort).
STATE_LAST_INCLUDED_EVENT_ID = "summary:last_included_event_id"
STATE_LAST_INCLUDED_TS = "summary:last_included_ts"


def _covering_keys(filter_key: str) -> list[str]:
    """The filter key, its parents (``a/b`` for ``a/b/c``), then the full-session key."""
    parts = filter_key.split("/")
    candidates = [filter_key, *("/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1))]
    keys: list[str] = []
    for key in candidates:
        key = key.strip()
        if key and key not in keys:
            keys.append(key)
    return [*keys, FULL_SESSION_KEY]


async def coverage_boundary(session: Session, session_service: SessionService,
                            filter_key: str) -> SummaryBoundary | None:
    """The boundary of the summary that covers ``filter_key`` in ``session``, or ``None``.

    Exact key, then parent keys, then the full-session key (the stored summary first, else the
    in-memory one), then the legacy state keys. Only a summary with text and a boundary that
    names an event or a time counts.
    """
    for key in _covering_keys(filter_key):
        summary = await session_service.get_summary(session, key)
        if summary is None:
            summary = session.summaries.get(key)
        if summary is not None and summary.text.strip() and summary.boundary is not None:
            boundary = summary.boundary
            if boundary.last_event_id or boundary.cutoff_at:
                return boundary
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


__all__ = ["STATE_LAST_INCLUDED_EVENT_ID", "STATE_LAST_INCLUDED_TS", "coverage_boundary"]
