"""A deterministic model for tests and notebooks: it plays back a script of replies.

Each call pops the next script entry:

* a ``str`` becomes an assistant text message;
* a :class:`~agentlab.events.Message` is returned as is (use :meth:`ScriptedModel.tool_call`
  to build an assistant tool-call message);
* a callable receives the :class:`~agentlab.model.base.ModelRequest` and returns a ``str`` or
  ``Message`` (handy for replies that depend on the prompt);
* an ``Exception`` instance is raised (to test error paths).

Every request is kept in ``.requests`` so a test can assert what the model was shown. Usage is
computed with :mod:`agentlab.model.tokens` unless ``usage_fn`` is given.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import agentlab.model.tokens as tokens
from agentlab.events import Message, ToolCall, Usage
from agentlab.model.base import (
    CallRecord,
    ModelChunk,
    ModelError,
    ModelInfo,
    ModelRequest,
    ModelResponse,
    report_call,
)

ScriptEntry = str | Message | Callable[[ModelRequest], str | Message] | BaseException
UsageFn = Callable[[ModelRequest, Message], Usage]

_tool_call_ids = itertools.count(1)

#: A streamed reply is cut into at most this many text chunks before the final chunk.
STREAM_PIECES = 3


def _as_message(value: str | Message) -> Message:
    if isinstance(value, Message):
        return value
    if isinstance(value, str):
        return Message.assistant(value)
    raise TypeError(f"scripted reply must be a str or Message, got {type(value).__name__}")


def _default_usage(request: ModelRequest, message: Message) -> Usage:
    prompt = tokens.count_messages(request.messages, request.tools or None)
    completion = tokens.count_text(message.content) + sum(
        tokens.count_text(c.name) + tokens.count_text(c.arguments) for c in message.tool_calls
    )
    return Usage(prompt_tokens=prompt, completion_tokens=completion)


class ScriptedModel:
    """Plays back ``replies`` one per call; see the module docstring for the entry kinds."""

    def __init__(
        self,
        replies: list[ScriptEntry] | None = None,
        info: ModelInfo = ModelInfo("scripted", 8192),
        usage_fn: UsageFn | None = None,
        *,
        default_reply: str | Message | None = None,
    ) -> None:
        self.info = info
        self.replies: list[ScriptEntry] = list(replies or [])
        self.usage_fn = usage_fn
        #: Reply used once the script is exhausted; ``None`` means "raise ModelError".
        self.default_reply = default_reply
        #: Every request this model received, in order (including ones that raised).
        self.requests: list[ModelRequest] = []
        self._position = 0

    # ------------------------------------------------------------------------------ helpers

    @staticmethod
    def tool_call(name: str, args: dict[str, Any] | None = None, id: str | None = None) -> Message:
        """An assistant message that calls tool ``name`` with ``args`` (JSON-encoded)."""
        call_id = id or f"call_{next(_tool_call_ids)}"
        arguments = json.dumps(args or {}, ensure_ascii=False)
        return Message.assistant("", tool_calls=(ToolCall(id=call_id, name=name, arguments=arguments),))

    @property
    def calls(self) -> int:
        """How many calls this model has received."""
        return len(self.requests)

    @property
    def remaining(self) -> int:
        """Script entries not yet played."""
        return len(self.replies) - self._position

    def add(self, *replies: ScriptEntry) -> None:
        """Append more entries to the script."""
        self.replies.extend(replies)

    # ------------------------------------------------------------------------------- calling

    def _next_message(self, request: ModelRequest) -> Message:
        self.requests.append(request)
        if self._position < len(self.replies):
            entry = self.replies[self._position]
            self._position += 1
        elif self.default_reply is not None:
            entry = self.default_reply
        else:
            raise ModelError(
                f"ScriptedModel script exhausted: call {len(self.requests)} but only "
                f"{len(self.replies)} replies were scripted (add replies or pass default_reply=)"
            )
        if isinstance(entry, BaseException):
            raise entry
        if callable(entry) and not isinstance(entry, Message):
            entry = entry(request)
        return _as_message(entry)

    def _respond(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        try:
            message = self._next_message(request)
        except Exception as exc:
            report_call(
                CallRecord(
                    model=self.info.name,
                    purpose=request.purpose,
                    usage=Usage(),
                    latency_ms=(time.perf_counter() - started) * 1000,
                    cache_hit=False,
                    error=f"{type(exc).__name__}: {exc}",
                )
            )
            raise
        usage = (self.usage_fn or _default_usage)(request, message)
        response = ModelResponse(
            message=message,
            usage=usage,
            model=self.info.name,
            finish_reason="tool_calls" if message.tool_calls else "stop",
            latency_ms=(time.perf_counter() - started) * 1000,
        )
        report_call(
            CallRecord(
                model=self.info.name,
                purpose=request.purpose,
                usage=usage,
                latency_ms=response.latency_ms,
                cache_hit=False,
            )
        )
        return response

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The next scripted reply for this request (recorded in ``requests``); a scripted error is raised."""
        return self._respond(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """The next scripted reply cut into a few deltas, then the response: exercises streaming consumers
        without a server.
        """
        response = self._respond(request)
        text = response.message.content
        if text:
            size = max(1, -(-len(text) // STREAM_PIECES))
            for start in range(0, len(text), size):
                yield ModelChunk(delta=text[start : start + size])
        yield ModelChunk(response=response)
