"""Agents accept an Invocation and stream Events. ``LLMAgent`` is the model <-> tool loop."""

from __future__ import annotations

import operator
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from agentlab.core.build import TOOL_BUDGET_NOTE, build_draft, finish_request, request_chain, request_tools
from agentlab.core.invocation import Agent, Invocation
from agentlab.core.mechanism import ContextMechanism, RequestDraft, RequestProcessor, as_mechanism
from agentlab.core.tools import Tool, ToolContext, render_tool_result
from agentlab.events import (
    OBJ_CHUNK,
    OBJ_COMPACTION,
    OBJ_ERROR,
    OBJ_TOOL_RESPONSE,
    Event,
    Message,
    ToolCall,
)
from agentlab.model.base import GenerationConfig, Model, ModelError, ModelRequest, ModelResponse
from agentlab.runtime.projection_cache import PlanMemo, ProjectionCache

if TYPE_CHECKING:
    from agentlab.compaction import CompactionPolicy
    from agentlab.memory import MemoryPolicy
    from agentlab.recall import RecallPolicy
    from agentlab.summary import SummaryPolicy

__all__ = ["TOOL_BUDGET_NOTE", "Agent", "LLMAgent"]


class LLMAgent:
    """Alternates model calls and tool calls until the model answers without calling a tool.

    Context governance is a list of :class:`~agentlab.core.ContextMechanism` (``mechanisms=``).
    ``summary=``, ``compaction=``, ``recall=`` and ``memory=`` are conveniences for the built-in
    policies: each becomes a mechanism in front of ``mechanisms`` (in that order), bound to its
    model through :meth:`~agentlab.core.ContextMechanism.for_model` (``summary_model`` for the
    summary, else the agent's model). The agent never looks at which mechanism is which: it
    orders their processors by stage, offers their tools after its own, and gives each the
    finished request (:meth:`~agentlab.core.ContextMechanism.before_request`); the Runner calls
    their lifecycle hooks.
    """

    def __init__(
        self,
        name: str,
        model: Model,
        *,
        instruction: str = "",
        tools: list[Tool] | None = None,
        summary: SummaryPolicy | None = None,
        summary_model: Model | None = None,
        compaction: CompactionPolicy | None = None,
        recall: RecallPolicy | None = None,
        memory: MemoryPolicy | None = None,
        generation: GenerationConfig | None = None,
        max_tool_iterations: int = 10,
        stream: bool = False,
        processors: list[RequestProcessor] | None = None,
        incremental_projection: bool = True,
        mechanisms: Sequence[ContextMechanism] = (),
    ) -> None:
        self.name = name
        self.model = model
        self.instruction = instruction
        self.tools = list(tools or [])
        self.summary = summary
        self.summary_model = summary_model or model
        self.compaction = compaction
        self.recall = recall
        self.memory = memory
        #: Mechanisms beyond the four convenience keywords; they contribute after them, in this order.
        self.mechanisms = list(mechanisms)
        self._bound: tuple[tuple[Any, ...], list[ContextMechanism]] | None = None
        self.generation = generation or GenerationConfig()
        self.max_tool_iterations = max_tool_iterations
        self.stream = stream
        self.processors = processors if processors is not None else self.default_processors()
        #: Serve the history part of each request from the previous call's projection (same result
        #: as the full chain; see ``agentlab.runtime.projection_cache``). ``False`` = always rebuild.
        self.incremental_projection = incremental_projection
        self.projection_cache = ProjectionCache()
        self._plan_memo = PlanMemo()

    # ---------------------------------------------------------------------------- projection

    def context_mechanisms(self) -> list[ContextMechanism]:
        """The mechanisms switched on, in contribution order, each bound to its model.

        That is the convenience keywords (summary, compaction, recall, memory), then ``mechanisms``:
        tools are offered in this order; processors are ordered by stage (ties in this order).
        Rebuilt only when one of those attributes was replaced.
        """
        key = (self.summary, self.summary_model, self.compaction, self.recall, self.memory, self.model,
               *self.mechanisms)
        bound = self._bound
        if bound is None or len(bound[0]) != len(key) or not all(map(operator.is_, bound[0], key)):
            specs = ((self.summary, self.summary_model), (self.compaction, self.model), (self.recall, self.model),
                     (self.memory, self.model), *((m, self.model) for m in self.mechanisms))
            bound = (key, [as_mechanism(spec, model) for spec, model in specs if spec is not None])
            self._bound = bound
        return bound[1]

    def default_processors(self) -> list[RequestProcessor]:
        """The request chain: the agent's own steps and what each mechanism contributes, by stage."""
        return request_chain(self.context_mechanisms())

    def resolve_tools(self, inv: Invocation) -> list[Tool]:
        """The agent's tools, then each mechanism's, for ``inv``'s requests."""
        return request_tools(inv, self.tools, self.context_mechanisms())

    def generation_for(self, inv: Invocation) -> GenerationConfig:
        """The run's generation settings, else the agent's."""
        return inv.options.generation or self.generation

    async def build_draft(self, inv: Invocation, *, allow_tools: bool = True) -> RequestDraft:
        """Run the request chain (through the projection cache when it can mirror the chain)."""
        plan = self._plan_memo.plan(self.processors) if self.incremental_projection else None
        stage = None
        if plan is not None:
            cache = self.projection_cache

            async def stage(inv: Invocation, processors: Sequence[RequestProcessor], draft: RequestDraft) -> None:
                await cache.build(inv, processors, plan, draft)

        return await build_draft(inv, self.processors, tools=self.resolve_tools(inv) if allow_tools else [],
                                 config=self.generation_for(inv), allow_tools=allow_tools, events_stage=stage)

    async def build_request(self, inv: Invocation, *, allow_tools: bool = True) -> tuple[ModelRequest, RequestDraft]:
        """Project the session into the request for the next model call (see :func:`agentlab.core.project`)."""
        draft = await self.build_draft(inv, allow_tools=allow_tools)

        async def rebuild() -> RequestDraft:
            return await self.build_draft(inv, allow_tools=allow_tools)

        return await finish_request(inv, self.context_mechanisms(), draft, allow_tools=allow_tools, rebuild=rebuild)

    # ---------------------------------------------------------------------------- the loop

    async def run(self, inv: Invocation) -> AsyncIterator[Event]:
        """The model <-> tool loop: project, call the model, run the tools it asked for, repeat."""
        limit = inv.options.max_tool_iterations or self.max_tool_iterations
        stream = self.stream if inv.options.stream is None else inv.options.stream
        rounds = 0
        while not inv.cancelled.is_set():
            request, draft = await self.build_request(inv, allow_tools=rounds < limit)
            for stat in draft.stats:
                yield self._event(inv, [], object=OBJ_COMPACTION, metadata={"compaction": stat},
                                  state_delta={"compaction:last": stat})
            response: ModelResponse | None = None
            try:
                if stream:
                    async for chunk in self.model.stream(request):
                        if chunk.response is not None:
                            response = chunk.response
                        elif chunk.delta:
                            yield self._event(inv, [Message.assistant(chunk.delta)], object=OBJ_CHUNK,
                                              partial=True, done=False)
                else:
                    response = await self.model.generate(request)
            except ModelError as exc:
                yield self._error(inv, str(exc), exc.code)
                return
            if response is None:
                yield self._error(inv, "the model stream ended without a final response", "malformed_response")
                return
            yield self._event(
                inv,
                [response.message],
                usage=response.usage,
                metadata={
                    "latency_ms": round(response.latency_ms, 3),
                    "cache_hit": response.cache_hit,
                    "finish_reason": response.finish_reason,
                    "prompt_messages": len(request.messages),
                },
            )
            calls = response.message.tool_calls
            if not calls:
                return
            rounds += 1
            tools = {t.name: t for t in draft.tools}
            for call in calls:
                if inv.cancelled.is_set():
                    return
                streamed = getattr(tools.get(call.name), "stream_call", None)
                if streamed is None:
                    yield await self._run_tool(inv, tools, call)
                    continue
                # A tool that runs a sub-agent (``AgentTool``) streams the sub-agent's events
                # (persisted on its branch by the Runner), then its result text.
                async for item in streamed(inv, call):
                    if isinstance(item, Event):
                        yield item
                    else:
                        yield await self._run_tool(inv, tools, call, result=str(item))

    async def _run_tool(self, inv: Invocation, tools: dict[str, Tool], call: ToolCall,
                        result: str | None = None) -> Event:
        started = time.perf_counter()
        error: str | None = None
        tool = tools.get(call.name)
        if result is not None:
            content = result
        elif tool is None:
            content = f"error: no tool named {call.name!r} is available"
            error = "unknown_tool"
        else:
            try:
                args = call.parsed_arguments()
                content = render_tool_result(await tool.call(args, ToolContext(inv, call.id, call.name)))
            except Exception as exc:  # a failing tool is a result the model can read, not a crash
                content = f"error: {type(exc).__name__}: {exc}"
                error = type(exc).__name__
        return self._event(
            inv,
            [Message.tool(call.id, call.name, content)],
            object=OBJ_TOOL_RESPONSE,
            metadata={"tool_error": error, "latency_ms": round((time.perf_counter() - started) * 1000, 3)},
        )

    def _event(self, inv: Invocation, choices: list[Message], **kwargs: Any) -> Event:
        return Event(
            author=self.name,
            choices=choices,
            invocation_id=inv.id,
            request_id=inv.request_id,
            filter_key=inv.filter_key,
            **kwargs,
        )

    def _error(self, inv: Invocation, message: str, code: str) -> Event:
        return self._event(inv, [], object=OBJ_ERROR, error=message, error_code=code)
