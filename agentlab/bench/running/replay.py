"""Seeding a generic arm's session with the case's history: ``forced`` or ``lived`` (``--seeding``).

* ``forced`` (the default, today's behaviour): every history event is appended at once and the
  mechanisms first see the history when the question's request is built.
* ``lived``: the history is replayed event by event through the runner's mechanisms, as a live
  agent would have lived it — after each event its ``on_event_appended`` hooks run (the summary
  worker's jobs are scheduled there), each turn ends with ``on_run_completed``, and the request a
  next answer would send is built (``LLMAgent.build_request``: the projection, its compaction and
  the synchronous pressure path) without an answer call. So each mechanism's own trigger fires
  where it would have; background summaries are waited for before the question is asked. Summary
  calls run inside the executor's ``observe_calls`` and are counted like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentlab.core import Invocation, RunOptions
from agentlab.events import Event, Message

FORCED, LIVED = "forced", "lived"
SEEDINGS: tuple[str, ...] = (FORCED, LIVED)


def check_seeding(seeding: str) -> str:
    """``seeding`` if it is one of :data:`SEEDINGS`, else a ``ValueError`` naming them."""
    if seeding not in SEEDINGS:
        raise ValueError(f"unknown seeding {seeding!r}; use one of: {', '.join(SEEDINGS)}")
    return seeding


async def seed(runner: Any, user_id: str, session_id: str, events: Sequence[Event], seeding: str = FORCED,
               *, options: RunOptions | None = None) -> dict[str, Any]:
    """Put ``events`` into a new session of ``runner`` the ``seeding`` way; facts for the case metadata."""
    check_seeding(seeding)
    service = runner.session_service
    session = await service.create_session(runner.app_name, user_id, session_id)
    if seeding == FORCED:
        for event in events:
            await service.append_event(session, event)
        return {"seeded_events": len(events)}
    return await _live(runner, session, events, options or RunOptions())


async def _live(runner: Any, session: Any, events: Sequence[Event], options: RunOptions) -> dict[str, Any]:
    service = runner.session_service
    mechanisms = runner.mechanisms
    inv: Invocation | None = None
    requests = 0

    async def finish(turn: Invocation) -> None:
        for mechanism in mechanisms:
            await mechanism.on_run_completed(turn)
        for hook in runner.after_run:
            await hook(turn)

    for event in events:
        if inv is None or event.author == "user":
            if inv is not None:
                await finish(inv)
            message = event.message or Message.user(event.text)
            inv = Invocation(app_name=runner.app_name, user_id=session.user_id, session=session,
                             session_service=service, agent=runner.agent, message=message, options=options,
                             services=runner.services)
            inv.user_event = event
        await service.append_event(session, event)
        for mechanism in mechanisms:
            await mechanism.on_event_appended(inv, event)
        for hook in runner.after_append:
            await hook(inv, event)
        if hasattr(runner.agent, "build_request"):
            await runner.agent.build_request(inv)  # the projection a next answer would see; no answer call
            requests += 1
    if inv is not None:
        await finish(inv)
    worker = runner.summary_worker
    if worker is not None and hasattr(worker, "drain"):
        await worker.drain()
    return {"seeded_events": len(events), "lived_requests": requests}


__all__ = ["FORCED", "LIVED", "SEEDINGS", "check_seeding", "seed"]
