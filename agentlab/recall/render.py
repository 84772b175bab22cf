"""Rendering search hits into the ``session_search`` result the model reads.

The top hits carry a window of messages around the matched event (a snippet and the loaded
messages, so the model often needs no ``session_load``); the rest carry a short snippet. Tool
results say how large they are and whether the snippet shows them whole, so the model knows when
loading the event is worth a call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agentlab.events import Event
from agentlab.recall.hits import MESSAGE_ROLES, EventHit, compact_text, iso_time, message_text
from agentlab.recall.policy import RecallPolicy
from agentlab.session.base import Session

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

__all__ = ["SessionSnapshots", "loaded_message", "render_hit", "utf8_page", "window_around", "window_snippet"]


def _hit_scope(inv: Invocation, hit: EventHit, requested: str) -> str:
    if hit.ref.session_id == inv.session.id:
        return "current_session" if requested == "current_session" else "current_hidden"
    return "other_sessions"


class SessionSnapshots(Protocol):
    """What rendering needs of the event index (``agentlab.recall.search.UserEventIndex``): a session by id."""

    def session(self, session_id: str) -> Session | None:
        """The indexed snapshot of a session, or ``None``."""
        ...


def _session_events(inv: Invocation, index: SessionSnapshots, session_id: str) -> list[Event]:
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


def render_hit(inv: Invocation, policy: RecallPolicy, index: SessionSnapshots, hit: EventHit,
                rank: int, requested_scope: str) -> dict[str, Any]:
    """One result entry of ``session_search``: where the hit is, its score, and what it says.

    The first ``policy.expanded_hits`` ranks carry a message window around the hit (``context``).
    """
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


def utf8_page(data: bytes, offset: int, limit: int) -> tuple[int, int]:
    """``[start, end)`` byte range of a page that starts and ends on UTF-8 character boundaries.

    An offset inside a character moves back to that character's first byte (nothing is skipped);
    an end inside a character moves back too, so the next page starts exactly there. A page
    always holds at least one whole character when any content remains.
    """
    size = len(data)
    start = min(max(offset, 0), size)
    while 0 < start < size and (data[start] & 0xC0) == 0x80:
        start -= 1
    end = min(start + max(limit, 1), size)
    while start < end < size and (data[end] & 0xC0) == 0x80:
        end -= 1
    if end == start and start < size:
        end = start + 1
        while end < size and (data[end] & 0xC0) == 0x80:
            end += 1
    return start, end


def loaded_message(event: Event, *, anchor: bool, offset: int, limit: int) -> dict[str, Any] | None:
    """One history message as the tools return it, with byte paging of its content.

    Tool results carry ``tool_call_id``, ``tool_name`` and the paging fields and read
    ``toolname: content``; other messages carry paging fields only when cut. Assistant messages
    that carry tool calls (and empty or failed events) are left out (``None``).
    """
    m = event.message
    if m is None or m.tool_calls or event.partial or event.error is not None:
        return None
    role = "tool" if (m.role == "tool" or m.tool_call_id) else m.role
    if role not in MESSAGE_ROLES or not m.content:
        return None
    data = m.content.encode("utf-8")
    start, end = utf8_page(data, offset, limit)
    page = data[start:end].decode("utf-8")
    entry: dict[str, Any] = {"event_id": event.id, "role": role, "created": iso_time(event.timestamp)}
    if anchor:
        entry["anchor"] = True
    truncated = start > 0 or end < len(data)
    if role == "tool":
        entry["content"] = f"{m.name}: {page}" if m.name else page
        entry["tool_call_id"] = m.tool_call_id
        entry["tool_name"] = m.name
    else:
        entry["content"] = page
    if role == "tool" or truncated:
        entry["content_offset"] = start
        entry["content_bytes"] = len(data)
        entry["returned_bytes"] = end - start
        entry["content_truncated"] = truncated
        if end < len(data):
            entry["next_offset"] = end
    return entry
