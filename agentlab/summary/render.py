"""Events rendered as the summariser's input: conversation lines, trimming, the delta."""

from __future__ import annotations

import re

from agentlab.compaction import cut_middle
from agentlab.core.mechanism import in_filter, is_history_event
from agentlab.events import Event, Message
from agentlab.model import tokens
from agentlab.session.base import Session, SummaryBoundary
from agentlab.summary.prompts import PREVIOUS_SUMMARY_LABEL


def render_event_line(event: Event) -> str:
    """One event as a conversation line: ``author: text`` with tool calls/results in brackets."""
    m = event.message
    if m is None:
        return ""
    if m.role == "tool":
        body = f"[{m.name or 'tool'} returned: {m.content}]"
    elif m.tool_calls:
        calls = []
        for c in m.tool_calls:
            args = (c.arguments or "").strip()
            calls.append(f"[Called tool: {c.name} with args: {args}]" if args and args != "{}"
                         else f"[Called tool: {c.name}]")
        body = " ".join(([m.content] if m.content else []) + calls)
    else:
        body = m.content
    return f"{event.author or m.role}: {body}"


def previous_summary_event(text: str) -> Event:
    """The synthetic head event of a rolling update."""
    return Event(author="system", choices=[Message.system(f"{PREVIOUS_SUMMARY_LABEL}\n{text}")],
                 id="summary:previous")


def truncate_middle(text: str, max_tokens: int, marker: str = "[... {n} characters omitted ...]") -> str:
    """Keep a head and a tail of ``text`` around a marker so it fits ``max_tokens`` (binary search).

    When not even the bare marker fits, the bare marker is what is left.
    """
    if tokens.count_text(text) <= max_tokens:
        return text
    cut = cut_middle(text, max_tokens, marker)
    return cut if cut is not None else "\n" + marker.format(n=len(text)) + "\n"


def strip_structured_summary(text: str) -> str:
    """Drop an <analysis> block and unwrap a <summary> block (the nine-section post-step)."""
    text = re.sub(r"<analysis>.*?</analysis>", "", text, flags=re.DOTALL | re.IGNORECASE)
    found = re.search(r"<summary>(.*?)(?:</summary>|$)", text, flags=re.DOTALL | re.IGNORECASE)
    if found:
        text = found.group(1)
    return text.strip()



def delta_after_boundary(session: Session, boundary: SummaryBoundary | None, filter_key: str) -> list[Event]:
    """Message events after the boundary visible under ``filter_key`` (the summariser's input).

    A branch's summary (its filter key) covers what its model view shows: its own events and its
    ancestors' — up to its join, once it has joined (what the parent writes after the join, e.g.
    the joined reports of every sibling, is not the branch's). **The cascade rule** for the full-session key ``""``: the full-session summary
    advances only over events whose branches have joined — its delta stops before the first event
    of a branch still open (a fork marker ``branch:<key> = "open"`` in the session state, written by
    :class:`~agentlab.runtime.composition.ParallelAgent`, and no ``"joined"`` yet), so it never
    freezes a half-finished branch into the handoff note. Keys no composition forked (a caller's own
    ``filter_key``) have no marker and count as joined.
    """
    events = session.events_after_boundary(boundary)
    if filter_key and session.state.get(f"branch:{filter_key}") == "joined":
        events = _before_join(events, filter_key)
    delta = [e for e in events if is_history_event(e) and in_filter(e.filter_key, filter_key)]
    if not filter_key:
        open_keys = open_branches(session)
        if open_keys:
            for i, event in enumerate(delta):
                if event.filter_key and _under_any(event.filter_key, open_keys):
                    return delta[:i]
    return delta


def open_branches(session: Session) -> set[str]:
    """The branch keys forked and not yet joined (their ``branch:<key>`` state is ``"open"``)."""
    return {k[7:] for k, v in session.state.items() if v == "open" and k.startswith("branch:")}


def _before_join(events: list[Event], key: str) -> list[Event]:
    """``events`` up to the join marker of branch ``key`` (all of them when the marker is earlier)."""
    marker = f"branch:{key}"
    for i, event in enumerate(events):
        if event.state_delta.get(marker) == "joined":
            return events[:i]
    return events


def _under_any(key: str, branches: set[str]) -> bool:
    return any(key == b or key.startswith(b + "/") for b in branches)


#: The per-event token count (one home: :func:`agentlab.model.tokens.event_tokens`).
count_event_tokens = tokens.event_tokens

