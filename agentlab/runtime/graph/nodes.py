"""What a graph node can be: a function, one model step, one tool call, a sub-agent, an interrupt.

A node gets a :class:`NodeContext` (the state as the step started, the node's invocation on its
own branch) and yields the events it writes (on that branch), then one :class:`Delta` — its
writes to the state. Plain callables passed to ``StateGraph.add_node`` become :class:`FunctionNode`.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from agentlab.core.invocation import Agent, Invocation
from agentlab.core.tools import Tool, ToolContext, render_tool_result
from agentlab.events import OBJ_TOOL_RESPONSE, Event, Message, ToolCall, new_id, user_event
from agentlab.model.base import Model
from agentlab.runtime.agent import LLMAgent
from agentlab.runtime.composition import fork_invocation

__all__ = ["AgentNode", "Delta", "FunctionNode", "Interrupt", "ModelNode", "Node", "NodeContext", "ToolNode"]


@dataclass
class Delta:
    """A node's writes to the state (the last thing a node yields)."""

    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class NodeContext:
    """What a running node sees: its name, the state as its step began, its invocation (its branch)."""

    name: str
    state: dict[str, Any]
    inv: Invocation
    #: The outside input that resumed an interrupt at this node (``None`` otherwise).
    resume_input: str | None = None


class Node:
    """The node interface: ``execute`` yields events, then one :class:`Delta`."""

    def execute(self, ctx: NodeContext) -> AsyncIterator[Event | Delta]:
        """Run the node once."""
        raise NotImplementedError


class FunctionNode(Node):
    """A Python function (sync or async) of the state, returning its writes (a dict, or ``None``)."""

    def __init__(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        self.fn = fn

    async def execute(self, ctx: NodeContext) -> AsyncIterator[Event | Delta]:
        """Call the function; its dict is the delta."""
        out = self.fn(dict(ctx.state))
        if inspect.isawaitable(out):
            out = await out
        if out is not None and not isinstance(out, dict):
            raise TypeError(f"node {ctx.name!r} returned {type(out).__name__}; a function node returns a dict "
                            "of state writes or None")
        yield Delta(dict(out or {}))


class ToolNode(Node):
    """One tool call with ``args(state)``: recorded as a call and its result on the node's branch;
    the rendered result is written to ``output_key``.
    """

    def __init__(self, tool: Tool, args: Callable[[dict[str, Any]], dict[str, Any]], output_key: str) -> None:
        self.tool = tool
        self.args = args
        self.output_key = output_key

    async def execute(self, ctx: NodeContext) -> AsyncIterator[Event | Delta]:
        """Record the call, run the tool, record its result."""
        args = self.args(dict(ctx.state))
        call = ToolCall(id=new_id("call-"), name=self.tool.name, arguments=json.dumps(args, sort_keys=True))
        yield Event(author=ctx.name, choices=[Message.assistant("", [call])], invocation_id=ctx.inv.id,
                    request_id=ctx.inv.id, filter_key=ctx.inv.filter_key)
        started = time.perf_counter()
        result = render_tool_result(await self.tool.call(args, ToolContext(ctx.inv, call.id, call.name)))
        yield Event(author=ctx.name, choices=[Message.tool(call.id, call.name, result)], object=OBJ_TOOL_RESPONSE,
                    invocation_id=ctx.inv.id, request_id=ctx.inv.id, filter_key=ctx.inv.filter_key,
                    metadata={"latency_ms": round((time.perf_counter() - started) * 1000, 3)})
        yield Delta({self.output_key: result})


class AgentNode(Node):
    """A sub-agent on the node's branch: ``task(state)`` is its input, its final answer goes to
    ``output_key``. Only that answer reaches the state; its work stays on its branch.
    """

    #: Whether an error event from the agent fails the node (a model step) or is only recorded.
    fail_on_error = False

    def __init__(self, agent: Agent, task: Callable[[dict[str, Any]], str], output_key: str) -> None:
        self.agent = agent
        self.task = task
        self.output_key = output_key

    async def execute(self, ctx: NodeContext) -> AsyncIterator[Event | Delta]:
        """Write the task on the node's branch, run the agent, keep its final answer."""
        text = self.task(dict(ctx.state))
        first = user_event(text, author=ctx.name, invocation_id=ctx.inv.id, request_id=ctx.inv.id,
                           filter_key=ctx.inv.filter_key)
        yield first
        inv = fork_invocation(ctx.inv, self.agent, message=Message.user(text), user_input=first)
        answer = ""
        async for event in self.agent.run(inv):
            if event.error and self.fail_on_error:
                raise RuntimeError(f"node {ctx.name!r}: the model call failed: {event.error}")
            if event.is_final_response() and event.filter_key == ctx.inv.filter_key:
                answer = event.text
            yield event
        yield Delta({self.output_key: answer})


class ModelNode(AgentNode):
    """One model step: ``prompt(state)`` as the input on the node's branch, one call, no tools.

    The request is projected by the same chain as any :class:`~agentlab.runtime.LLMAgent` (its
    instruction, the branch's history and summary), so history and summary reach the graph through
    the same processor. The answer text is written to ``output_key``; a failed call fails the node.
    """

    fail_on_error = True

    def __init__(self, model: Model, prompt: Callable[[dict[str, Any]], str], output_key: str, *,
                 instruction: str = "", agent: LLMAgent | None = None) -> None:
        super().__init__(agent or LLMAgent("model_node", model, instruction=instruction, max_tool_iterations=0),
                         prompt, output_key)


class Interrupt(Node):
    """Wait for outside input (an approval): the run stops here, checkpointed; the next message
    on the session resumes it, and its text is written to ``key``.
    """

    def __init__(self, prompt: str | Callable[[dict[str, Any]], str], key: str) -> None:
        self.prompt = prompt
        self.key = key

    def question(self, state: dict[str, Any]) -> str:
        """The text shown when the run stops here."""
        return self.prompt(dict(state)) if callable(self.prompt) else self.prompt

    async def execute(self, ctx: NodeContext) -> AsyncIterator[Event | Delta]:
        """Only reached on resume (the graph agent stops before it otherwise): write the input."""
        yield Delta({self.key: ctx.resume_input or ""})
