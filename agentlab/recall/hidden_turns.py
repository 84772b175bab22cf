"""Recall of the current session's hidden turns done by a harness, for a model that cannot call tools.

:mod:`agentlab.recall.preload` preloads from the user's *other* sessions. When the evidence sits
in the *current* session behind a summary (QMSum: one meeting transcript, summarised), a harness
runs on the model's behalf the search the ``session_search`` tool would run — the question as the
query, ``scope=current_hidden`` — widens every hit by the ``session_load`` window
(:func:`hidden_turns`), renders the turns as one framed data block (:func:`render_turns`) and
puts it in the system message after the summary (:class:`SystemBlock`). :func:`search_hit_count`
counts what the tool path's ``session_search`` calls returned, its counterpart for the case row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from agentlab.core.mechanism import PRELOAD_RECALL, ContextMechanism, StagedProcessor
from agentlab.events import OBJ_TOOL_RESPONSE, Event
from agentlab.recall.hits import compact_text
from agentlab.recall.policy import RecallPolicy
from agentlab.recall.search import search_session
from agentlab.session.base import Session, SessionService

__all__ = ["SystemBlock", "hidden_turns", "render_turns", "search_hit_count"]

#: The data tag around recalled turns; recalled text cannot close it (see :func:`render_turns`).
TURNS_TAG = "recalled_turns"
_TAG = re.compile(rf"<\s*/?\s*{TURNS_TAG}\s*>", re.IGNORECASE)


async def hidden_turns(service: SessionService, session: Session, question: str, policy: RecallPolicy,
                       before: int, after: int) -> tuple[list[int], list[int]]:
    """(anchor positions, positions to inject) in ``session.events``.

    The ``session_search`` of the question over ``scope=current_hidden`` with ``policy.search_top_k``
    hits; each hit widened by ``before`` / ``after`` events, because one speaker turn rarely holds a
    whole answer.
    """
    result = await search_session(service, session, policy, question, scope="current_hidden",
                                  top_k=policy.search_top_k)
    positions = {e.id: i for i, e in enumerate(session.events)}
    anchors = [positions[r["event_id"]] for r in result["results"] if r.get("event_id") in positions]
    last = len(session.events) - 1
    turns = sorted({t for a in anchors for t in range(max(0, a - before), min(last, a + after) + 1)})
    return anchors, turns


def render_turns(session: Session, turns: Sequence[int], header: str, framing: str, turn_chars: int) -> str:
    """The block of ``turns`` in session order (``...`` between non-adjacent ones), each cut to ``turn_chars``.

    ``header`` and ``framing`` (what the turns are, that they are data) come first; the turns sit
    inside ``<recalled_turns>`` tags. Empty when there are no turns.
    """
    if not turns:
        return ""
    lines = [header, framing, f"<{TURNS_TAG}>"]
    previous = None
    for turn in turns:
        if previous is not None and turn != previous + 1:
            lines.append("...")
        # Recalled text must not be able to close the data tag and speak outside it.
        lines.append(compact_text(_TAG.sub("[tag removed]", session.events[turn].text), turn_chars))
        previous = turn
    lines.append(f"</{TURNS_TAG}>")
    return "\n".join(lines)


class _AppendSystem:
    name = "preloaded_turns"

    def __init__(self, block: str) -> None:
        self.block = block

    async def process(self, inv: Any, draft: Any) -> None:
        if self.block:
            draft.system_parts.append(self.block)


class SystemBlock(ContextMechanism):
    """A fixed block appended to the system message at the preload-recall stage (after the summary, before the input)."""

    def __init__(self, block: str) -> None:
        self.block = block

    def describe(self) -> str:
        """The mechanism's name in projection reports."""
        return "preloaded_turns"

    def request_processors(self) -> Sequence[StagedProcessor]:
        """The one processor appending the block."""
        return [StagedProcessor(PRELOAD_RECALL, _AppendSystem(self.block))]


def search_hit_count(events: Sequence[Event]) -> int:
    """Hits the model got back from its ``session_search`` calls among ``events`` (an error result: none)."""
    hits = 0
    for event in events:
        if event.object != OBJ_TOOL_RESPONSE or event.message is None or event.message.name != "session_search":
            continue
        try:
            hits += int(json.loads(event.message.content).get("count", 0))
        except (ValueError, TypeError, AttributeError):
            continue
    return hits
