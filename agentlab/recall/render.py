"""Rendering search hits into the ``session_search`` result the model reads.

The top hits carry a window of messages around the matched event (a snippet and the loaded
messages, so the model often needs no ``session_load``); the rest carry a short snippet. Tool
results say how large they are and whether the snippet shows them whole, so the model knows when
loading the event is worth a call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentlab.events import Event
from agentlab.recall import RecallPolicy
from agentlab.recall.hits import MESSAGE_ROLES, EventHit, compact_text, iso_time, message_text

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.recall.search import UserEventIndex

__all__ = ["render_hit", "window_around", "window_snippet"]


def _hit_scope(inv: Invocation, hit: EventHit, requested: str) -> str:
    if hit.ref.session_id == inv.session.id:
        return "current_session" if requested == "current_session" else "current_hidden"
    return "other_sessions"


def _session_events(inv: Invocation, index: UserEventIndex, session_id: str) -> list[Event]:
    if session_id == inv.session.id:
        return inv.session.events
    snapshot = index.session(session_id)
    return snapshot.events if snapshot is not None else []


def window_around(events: Sequence[Event], position: int, before: int, after: int) -> list[tuple[int, Event]]:
    """The anchor plus up to ``before``/``after`` message events (user/assistant/tool) around it."""
    if position < 0 or position >= len(events):
        return []

    def is_message(e: Event) -> bool:
        return e.role in MESSAGE_ROLES and not e.partial

    earlier: list[tuple[int, Event]] = []
    i = position - 1
    while i >= 0 and len(earlier) < before:
        if is_message(events[i]):
            earlier.append((i, events[i]))
        i -= 1
    later: list[tuple[int, Event]] = []
    i = position + 1
    while i < len(events) and len(later) < after:
        if is_message(events[i]):
            later.append((i, events[i]))
        i += 1
    return [*reversed(earlier), (position, events[position]), *later]


def window_snippet(window: Sequence[tuple[int, Event]], anchor_id: str, policy: RecallPolicy) -> str:
    """``role: text`` lines (each <= 96 runes), ``[match]`` on the anchor, <= 280 runes in all."""
    lines: list[str] = []
    for _, event in window:
        extracted = message_text(event)
        if extracted is None:
            continue
        text, role = extracted
        text = compact_text(text, policy.snippet_line_runes)
        if not text:
            continue
        prefix = f"{role}: "
        if event.id == anchor_id:
            prefix = "[match] " + prefix
        lines.append(prefix + text)
    out = ""
    for line in lines:
        if out:
            if len(out) + 1 > policy.snippet_runes:
                break
            out += "\n"
        remaining = policy.snippet_runes - len(out)
        if remaining <= 0:
            break
        if len(line) > remaining:
            out += compact_text(line, remaining)
            break
        out += line
    return out.strip()


def render_hit(inv: Invocation, policy: RecallPolicy, index: UserEventIndex, hit: EventHit,
                rank: int, requested_scope: str) -> dict[str, Any]:
    """One result entry of ``session_search``: where the hit is, its score, and what it says.

    The first ``policy.expanded_hits`` ranks carry a message window around the hit (``context``).
    """
    from agentlab.recall.tools import loaded_message  # shared message rendering with session_load

    ref = hit.ref
    payload: dict[str, Any] = {
        "scope": _hit_scope(inv, hit, requested_scope),
        "session_id": ref.session_id,
        "event_id": ref.event_id,
        "created": iso_time(ref.timestamp),
        "role": ref.role,
        "score": round(float(hit.score), 4),
    }
    snippet = ""
    events = _session_events(inv, index, ref.session_id)
    position = ref.position if ref.position < len(events) and events[ref.position].id == ref.event_id else -1
    if rank < policy.expanded_hits and position >= 0:
        window = window_around(events, position, policy.snippet_window, policy.snippet_window)
        snippet = window_snippet(window, ref.event_id, policy)
        payload["snippet"] = snippet
        context = [
            loaded_message(event, anchor=(event.id == ref.event_id), offset=0, limit=policy.context_content_limit)
            for _, event in window
            if not (event.message is not None and event.message.tool_calls)
        ]
        payload["context"] = [c for c in context if c is not None]
    if not snippet:
        snippet = compact_text(hit.text, policy.snippet_runes) or "<empty>"
        payload["snippet"] = snippet
    if ref.role == "tool":
        content = events[position].text if position >= 0 else hit.text
        anchor_entry = next((c for c in payload.get("context", []) if c.get("event_id") == ref.event_id), None)
        shown_fully = (anchor_entry is not None and not anchor_entry.get("content_truncated")) or (
            " ".join(content.split()) in snippet
        )
        payload["tool_call_id"] = ref.tool_call_id
        payload["tool_name"] = ref.tool_name
        payload["content_bytes"] = len(content.encode("utf-8"))
        payload["content_truncated"] = not shown_fully
    return payload
