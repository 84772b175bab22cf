"""The agent back end (tRPC-Agent-Go's OpenAI adapter): an agentlab ``LLMAgent`` behind a ``Runner``.

The contract, as tRPC-Agent-Go's server has it: the last message is the run's input (several trailing
``tool`` results are all input: the caller ran its tools and resumes); earlier messages seed a
*new* session and are ignored once the session has events (the ledger, not the client, holds the
history); ``X-Session-ID`` (or ``X-Agentlab-Conversation-Id``) names the session, else each
request is a new one; the body's ``user`` is the user (default ``"default"``). Tools in the
request are the caller's: declared to the model, executed by the caller: a call to one ends the
run and goes back to the client as ``tool_calls``. Each run is a ``serve_calls`` row (arm
``agent:<name>``; the user is the tenant, the session the conversation).
"""

from __future__ import annotations

import copy
import importlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import agentlab.serve.conversation_keys as conversation_keys
from agentlab.core.invocation import RunOptions
from agentlab.events import OBJ_CHUNK, OBJ_TOOL_RESPONSE, Event, Message, new_id
from agentlab.memory.worker import MemoryWorker
from agentlab.model import tokens
from agentlab.runtime.runner import Runner
from agentlab.serve.http import HTTPRequest, HTTPResponse, json_response
from agentlab.serve.store import ServeStore
from agentlab.serve.upstream_request import CallerTool
from agentlab.serve.wire import (
    SSE_DONE,
    RequestError,
    chunk,
    error_body,
    parse_chat_request,
    sse,
    to_message,
    tool_call_deltas,
)
from agentlab.session.base import SessionService


def load_agent(spec: str) -> Any:
    """The agent named by ``module:factory`` (a callable returning the agent, or the agent itself)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--agent must be module:factory, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--agent {spec}: cannot import {module_name!r} ({exc})") from None
    target = getattr(module, attribute, None)
    if target is None:
        raise ValueError(f"--agent {spec}: module {module_name!r} has no {attribute!r}")
    agent = target() if callable(target) and not hasattr(target, "run") else target
    if not hasattr(agent, "run") or not hasattr(agent, "name"):
        raise ValueError(f"--agent {spec} gave {type(agent).__name__}, not an agentlab agent")
    return agent


class AgentBackend:
    """Serves one agent; sessions live in ``sessions`` under the agent's name as the app."""

    kind = "agent"

    def __init__(self, spec: str, *, sessions: SessionService, store: ServeStore | None = None) -> None:
        self.agent = load_agent(spec)
        self.sessions = sessions
        self.store = store
        self.runner = Runner(self.agent.name, self.agent, sessions)

    async def close(self) -> None:
        """Let the runner's background work finish, then the call log."""
        await self.runner.close()
        await self.settle()

    async def settle(self) -> None:
        """Wait until the call rows are committed."""
        if self.store is not None:
            await self.store.flush()

    async def models(self, request: HTTPRequest, model_id: str | None = None) -> HTTPResponse:
        """The agent, listed as the one model."""
        entry = {"id": self.agent.name, "object": "model", "created": 0, "owned_by": "agentlab"}
        if model_id is not None:
            if model_id != self.agent.name:
                return json_response(404, error_body(f"no model {model_id!r}; this server serves {self.agent.name!r}",
                                                     "not_found"))
            return json_response(200, entry)
        return json_response(200, {"object": "list", "data": [entry]})

    def _runner_for(self, caller_tools: list[dict[str, Any]]) -> Runner:
        if not caller_tools:
            return self.runner
        agent = copy.copy(self.agent)
        agent.tools = [*self.agent.tools, *(CallerTool(t) for t in caller_tools)]
        return Runner(self.agent.name, agent, self.sessions, summary_worker=self.runner.summary_worker,
                      memory_worker=self.runner.services.get(MemoryWorker))

    async def chat(self, request: HTTPRequest) -> HTTPResponse:
        """``POST /v1/chat/completions``: one run of the agent."""
        try:
            body = parse_chat_request(request.body)
            named = conversation_keys.explicit_id(request.headers, body)
            if body.get("tool_choice") not in (None, "auto", "none"):
                raise RequestError("tool_choice must be 'auto' or 'none' here: the agent decides which tools "
                                   "to call", param="tool_choice")
        except RequestError as exc:
            return json_response(exc.status, exc.body(), {"x-should-retry": "false"})
        messages = body["messages"]
        split = len(messages) - 1
        while split > 0 and messages[split - 1]["role"] == "tool" and messages[-1]["role"] == "tool":
            split -= 1
        history, inputs = messages[:split], [to_message(m) for m in messages[split:]]
        session_id = named[0] if named else uuid.uuid4().hex
        user_id = body.get("user") or "default"
        session = await self.sessions.get_session(self.agent.name, user_id, session_id)
        if session is None:
            session = await self.sessions.create_session(self.agent.name, user_id, session_id)
        if not session.events:  # the client's history seeds a new session once
            for m in history:
                if m["role"] not in ("system", "developer"):
                    await self.sessions.append_event(session, Event(author="client", choices=[to_message(m)]))
        for m in inputs[:-1]:  # all but the last trailing tool result; the last one is the run's input
            await self.sessions.append_event(session, Event(author="client", choices=[m], object=OBJ_TOOL_RESPONSE))
        tools = body.get("tools") or [] if body.get("tool_choice") != "none" else []
        runner = self._runner_for(tools)
        caller_names = {t["function"]["name"] for t in tools}
        headers = {"x-session-id": session_id, conversation_keys.CONVERSATION_HEADER: session_id}
        run = _AgentRun(runner, user_id, session_id, inputs[-1], caller_names, bool(body.get("stream")),
                        str(body.get("model") or self.agent.name))
        run.row = {"call_id": new_id("call-"), "started_at": time.time(), "tenant": user_id,
                   "conversation_id": session_id, "session_id": session_id, "key_source": named[1] if named else "new",
                   "arm": f"agent:{self.agent.name}", "model": run.model, "purpose": "answer", "stream": run.stream,
                   "client_messages": len(messages),
                   "client_prompt_tokens": tokens.count_messages([to_message(m) for m in messages])}
        run.store = self.store
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return HTTPResponse(200, run.sse(include_usage), {**headers, "cache-control": "no-cache"},
                                "text/event-stream")
        result = await run.collect()
        if result.get("error"):
            run.record(502, "agent_error", result["error"], result)
            return json_response(502, error_body(result["error"], "agent_error"), headers)
        run.record(200, "ok", None, result)
        return json_response(200, run.completion(result), headers)


