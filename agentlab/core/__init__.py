"""The core: the one seam between the runtime and every context mechanism (layer 3).

Below it: events, model, session. Above it: the mechanisms (summary, compaction, recall, memory)
and then the runtime (Runner, LLMAgent, the projection cache), which build on these names only:

* the work order — :class:`Invocation`, :class:`RunOptions`, the typed :class:`ServiceRegistry`
  (``inv.services.get(MemoryService)``) and :class:`SummaryService`;
* tools — :class:`Tool`, :class:`ToolContext`, :class:`FunctionTool`, :func:`function_declaration`,
  :func:`check_arguments`;
* the request — :class:`RequestDraft`, :class:`RequestProcessor`, :class:`Stage` and the built-in
  stages, :class:`EventsRole` with the :class:`SummaryStep` / :class:`CompactionStep` protocols;
* :class:`ContextMechanism` — processors at stages, tools, lifecycle hooks (``open``,
  ``before_request``, ``on_event_appended``, ``on_run_completed``, ``close``);
* :func:`project` — a request from a ledger and mechanisms, with no Agent or Runner, and a report
  of what each mechanism did (:class:`ProjectionResult`).
"""

from __future__ import annotations

from agentlab.core.build import TOOL_BUDGET_NOTE, build_draft, finish_request, request_chain, request_tools
from agentlab.core.invocation import Agent, Invocation, RunOptions
from agentlab.core.mechanism import (
    COMPACT,
    CURRENT_INPUT,
    HISTORY,
    INJECT_SUMMARY,
    INSTRUCTION,
    PRELOAD_MEMORY,
    PRELOAD_RECALL,
    STAGES,
    TOOL_GUIDE,
    CompactionStep,
    ContextMechanism,
    EventsRole,
    PendingRequest,
    PolicyMechanism,
    RenderedHistory,
    RequestDraft,
    RequestProcessor,
    Stage,
    StagedProcessor,
    SummaryStep,
    as_mechanism,
    branch_key,
    events_to_messages,
    in_filter,
    is_history_event,
    order_by_stage,
    register_mechanism,
    round_start,
    run_processors,
)
from agentlab.core.project import MechanismReport, ProjectionResult, ledger_events, project
from agentlab.core.rules import completed_units, event_tokens, ledger_extends, protected_units, unit_of
from agentlab.core.services import ServiceRegistry, SummaryService
from agentlab.core.tools import FunctionTool, Tool, ToolContext, check_arguments, function_declaration, tool

__all__ = [
    "Agent", "COMPACT", "CURRENT_INPUT", "CompactionStep", "ContextMechanism", "EventsRole", "FunctionTool",
    "HISTORY", "INJECT_SUMMARY", "INSTRUCTION", "Invocation", "MechanismReport", "PRELOAD_MEMORY",
    "PRELOAD_RECALL", "PendingRequest", "PolicyMechanism", "ProjectionResult", "RenderedHistory",
    "RequestDraft", "RequestProcessor", "RunOptions", "STAGES", "ServiceRegistry", "Stage", "StagedProcessor",
    "SummaryService", "SummaryStep", "TOOL_BUDGET_NOTE", "TOOL_GUIDE", "Tool", "ToolContext", "as_mechanism",
    "branch_key", "build_draft", "check_arguments", "completed_units", "event_tokens", "events_to_messages", "finish_request",
    "function_declaration", "in_filter", "is_history_event", "ledger_events", "ledger_extends",
    "order_by_stage", "project", "protected_units", "register_mechanism", "request_chain", "request_tools", "round_start",
    "run_processors", "tool", "unit_of",
]
