"""Building one request: the chain from the mechanisms, the draft, the last look before the model.

``LLMAgent.build_request`` and :func:`agentlab.core.project` both build through these functions, so a
request projected outside a run is the one a run would send.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from agentlab.core.mechanism import (
    CURRENT_INPUT,
    HISTORY,
    INSTRUCTION,
    ContextMechanism,
    PendingRequest,
    RequestDraft,
    RequestProcessor,
    StagedProcessor,
    order_by_stage,
    run_processors,
)
from agentlab.core.steps import CurrentInputProcessor, HistoryProcessor, InstructionProcessor
from agentlab.model.base import GenerationConfig, ModelRequest

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.core.tools import Tool

#: Appended to the system text once the tool-call budget of a request is spent.
TOOL_BUDGET_NOTE = (
    "The tool-call budget for this request is used up. Answer now from what you already have; "
    "do not call tools."
)

#: Runs the chain into a draft (the full chain, or the incremental projection that mirrors it).
EventsStage = Callable[["Invocation", Sequence[RequestProcessor], RequestDraft], Awaitable[None]]
#: Called after each processor with the processor and the draft as it was before it ran.
StepObserver = Callable[[RequestProcessor, RequestDraft, RequestDraft], None]


def request_chain(mechanisms: Sequence[ContextMechanism],
                  owners: dict[int, ContextMechanism] | None = None) -> list[RequestProcessor]:
    """The request chain: instruction, history and current input, plus each mechanism's steps, by stage.

    ``owners``, when given, is filled with ``id(processor) -> mechanism`` for the mechanisms' steps.
    """
    staged = [
        StagedProcessor(INSTRUCTION, InstructionProcessor()),
        StagedProcessor(HISTORY, HistoryProcessor()),
        StagedProcessor(CURRENT_INPUT, CurrentInputProcessor()),
    ]
    for mechanism in mechanisms:
        contributed = mechanism.request_processors()
        staged.extend(contributed)
        if owners is not None:
            owners.update((id(c.processor), mechanism) for c in contributed)
    return order_by_stage(staged)


def request_tools(inv: Invocation, tools: Sequence[Tool], mechanisms: Sequence[ContextMechanism]) -> list[Tool]:
    """The agent's tools, then each mechanism's, for ``inv``'s requests."""
    out = list(tools)
    for mechanism in mechanisms:
        out.extend(mechanism.request_tools(inv))
    return out


async def build_draft(inv: Invocation, processors: Sequence[RequestProcessor], *, tools: Sequence[Tool],
                      config: GenerationConfig, allow_tools: bool = True, events_stage: EventsStage | None = None,
                      observe: StepObserver | None = None) -> RequestDraft:
    """Run the chain over a new draft (``tools`` are dropped when ``allow_tools`` is off).

    ``events_stage`` replaces the plain chain (the incremental projection); ``observe`` sees every
    step (the full chain only), which is how :func:`agentlab.core.project` reports what each
    mechanism did.
    """
    draft = RequestDraft(tools=list(tools) if allow_tools else [], config=config)
    if observe is not None:
        for processor in processors:
            before = draft.copy()
            await processor.process(inv, draft)
            observe(processor, before, draft)
    elif events_stage is not None:
        await events_stage(inv, processors, draft)
    else:
        await run_processors(inv, list(processors), draft)
    if not allow_tools:
        draft.trailing_system.append(TOOL_BUDGET_NOTE)
    return draft


async def finish_request(inv: Invocation, mechanisms: Sequence[ContextMechanism], draft: RequestDraft, *,
                         allow_tools: bool, rebuild: Callable[[], Awaitable[RequestDraft]],
                         observe: Callable[[ContextMechanism, ModelRequest, ModelRequest], None] | None = None,
                         ) -> tuple[ModelRequest, RequestDraft]:
    """The finished request: ``draft`` rendered, then each mechanism's :meth:`~ContextMechanism.before_request`.

    A mechanism may replace the request (the pressure path after a synchronous summary); the next
    mechanism sees the replacement. ``observe`` is told of every replacement.
    """
    request = draft.to_model_request()
    for mechanism in mechanisms:
        if type(mechanism).before_request is _DEFAULT_BEFORE:
            continue  # the hook is not overridden: nothing to ask (saves an await per mechanism and request)
        revised = await mechanism.before_request(inv, PendingRequest(request, draft, allow_tools, rebuild))
        if revised is not None:
            if observe is not None:
                observe(mechanism, request, revised[0])
            request, draft = revised
    return request, draft


_DEFAULT_BEFORE = ContextMechanism.before_request

__all__ = ["TOOL_BUDGET_NOTE", "EventsStage", "StepObserver", "build_draft", "finish_request", "request_chain",
           "request_tools"]
