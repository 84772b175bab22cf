"""Older import path of the chain's own processors and the projection types (now in ``agentlab.core``)."""

from __future__ import annotations

from agentlab.core.projection import (
    EventsRole,
    RenderedHistory,
    RequestDraft,
    RequestProcessor,
    events_to_messages,
    in_filter,
    is_history_event,
    render_history_message,
    round_start,
    run_processors,
    summary_step,
)
from agentlab.core.steps import (
    CurrentInputProcessor,
    HistoryProcessor,
    InstructionProcessor,
    projection_start,
)

__all__ = [
    "CurrentInputProcessor",
    "EventsRole",
    "HistoryProcessor",
    "InstructionProcessor",
    "RenderedHistory",
    "RequestDraft",
    "RequestProcessor",
    "events_to_messages",
    "in_filter",
    "is_history_event",
    "projection_start",
    "render_history_message",
    "round_start",
    "run_processors",
    "summary_step",
]
