"""A LongMemEval question's haystack as the history every mode answers from: one session, in order.

Each haystack turn becomes an event with its real role, timestamped with its session's date, its
id naming the question, session and turn (:func:`event_id_for`), so evidence recall can match
search hits against the ``has_answer`` turns (:func:`evidence_ids`). The generic arms, the delivery
and retention measures replay the same events (:func:`haystack_events`).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from agentlab.bench.datasets.longmemeval import LongMemEvalQuestion
from agentlab.events import Event, Message, user_event

APP_NAME = "longmemeval"
USER_ID = "lme-user"
AGENT_NAME = "assistant"


def parse_haystack_date(text: str) -> float | None:
    """Epoch seconds of ``2023/05/20 (Sat) 02:21`` (UTC), else None."""
    raw = " ".join(str(text).split())
    for layout in ("%Y/%m/%d (%a) %H:%M", "%Y/%m/%d %H:%M", "%Y/%m/%d"):
        try:
            return datetime.strptime(raw, layout).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    return None


def event_id_for(question_id: str, session_index: int, turn_index: int) -> str:
    """The id of one haystack turn; evidence recall matches search hits against these ids."""
    return f"{question_id}/s{session_index}/t{turn_index}"


def haystack_events(question: LongMemEvalQuestion) -> list[Event]:
    """Every haystack turn in order as an event with its real role and its session's date.

    Assistant turns are authored by the agent, so they stay assistant messages in every request.
    """
    events: list[Event] = []
    clock = datetime(2000, 1, 1, tzinfo=timezone.utc).timestamp()
    for si, session in enumerate(question.sessions):
        start = parse_haystack_date(session.date)
        clock = start if start is not None and start > clock else clock + 3_600
        for ti, turn in enumerate(session.turns):
            meta = {"haystack_session_id": session.session_id, "has_answer": turn.has_answer}
            # Turns of a session 1 ms apart: the ledger order is also the time order.
            timestamp = clock + ti / 1000
            if turn.role == "assistant":
                events.append(Event(author=AGENT_NAME, choices=[Message.assistant(turn.content)],
                                    id=event_id_for(question.question_id, si, ti), timestamp=timestamp, metadata=meta))
            else:
                event = user_event(turn.content, timestamp=timestamp)
                event.id, event.metadata = event_id_for(question.question_id, si, ti), meta
                events.append(event)
        clock += len(session.turns) / 1000 + 1
    return [e for e in events if e.text]


def evidence_ids(question: LongMemEvalQuestion) -> list[str]:
    """Ids of the turns that hold the answer (``has_answer``): the targets of evidence recall."""
    return [event_id_for(question.question_id, si, ti) for si, ti in question.evidence_turns()]


async def seed_session(service: Any, question: LongMemEvalQuestion, session_id: str) -> Any:
    """A session holding the question's whole haystack in order: what every mode answers from."""
    session = await service.create_session(APP_NAME, USER_ID, session_id)
    for event in haystack_events(question):
        await service.append_event(session, event)
    return session