class _AgentRun:
    """One run, read as OpenAI output: text deltas, the caller's tool calls, usage."""

    def __init__(self, runner: Runner, user_id: str, session_id: str, message: Message, caller_tools: set[str],
                 stream: bool, model: str) -> None:
        self.runner = runner
        self.user_id = user_id
        self.session_id = session_id
        self.message = message
        self.caller_tools = caller_tools
        self.stream = stream
        self.model = model
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.started = time.perf_counter()
        #: The ``serve_calls`` row of this run (written by :meth:`record` when a store is set).
        self.row: dict[str, Any] = {}
        self.store: ServeStore | None = None

    def record(self, status: int, outcome: str, error: str | None, result: dict[str, Any]) -> None:
        """Queue this run's ``serve_calls`` row."""
        if self.store is None:
            return
        self.store.record_call({**self.row, "status": status, "outcome": outcome, "error": error,
                                "latency_ms": (time.perf_counter() - self.started) * 1000,
                                "usage_prompt_tokens": result.get("prompt", 0),
                                "usage_completion_tokens": result.get("completion", 0),
                                "finish_reason": "tool_calls" if result.get("calls") else "stop"})

    async def events(self) -> AsyncIterator[tuple[str, Any]]:
        """``("delta", text)``, ``("calls", [...])``, ``("final", text)``, ``("usage", Usage)``, ``("error", text)``."""
        options = RunOptions(stream=self.stream)
        async for event in self.runner.run(self.user_id, self.session_id, self.message, options=options):
            if event.object == OBJ_CHUNK and event.text:
                yield "delta", event.text
                continue
            if event.usage is not None:
                yield "usage", event.usage
            if event.error:
                yield "error", event.error
                continue
            if event.is_tool_call() and event.message is not None:
                calls = [c for c in event.message.tool_calls if c.name in self.caller_tools]
                if calls:
                    # The caller runs these: stop the run here; the results come with the next request.
                    self.runner.cancel(event.invocation_id)
                    yield "calls", [{"id": c.id, "type": "function",
                                     "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
            elif event.is_final_response() and event.author != "user":
                yield "final", event.text

    async def collect(self) -> dict[str, Any]:
        """The whole run: text, calls, usage, error."""
        out: dict[str, Any] = {"text": "", "calls": [], "prompt": 0, "completion": 0, "error": None}
        async for kind, value in self.events():
            if kind == "final":
                out["text"] = value
            elif kind == "calls":
                out["calls"] = value
            elif kind == "usage":
                out["prompt"] += value.prompt_tokens
                out["completion"] += value.completion_tokens
            elif kind == "error":
                out["error"] = value
        return out

    def completion(self, result: dict[str, Any]) -> dict[str, Any]:
        """A ``chat.completion`` body."""
        message: dict[str, Any] = {"role": "assistant", "content": result["text"] or None}
        if result["calls"]:
            message["tool_calls"] = result["calls"]
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if result["calls"] else "stop"}],
                "usage": {"prompt_tokens": result["prompt"], "completion_tokens": result["completion"],
                          "total_tokens": result["prompt"] + result["completion"]}}

    async def sse(self, include_usage: bool) -> AsyncIterator[bytes]:
        """The run as a chat-completions event stream."""
        yield sse(chunk(self.id, self.model, self.created, {"role": "assistant", "content": ""}))
        streamed = False
        calls: list[dict[str, Any]] = []
        prompt = completion = 0
        async for kind, value in self.events():
            if kind == "delta":
                streamed = True
                yield sse(chunk(self.id, self.model, self.created, {"content": value}))
            elif kind == "final" and not streamed and value:
                yield sse(chunk(self.id, self.model, self.created, {"content": value}))
            elif kind == "calls":
                calls = value
            elif kind == "usage":
                prompt += value.prompt_tokens
                completion += value.completion_tokens
            elif kind == "error":
                self.record(200, "stream_error", value, {"prompt": prompt, "completion": completion})
                yield sse(error_body(value, "agent_error"))
                return
        self.record(200, "ok", None, {"prompt": prompt, "completion": completion, "calls": calls})
        if calls:
            yield sse(chunk(self.id, self.model, self.created, {"tool_calls": tool_call_deltas(calls)}))
        yield sse(chunk(self.id, self.model, self.created, {}, "tool_calls" if calls else "stop"))
        if include_usage:
            yield sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                       "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                "total_tokens": prompt + completion}})
        yield SSE_DONE
