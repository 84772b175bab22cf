"""Rolling session Summary: triggers, the summariser, the rolling update with its boundary,
per-scope locks, the background worker, and the injection of the summary into requests.

Three words stay distinct here. *History* is the ledger of events and is never rewritten. The
*Summary* is durable rolling state per filter key, anchored to the last event it covers by a
``SummaryBoundary``. The *context* is what one model call is shown: instruction + summary +
the events after the boundary + the current input.

A rolling update reads only the *delta* (events after the boundary), with the previous summary
in front of it as a synthetic system event, asks the summary model for new text, and writes text
and boundary together, only when the text is non-empty. When the delta does not fit the summary
model's input budget, only the longest prefix of whole events that fits is summarised and the
boundary advances that far; the next update continues from there. That is what lets a model with
a small window summarise a long session in several rolling steps.

Modules: :mod:`~agentlab.summary.prompts` (prompts, wrappers, versions),
:mod:`~agentlab.summary.policy` (:class:`SummaryPolicy`, trigger checks),
:mod:`~agentlab.summary.render` (events as summariser input),
:mod:`~agentlab.summary.summarizer` (:class:`Summarizer`, input budget, safe prefix, fork),
:mod:`~agentlab.summary.locks` (scope locks), :mod:`~agentlab.summary.worker` (rolling update,
background pool, runner hook), :mod:`~agentlab.summary.inject` (the summary in the request),
:mod:`~agentlab.summary.coverage` (the summary in force under a filter key, and its boundary — the
one rule the request and recall's hidden scope share), :mod:`~agentlab.summary.mechanism` (the
:class:`SummaryMechanism` an agent runs, which owns the worker). Every public name is
importable from ``agentlab.summary`` itself.

"The reference" in this package, and a "reference" default of :class:`SummaryPolicy`, is
trpc-agent-go's rolling summary (docs/sources.md#rolling-summary).
"""

from __future__ import annotations

from agentlab.summary.coverage import coverage_boundary, covering_keys, summary_in_force
from agentlab.summary.inject import SummaryInjectionProcessor, pick_summary, render_injection
from agentlab.summary.locks import SCOPE_LOCKS, LockKey
from agentlab.summary.mechanism import SummaryMechanism
from agentlab.summary.policy import (
    FALLBACK_CONTEXT_WINDOW,
    ChecksMode,
    ContextRatioCheck,
    EventsOverCheck,
    IdleOverCheck,
    InjectionMode,
    SummaryPolicy,
    TokensOverCheck,
    TriggerCheck,
    TriggerObservation,
    checks_pass,
)
from agentlab.summary.prompts import (
    BUILTIN_PROMPTS,
    COMPACT_PROMPT,
    COMPACT_PROMPT_VERSION,
    CURRENT_RUN_ARGS_NOTE,
    CURRENT_RUN_RESULT_PLACEHOLDER,
    CUSTOM_PROMPT_VERSION_PREFIX,
    FORK_PROMPT,
    FORK_PROMPT_VERSION,
    NINE_SECTION_PROMPT,
    NINE_SECTION_PROMPT_VERSION,
    PREVIOUS_SUMMARY_LABEL,
    PROMPT_PLACEHOLDERS,
    SUMMARY_SYSTEM_PROMPT,
    SYSTEM_INJECTION_TEMPLATE,
    USER_INJECTION_TEMPLATE,
    WORD_LIMIT_LINE,
    validate_prompt_template,
)
from agentlab.summary.render import (
    delta_after_boundary,
    previous_summary_event,
    render_event_line,
    strip_structured_summary,
    truncate_middle,
)
from agentlab.summary.summarizer import Summarizer, SummaryInputTooLarge, SummaryOutcome
from agentlab.summary.worker import (
    SummarisedAll,
    SummaryWorker,
    WorkerStats,
    summarise_all,
    summary_worker_for,
)

__all__ = [
    "BUILTIN_PROMPTS",
    "COMPACT_PROMPT",
    "COMPACT_PROMPT_VERSION",
    "CURRENT_RUN_ARGS_NOTE",
    "CURRENT_RUN_RESULT_PLACEHOLDER",
    "CUSTOM_PROMPT_VERSION_PREFIX",
    "FALLBACK_CONTEXT_WINDOW",
    "FORK_PROMPT",
    "FORK_PROMPT_VERSION",
    "NINE_SECTION_PROMPT",
    "NINE_SECTION_PROMPT_VERSION",
    "PREVIOUS_SUMMARY_LABEL",
    "PROMPT_PLACEHOLDERS",
    "SCOPE_LOCKS",
    "SUMMARY_SYSTEM_PROMPT",
    "SYSTEM_INJECTION_TEMPLATE",
    "USER_INJECTION_TEMPLATE",
    "WORD_LIMIT_LINE",
    "ChecksMode",
    "ContextRatioCheck",
    "EventsOverCheck",
    "IdleOverCheck",
    "InjectionMode",
    "LockKey",
    "SummaryInjectionProcessor",
    "SummaryInputTooLarge",
    "SummaryOutcome",
    "SummaryPolicy",
    "SummarisedAll",
    "SummaryWorker",
    "Summarizer",
    "TokensOverCheck",
    "TriggerCheck",
    "TriggerObservation",
    "WorkerStats",
    "checks_pass",
    "SummaryMechanism",
    "coverage_boundary",
    "covering_keys",
    "delta_after_boundary",
    "summarise_all",
    "pick_summary",
    "previous_summary_event",
    "render_event_line",
    "render_injection",
    "strip_structured_summary",
    "summary_in_force",
    "summary_worker_for",
    "truncate_middle",
    "validate_prompt_template",
]
