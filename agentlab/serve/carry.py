"""What a branched conversation keeps from its previous session: the summaries of the shared prefix.

A client that rewrites the end of its history each turn (it moves a context block after the
history, strips the reminder it appended to its previous message) branches its conversation on
every request (see :mod:`agentlab.serve.proxy`): the new session is seeded with the whole request.
Two rules let a summarising arm still reuse its work:

* **Carry** (:func:`carry_summaries`): a summary of the previous session whose boundary event lies
  in the prefix the request shares with that session's ledger (the same chain hash, so the same
  messages in the same order, tenant included) is copied into the new session, its boundary moved
  to the new session's event at that position. The summary covers exactly the events it covered
  before, so the arm shows it and the summariser does not summarise that prefix again. A summary
  whose boundary lies beyond the shared prefix covers messages the client changed: it is not
  carried (never a near match).
* **Hold back** (:func:`held_back`): a rolling summary reaches the ledger's tip, which is what such
  a client rewrites next, so it could never be carried. Once a conversation has branched, its
  summaries stop before the last ``n`` user messages, ``n`` being how many user messages the client
  rewrote at its latest branch (:func:`rewritten_users`), at most :data:`MAX_HOLDBACK`: a branch
  deeper than that is an edit, not a rewriting client's habit, and holds nothing back. A
  conversation that never branched (an append-only client) is summarised up to its tip as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentlab.events import Event
from agentlab.session.base import Session, Summary, SummaryBoundary

#: The most user messages a branch may have rewritten and still be held back from the summaries.
MAX_HOLDBACK = 3


def carry_summaries(summaries: Mapping[str, Summary], old_events: Sequence[Event], new_events: Sequence[Event],
                    shared: int) -> dict[str, Summary]:
    """The summaries of the old session (``old_events``: its ledger) that cover only its first
    ``shared`` events, which the new session's first ``shared`` events (``new_events``) repeat;
    each with its boundary moved to the new session's event (by filter key).

    A summary is carried only when its boundary names an event of the old ledger, that event is
    among the first ``shared`` and the new event at its position has the same chain hash: a
    boundary given by time alone, or one the ledger does not hold, is not guessed at.
    """
    carried: dict[str, Summary] = {}
    position = {e.id: i for i, e in enumerate(old_events[:shared])}
    for key, summary in summaries.items():
        boundary = summary.boundary
        if boundary is None or not boundary.last_event_id or not summary.text.strip():
            continue
        i = position.get(boundary.last_event_id)
        if i is None or i >= len(new_events):
            continue
        old, new = old_events[i], new_events[i]
        if "chain" not in old.metadata or old.metadata["chain"] != new.metadata.get("chain"):
            continue
        carried[key] = Summary(text=summary.text, updated_at=summary.updated_at, topics=summary.topics,
                               boundary=SummaryBoundary(filter_key=boundary.filter_key, cutoff_at=new.timestamp,
                                                        last_event_id=new.id, version=boundary.version))
    return carried


def covered_events(summary: Summary | None, events: Sequence[Event]) -> int:
    """How many of ``events`` (a ledger) ``summary`` covers: up to its boundary event, 0 without one."""
    if summary is None or summary.boundary is None:
        return 0
    return next((i + 1 for i, e in enumerate(events) if e.id == summary.boundary.last_event_id), 0)


def rewritten_users(old_events: Sequence[Event], shared: int) -> int:
    """User messages of the old ledger at or after the point where the request left it (at least 1),
    or 0 when they are more than :data:`MAX_HOLDBACK`.
    """
    users = max(1, sum(1 for e in old_events[shared:] if e.role == "user"))
    return users if users <= MAX_HOLDBACK else 0


def held_back(session: Session, users: int) -> Session:
    """``session`` without its last ``users`` user messages and everything after them (the part a
    rewriting client changes next), for the summariser; ``session`` itself when ``users`` is 0.

    The view never ends before the boundary of a summary it holds (the summariser then finds
    nothing new), and it shares the session's summaries, so a summary written through it is the
    session's.
    """
    if users <= 0:
        return session
    events = session.events
    cut, seen = len(events), 0
    while cut > 0 and seen < users:
        cut -= 1
        seen += events[cut].role == "user"
    if seen < users:
        cut = 0
    floor = max((covered_events(s, events) for s in session.summaries.values()), default=0)
    return Session(app_name=session.app_name, user_id=session.user_id, id=session.id,
                   events=events[:max(cut, floor)], state=session.state, summaries=session.summaries,
                   created_at=session.created_at)
