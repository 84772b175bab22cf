"""The OpenAI chat-completions wire format: what a failed attempt was, and what a reply body says.

:mod:`agentlab.model.openai_compat` sends the requests and owns the retry loop; this module holds
the two pure parts it decides with: :func:`classify` turns an exception from the client library
into an :class:`Attempt` (which error class, retryable or not, the server's ``Retry-After``) — and
:func:`status_attempt` / :func:`connection_failure` make the same :class:`Attempt` for the plain
POST of :mod:`agentlab.model.openai_post`, which never imports the library — and
:func:`parse_completion` reads a raw JSON body into a message, its usage and finish reason, with a
:class:`~agentlab.model.base.MalformedResponse` naming what is missing when it is not one.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable
from typing import Any

import agentlab.model.tokens as tokens
from agentlab.events import Message, ToolCall, Usage, new_id
from agentlab.model.base import (
    ContextLengthError,
    MalformedResponse,
    ModelError,
    ModelRequest,
    ModelTimeout,
    ModelUnavailable,
    RateLimitError,
    ServerError,
)

# Wording servers use when a prompt does not fit: OpenAI/vLLM ("maximum context length",
# code context_length_exceeded), llama.cpp ("exceeds the available context size",
# exceed_context_size_error, n_ctx), Ollama ("input length exceeds the context length"), proxies.
CONTEXT_LENGTH_PATTERN = re.compile(
    r"context[ _]length|maximum context|too many tokens|exceeds? (?:the )?(?:available |maximum )?context"
    r"|exceed_context_size|n_ctx|context size|context window",
    re.IGNORECASE,
)

_NUMBER_WORDS = {1: "once", 2: "twice", 3: "three times", 4: "four times", 5: "five times",
                 6: "six times", 7: "seven times", 8: "eight times", 9: "nine times", 10: "ten times"}


def short(text: Any, limit: int = 200) -> str:
    """One readable line of at most ``limit`` characters from a body or error payload."""
    if not isinstance(text, str):
        try:
            text = json.dumps(text, ensure_ascii=False)
        except (TypeError, ValueError):
            text = str(text)
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def times(n: int) -> str:
    """``n`` as a word for error sentences ("twice", "three times")."""
    return _NUMBER_WORDS.get(n, f"{n} times")


class Attempt(Exception):
    """One failed attempt, classified; turned into a ModelError once retries are over."""

    def __init__(self, error_class: type[ModelError], detail: str, status: int | None,
                 retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


def error_detail(body: Any, text: Callable[[], str]) -> str:
    """The sentence of an HTTP error answer: from its JSON ``error`` object (``body``, with the outer
    ``{"error": ...}`` already taken off, as the library does), else the body text (``text()``).
    """
    if isinstance(body, dict):
        # The library strips the outer {"error": ...}; some servers send a bare {"message": ...}.
        inner = body.get("error", body)
        if isinstance(inner, dict):
            # A numeric code only repeats the HTTP status; a textual one (context_length_exceeded) helps.
            parts = [str(inner[k]) for k in ("message", "type") if inner.get(k)]
            if isinstance(inner.get("code"), str):
                parts.append(inner["code"])
            extra = {k: v for k, v in inner.items() if k in ("n_ctx", "n_prompt_tokens")}
            if extra:
                parts.append(json.dumps(extra))
            if parts:
                return " | ".join(parts)
        return short(body)
    return short(text()) or "(empty body)"


def _error_text(exc: Any) -> str:
    def text() -> str:
        try:
            return str(exc.response.text)
        except Exception:  # the body may be unreadable (already closed stream)
            return str(exc.message)

    return error_detail(exc.body, text)


def retry_after(headers: Any) -> float | None:
    """A ``Retry-After`` header in seconds, ``None`` when absent or not a number."""
    try:
        value = headers.get("retry-after")
        return float(value) if value is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


def _retry_after_seconds(exc: Any) -> float | None:
    try:
        return retry_after(exc.response.headers)
    except AttributeError:
        return None


def status_attempt(status: int, detail: str, retry_after_s: float | None = None) -> Attempt:
    """An HTTP error status with its sentence, classified (the one rule for both request paths)."""
    if status == 429:
        return Attempt(RateLimitError, detail, status, retryable=True, retry_after=retry_after_s)
    if status >= 500:
        return Attempt(ServerError, detail, status, retryable=True)
    if status == 408:
        return Attempt(ModelTimeout, detail, status, retryable=True)
    if status in (400, 413, 422) and CONTEXT_LENGTH_PATTERN.search(detail):
        return Attempt(ContextLengthError, detail, status, retryable=False)
    if status in (401, 403, 404):
        return Attempt(ModelUnavailable, detail, status, retryable=False)
    return Attempt(ModelError, detail, status, retryable=False)


def connection_failure(cause: BaseException) -> Attempt:
    """A server that could not be reached (``cause``: the transport's exception)."""
    return Attempt(ModelUnavailable, f"could not be reached ({short(str(cause) or type(cause).__name__)})",
                   None, retryable=True)


def is_library_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the ``openai`` library's (never true while the library is not imported)."""
    openai = sys.modules.get("openai")
    api_error = getattr(openai, "APIError", None)
    return isinstance(api_error, type) and isinstance(exc, api_error)


def classify(exc: BaseException) -> Attempt:
    """Map a library exception onto our error family and say whether it is worth retrying."""
    if isinstance(exc, Attempt):  # the plain-POST path classifies its failures itself
        return exc
    if is_library_error(exc):
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return Attempt(ModelTimeout, "timed out", None, retryable=True)
        if isinstance(exc, openai.APIConnectionError):
            return connection_failure(exc.__cause__ or exc)
        if isinstance(exc, openai.APIStatusError):
            return status_attempt(exc.status_code, _error_text(exc), _retry_after_seconds(exc))
        # An error object inside a 200 stream (the library raises a bare APIError for it).
        detail = short(getattr(exc, "message", str(exc)))
        if CONTEXT_LENGTH_PATTERN.search(detail):
            return Attempt(ContextLengthError, detail, None, retryable=False)
        return Attempt(ModelError, detail, None, retryable=False)
    if isinstance(exc, asyncio.TimeoutError):
        return Attempt(ModelTimeout, "timed out", None, retryable=True)
    raise exc


# ---------------------------------------------------------------------------------- parsing


def parse_tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    """The ``tool_calls`` of a reply message; a call without an id gets one, arguments become JSON text."""
    if not raw:
        return ()
    if not isinstance(raw, list):
        raise MalformedResponse(f"tool_calls is a {type(raw).__name__}, expected a list")
    calls = []
    for item in raw:
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not function.get("name"):
            raise MalformedResponse(f"tool call without a function name: {short(item, 120)}")
        arguments = function.get("arguments")
        if arguments is None:
            arguments = "{}"
        elif not isinstance(arguments, str):
            # Some servers (Ollama) send the arguments as an object instead of a JSON string.
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(ToolCall(id=str(item.get("id") or new_id("call_")), name=str(function["name"]),
                              arguments=arguments))
    return tuple(calls)


def parse_usage(raw: Any) -> Usage | None:
    """A reply's ``usage`` (with cached prompt tokens when stated); ``None`` when absent or unreadable."""
    if not isinstance(raw, dict):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    try:
        return Usage(
            prompt_tokens=int(raw.get("prompt_tokens") or 0),
            completion_tokens=int(raw.get("completion_tokens") or 0),
            cached_tokens=int(cached or 0),
        )
    except (TypeError, ValueError):
        return None


def estimated_usage(request: ModelRequest, message: Message) -> Usage:
    """Usage counted locally (cl100k) for a server that reports none."""
    completion = tokens.count_text(message.content) + sum(
        tokens.count_text(c.name) + tokens.count_text(c.arguments) for c in message.tool_calls
    )
    return Usage(tokens.count_messages(request.messages, request.tools or None), completion)


def parse_completion(body: str, where: str = "model server") -> tuple[Message, Usage | None, str | None]:
    """Message, usage and finish reason of a chat-completions JSON body; MalformedResponse if not one.

    ``where`` names the server in error messages.
    """
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, TypeError):
        raise MalformedResponse(f"{where} sent a body that is not JSON: {short(body, 120)!r}") from None
    if not isinstance(data, dict):
        raise MalformedResponse(f"{where} sent a JSON {type(data).__name__}, expected an object")
    if "error" in data and not data.get("choices"):
        detail = short(data["error"])
        if CONTEXT_LENGTH_PATTERN.search(detail):
            raise ContextLengthError(detail)
        raise ModelError(f"{where} returned an error: {detail}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedResponse(f"{where} sent a response with no choices: {short(body, 120)!r}")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise MalformedResponse(f"{where} sent a choice without a message: {short(choice, 120)!r}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise MalformedResponse(f"{where} sent message content as {type(content).__name__}, expected text")
    parsed = Message.assistant(content or "", parse_tool_calls(message.get("tool_calls")))
    finish = choice.get("finish_reason")
    return parsed, parse_usage(data.get("usage")), str(finish) if finish is not None else None
