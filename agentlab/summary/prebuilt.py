"""A summary built once over a whole history, then installed into other sessions holding the same history.

A benchmark that asks several questions about one long history (QMSum: one meeting, many
queries) summarises the history once — forced rolling updates until the boundary reaches the
last event (:func:`~agentlab.summary.worker.summarise_all`) — and gives every question's fresh
session that summary, its boundary on the same event. :func:`build_full_summary` is the first
step, :func:`install_summary` the second. A summary that stops short of the history is not the
condition being measured, so it is an error (:class:`SummaryIncomplete`), never a partial summary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agentlab.model.base import ModelError
from agentlab.session.base import FULL_SESSION_KEY, Session, SessionService, Summary, SummaryBoundary
from agentlab.summary.policy import SummaryPolicy
from agentlab.summary.summarizer import Summarizer
from agentlab.summary.worker import SummaryWorker, summarise_all

__all__ = ["PrebuiltSummary", "SummaryIncomplete", "build_full_summary", "first_summary_messages", "install_summary"]


@dataclass(frozen=True)
class PrebuiltSummary:
    """A forced summary that covers a whole history."""

    text: str
    #: History events it covers (all of them).
    covered: int
    #: Rolling summariser steps it took (1 when the whole history fits the summary model).
    steps: int
    model_calls: int
    build_ms: float


class SummaryIncomplete(Exception):
    """The forced updates stopped before the last event: why (``reason``), and the summariser's error ``code``."""

    def __init__(self, covered: int, total: int, steps: int, reason: str, code: str) -> None:
        super().__init__(f"the summary covers {covered} of {total} events after {steps} forced updates ({reason})")
        self.covered, self.total, self.steps, self.reason, self.code = covered, total, steps, reason, code


async def build_full_summary(service: SessionService, session: Session, model: Any, policy: SummaryPolicy,
                             filter_key: str = FULL_SESSION_KEY) -> PrebuiltSummary:
    """Force rolling summaries of ``session`` until the boundary reaches its last event.

    Each update summarises the longest prefix of the remaining events that fits the summary
    model's input budget, so a small-window model needs several steps. Stops when the last event
    is covered or an update no longer advances; the latter raises :class:`SummaryIncomplete`
    (``code``: the summariser's :class:`~agentlab.model.base.ModelError` code, else
    ``summary_incomplete``).
    """
    worker = SummaryWorker(service, Summarizer(model, policy), policy)
    positions = {e.id: i for i, e in enumerate(session.events)}
    started = time.perf_counter()
    done = await summarise_all(worker, session, filter_key)
    summary, steps = done.summary, done.steps
    covered = 0
    if summary is not None and summary.text and summary.boundary is not None:
        covered = positions.get(summary.boundary.last_event_id, -1) + 1
    if summary is None or covered < len(session.events):
        error = worker.stats.last_error
        reason = f"{type(error).__name__}: {error}" if error else "an update produced no text"
        code = error.code if isinstance(error, ModelError) else "summary_incomplete"
        raise SummaryIncomplete(covered, len(session.events), steps, reason, code)
    return PrebuiltSummary(summary.text, covered, steps, worker.stats.model_calls,
                           (time.perf_counter() - started) * 1000)


async def install_summary(service: SessionService, session: Session, built: PrebuiltSummary,
                          filter_key: str = FULL_SESSION_KEY) -> None:
    """Give a freshly seeded ``session`` the summary ``built`` over the same history, its boundary on the last covered event."""
    last = session.events[built.covered - 1]
    boundary = SummaryBoundary(filter_key, cutoff_at=last.timestamp, last_event_id=last.id)
    await service.write_summary(session, filter_key, Summary(built.text, time.time(), boundary))


def first_summary_messages(events: list[Any], policy: SummaryPolicy, window: int) -> list[Any]:
    """The messages of the first forced update over ``events`` for a summary model with a ``window``-token window.

    No model is called (dry runs count these): the whole history when it fits the summariser's
    input budget, else its longest prefix that does (the first rolling step).
    """
    from agentlab.model.base import ModelInfo
    from agentlab.model.scripted import ScriptedModel  # a window holder; it is never called

    summarizer = Summarizer(ScriptedModel(info=ModelInfo("dry-run", window)), policy)
    return summarizer.plan_standalone(events, "", summarizer.input_budget).messages
