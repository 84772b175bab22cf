"""Any OpenAI-compatible chat-completions server: OpenAI itself, vLLM, Ollama, llama.cpp, DeepSeek.

This is the one client path of agentlab: those servers and the embedded SmolLM2 server all go
through :class:`OpenAICompatModel`. A completion sent to a named server (a base URL) is one plain
POST through the HTTP client the ``openai`` library is built on (:mod:`agentlab.model.openai_post`),
so a run never imports the library (about 0.3 s of CPU at start-up); streams and calls to the
OpenAI API itself (no base URL) go through ``openai.AsyncOpenAI``, imported when first used.

Retries are ours, not the library's (it is built with ``max_retries=0``) so that the policy is
visible and testable: exponential backoff with full jitter on 429, 5xx, timeouts and connection
errors, and on a 200 whose body (or stream, before any of its text reached the caller) is
unreadable, for at most ``max_attempts`` attempts. Everything else fails at once with one clear
sentence from the :class:`~agentlab.model.base.ModelError` family.

Responses are parsed from the raw JSON body rather than the library's lazily built objects, so a
malformed body becomes a :class:`~agentlab.model.base.MalformedResponse` naming what is missing
instead of an ``AttributeError`` deep inside a caller.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import agentlab.model.openai_post as openai_post
import agentlab.model.window as window
from agentlab.events import Message, ToolCall, Usage, new_id
from agentlab.model.base import (
    CallRecord,
    ContextWindowUnknown,
    MalformedResponse,
    ModelChunk,
    ModelError,
    ModelInfo,
    ModelRequest,
    ModelResponse,
    ModelUnavailable,
    report_call,
    reporting,
)
from agentlab.model.openai_wire import Attempt as _Attempt
from agentlab.model.openai_wire import classify as _classify
from agentlab.model.openai_wire import estimated_usage as _estimated_usage
from agentlab.model.openai_wire import is_library_error as _is_library_error
from agentlab.model.openai_wire import parse_completion
from agentlab.model.openai_wire import parse_usage as _parse_usage
from agentlab.model.openai_wire import short as _short
from agentlab.model.openai_wire import times as _times

if TYPE_CHECKING:
    import openai
    from openai import AsyncStream
    from openai.types.chat import ChatCompletionChunk

_T = TypeVar("_T")

#: Context windows of well-known hosted models. A name matches itself, or itself plus a dated
#: snapshot suffix (``gpt-4o-mini-2024-07-18``); nothing else, because a prefix is a guess
#: (``o1-mini`` is not ``o1``, ``gpt-3.5-turbo-0613`` had 4,096 tokens). Used only when neither the
#: caller nor the server states the window (see :meth:`OpenAICompatModel.resolve_info`).
KNOWN_CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-4o-mini": 128_000,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-turbo-preview": 128_000,
    "gpt-4-1106-preview": 128_000,
    "gpt-4-0125-preview": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-4-0613": 8_192,
    "gpt-3.5-turbo": 16_385,
    "gpt-3.5-turbo-0125": 16_385,
    "gpt-3.5-turbo-1106": 16_385,
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "gpt-5-nano": 400_000,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o1-preview": 128_000,
    "o3": 200_000,
    "o3-mini": 200_000,
    "o4-mini": 200_000,
}

_DATED_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")

#: Source label of a window given by the caller (``--context-window`` / ``context_window=``).
EXPLICIT_SOURCE = "--context-window"
#: Source label of a window taken from :data:`KNOWN_CONTEXT_WINDOWS`.
TABLE_SOURCE = "known-model table"

def known_context_window(model: str) -> int | None:
    """The window of ``model`` from :data:`KNOWN_CONTEXT_WINDOWS` (exact name or dated snapshot), else ``None``."""
    name = model.rsplit("/", 1)[-1].lower()
    return KNOWN_CONTEXT_WINDOWS.get(name) or KNOWN_CONTEXT_WINDOWS.get(_DATED_SNAPSHOT.sub("", name))


# ------------------------------------------------------------------------------------ model


def _chat_options() -> Any:
    """The request options ``chat.completions.create`` gives a POST: bearer auth only, on library
    versions that choose authentication per request (earlier ones always send the bearer token).
    """
    global _CHAT_OPTIONS
    if _CHAT_OPTIONS is None:
        try:  # a private module of the library: should it move, the plain options still authenticate
            from openai._models import FinalRequestOptions
        except ImportError:
            fields: Any = {}
        else:
            fields = getattr(FinalRequestOptions, "model_fields", None) or getattr(FinalRequestOptions, "__fields__", {})
        _CHAT_OPTIONS = {"security": {"bearer_auth": True}} if "security" in fields else {}
    return dict(_CHAT_OPTIONS)


_CHAT_OPTIONS: dict[str, Any] | None = None


class OpenAICompatModel:
    """A chat model behind an OpenAI-compatible ``/v1/chat/completions`` endpoint."""

    #: Send a request's JSON Schema as ``response_format={"type": "json_schema", ...}``. Off by
    #: default (servers differ in which schema keywords they accept); the embedded llama.cpp
    #: server turns it on: it compiles the schema into a grammar, so even a 135M model's reply
    #: parses and, with length limits in the schema, ends.
    enforces_json_schema: bool = False

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        context_window: int | None = None,
        timeout: float = 60.0,
        max_attempts: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        probe_timeout: float = window.PROBE_TIMEOUT,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if context_window is not None and int(context_window) < 1:
            raise ValueError(f"context_window must be a positive number of tokens, got {context_window}")
        self.model = model
        self.base_url = base_url
        if api_key is None:
            api_key = os.environ.get("OPENAI_API_KEY")
        if api_key is None and base_url is None:
            raise ModelUnavailable(
                f"model {model!r} needs OPENAI_API_KEY: set it (export OPENAI_API_KEY=...), or reach an "
                f"OpenAI-compatible server with openai:{model}@<base_url>"
            )
        # Local servers ignore the key but the client insists on having one.
        self.api_key = api_key or "not-needed"
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.probe_timeout = probe_timeout
        self._explicit_window = int(context_window) if context_window is not None else None
        # The window is resolved on first use of ``info`` (one cheap probe of the server), then kept.
        self._info: ModelInfo | None = None
        self._info_error: ContextWindowUnknown | None = None
        self._info_lock = threading.Lock()
        #: What the last probe learned (``None`` until the server was asked).
        self.probe: window.ProbeResult | None = None
        #: Flipped off when a server rejects ``stream_options``; usage is then counted locally.
        self.stream_usage_supported = True
        # One client per event loop: an httpx pool must not outlive or cross its loop. The library's
        # clients (streams, the OpenAI API) and the plain POST's are kept apart.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        self._posters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai_post.PlainPoster] = (
            weakref.WeakKeyDictionary()
        )

    # --------------------------------------------------------------------- context window

    @property
    def model_name(self) -> str:
        """The model name as the server knows it; never triggers the context-window probe."""
        return self.model

    @property
    def info(self) -> ModelInfo:
        """Name and context window; the first access resolves the window (see :meth:`resolve_info`)."""
        return self.resolve_info()

    @info.setter
    def info(self, value: ModelInfo) -> None:
        with self._info_lock:
            self._info, self._info_error = value, None

    def resolve_info(self) -> ModelInfo:
        """The window, in this order: ``context_window=`` → what the server states → the known table.

        Done once per model object (the server is asked with a short timeout, synchronously: call
        this before an event loop starts when the server may be slow). When none of them knows the
        window, :class:`ContextWindowUnknown` is raised, now and on every later access.
        """
        with self._info_lock:
            if self._info is None and self._info_error is None:
                try:
                    self._info = self._resolve()
                except ContextWindowUnknown as exc:
                    self._info_error = exc
            if self._info_error is not None:
                raise self._info_error
            assert self._info is not None
            return self._info

    def _resolve(self) -> ModelInfo:
        if self._explicit_window is not None:
            return ModelInfo(self.model, self._explicit_window, EXPLICIT_SOURCE)
        known = known_context_window(self.model)
        if self.base_url is not None:
            self.probe = window.probe_window(self.base_url, self.model, self.api_key, timeout=self.probe_timeout)
            if self.probe.window is not None:
                return ModelInfo(self.model, self.probe.window, self.probe.source)
        if known is not None:
            return ModelInfo(self.model, known, TABLE_SOURCE)
        fix = "pass --context-window N (API: context_window=N)"
        problem = window.server_problem(self.probe) if self.probe is not None else None
        if problem is not None:
            raise ContextWindowUnknown(
                f"the context window of model {self.model!r} is unknown: the model server at {self.server_label} "
                f"{problem}; or {fix}")
        asked = ", ".join(self.probe.tried) if self.probe is not None else "nothing"
        raise ContextWindowUnknown(
            f"the context window of model {self.model!r} is unknown: the server at {self.server_label} states "
            f"none (asked {asked}) and it is not in the known-model table; {fix}")

    def server_problem(self) -> str | None:
        """What would stop every call (unreachable, API key refused), or ``None``; reuses the window probe."""
        if self.probe is not None:
            return window.server_problem(self.probe)
        return window.check_server(self.server_label, self.api_key, self.probe_timeout)

    def __repr__(self) -> str:
        return f"OpenAICompatModel({self.model!r}, base_url={self.base_url!r})"

    @property
    def server_label(self) -> str:
        """Where calls go, for error messages (the OpenAI API when no base URL is set)."""
        return self.base_url or "https://api.openai.com/v1"

    def _client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            import openai

            client = openai.AsyncOpenAI(api_key=self.api_key, base_url=self.base_url, max_retries=0,
                                        timeout=self.timeout)
            self._clients[loop] = client
        return client

    async def _post_completion(self, params: dict[str, Any]) -> str:
        """One attempt's answer body: a plain POST to a named server, else through the library."""
        if openai_post.plain_post_applies(self.base_url):
            assert self.base_url is not None
            loop = asyncio.get_running_loop()
            poster = self._posters.get(loop)
            if poster is None:
                poster = openai_post.PlainPoster(self.base_url, self.api_key, self.timeout)
                self._posters[loop] = poster
            return await poster.post(params)
        # The client's plain POST, not chat.completions.create: create() first walks the whole
        # request through the library's typed-dict transform (about a millisecond of CPU per call
        # for a long history), which changes nothing in a chat request (no aliased or file fields).
        return await self._client().post("/chat/completions", body=params, cast_to=str, options=_chat_options())

    def forget_clients(self) -> None:
        """Drop every loop's HTTP clients (they point at a server that is gone), without closing them."""
        self._clients.clear()
        self._posters.clear()

    async def aclose(self) -> None:
        """Close this loop's HTTP clients (optional; clients are also dropped with their loop)."""
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        if client is not None:
            await client.close()
        poster = self._posters.pop(loop, None)
        if poster is not None:
            await poster.aclose()

    # -------------------------------------------------------------------------- request

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        config = request.config
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_openai() for m in request.messages],
        }
        if request.tools:
            params["tools"] = request.tools
        if config.temperature is not None:
            params["temperature"] = config.temperature
        if config.max_tokens is not None:
            params["max_tokens"] = config.max_tokens
        if config.top_p is not None:
            params["top_p"] = config.top_p
        if config.stop:
            params["stop"] = list(config.stop)
        if config.seed is not None:
            params["seed"] = config.seed
        if config.response_format == "json" and config.json_schema and self.enforces_json_schema:
            params["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "output", "schema": json.loads(config.json_schema)}}
        elif config.response_format == "json":
            params["response_format"] = {"type": "json_object"}
        elif config.response_format is not None:
            raise ValueError(f"unknown response_format {config.response_format!r} (use 'json' or None)")
        return params

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        # Full jitter: uniform in [0, capped exponential]; a server's Retry-After is a floor.
        delay = random.uniform(0.0, min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1)))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay

    def _final_error(self, failures: list[_Attempt]) -> ModelError:
        last = failures[-1]
        where = f"model server at {self.server_label}"
        if not last.retryable or len(failures) == 1:
            if last.status is not None:
                return last.error_class(f"{where} answered {last.status}: {last.detail}")
            return last.error_class(f"{where} {last.detail}")
        statuses = [f.status for f in failures]
        if last.status is not None and all(s == last.status for s in statuses):
            return last.error_class(f"{where} answered {last.status} {_times(len(failures))}: {last.detail}")
        if all(s is None for s in statuses) and all(f.detail == last.detail for f in failures):
            return last.error_class(f"{where} {last.detail} {_times(len(failures))}")
        seen = ", ".join(str(f.status) if f.status is not None else f.detail.split(" (")[0] for f in failures)
        return last.error_class(f"{where} failed {_times(len(failures))} ({seen}); last: {last.detail}")

    async def _with_retries(self, call: Callable[[], Awaitable[_T]], budget: int | None = None) -> tuple[_T, int]:
        """Run ``call()`` (a coroutine factory) with our retry policy: its result and the attempts taken.

        Raises a ModelError (with ``attempts`` set) when done. A 200 whose body is not a completion
        (``call`` raises :class:`MalformedResponse`) is a transient fault like a 5xx: retried.
        ``budget`` caps the attempts below ``max_attempts`` (a stream retried after an unreadable
        one has used some of them already).
        """
        limit = max(1, min(self.max_attempts, budget if budget is not None else self.max_attempts))
        failures: list[_Attempt] = []
        for attempt in range(1, limit + 1):
            try:
                return await asyncio.wait_for(call(), timeout=self.timeout), attempt
            except (_Attempt, asyncio.TimeoutError) as exc:  # a plain POST's failure, classified; a timeout
                failure = _classify(exc)
            except MalformedResponse as exc:
                detail = str(exc).removeprefix(f"model server at {self.server_label} ")
                failure = _Attempt(MalformedResponse, detail, 200, retryable=True)
            except Exception as exc:
                if not _is_library_error(exc):
                    raise
                failure = _classify(exc)
            failures.append(failure)
            if not failure.retryable or attempt == limit:
                break
            await asyncio.sleep(self._backoff(attempt, failure.retry_after))
        error = self._final_error(failures)
        error.attempts = len(failures)
        raise error

    def _report(self, request: ModelRequest, usage: Usage, started: float, error: BaseException | None,
                attempts: int = 1) -> None:
        if not reporting():  # e.g. under the call cache, which reports the call itself: no record to build
            return
        report_call(
            CallRecord(
                model=self.model,
                purpose=request.purpose,
                usage=usage,
                latency_ms=(time.perf_counter() - started) * 1000,
                cache_hit=False,
                cache_key=request.cache_key(self.model),
                error=None if error is None else f"{type(error).__name__}: {error}",
                attempts=getattr(error, "attempts", 1) if error is not None else attempts,
            )
        )

    # ------------------------------------------------------------------------- generate

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One completion, with transient faults (timeouts, 429, 5xx, a garbage 200 body) retried; a
        :class:`ModelError` subclass with ``attempts`` set when it fails for good.
        """
        started = time.perf_counter()
        where = f"model server at {self.server_label}"
        try:
            params = self._params(request)

            async def one_attempt() -> tuple[Message, Usage | None, str | None]:
                return parse_completion(await self._post_completion(params), where)

            (message, usage, finish), attempts = await self._with_retries(one_attempt)
            if usage is None:
                usage = _estimated_usage(request, message)
        except ModelError as exc:
            self._report(request, Usage(), started, exc)
            raise
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            # Anything the library or pydantic trips over deep inside is a malformed answer.
            error = MalformedResponse(f"{where} sent an unreadable response: "
                                      f"{type(exc).__name__}: {_short(str(exc), 160)}")
            self._report(request, Usage(), started, error)
            raise error from exc
        response = ModelResponse(message=message, usage=usage, model=self.model, finish_reason=finish,
                                 latency_ms=(time.perf_counter() - started) * 1000, attempts=attempts)
        self._report(request, usage, started, None, attempts)
        return response

    # --------------------------------------------------------------------------- stream

    async def _open_stream(self, params: dict[str, Any], budget: int) -> tuple[AsyncStream[ChatCompletionChunk], int]:
        async def one_attempt() -> AsyncStream[ChatCompletionChunk]:
            extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if self.stream_usage_supported else {}
            return await self._client().chat.completions.create(stream=True, **params, **extra)

        try:
            return await self._with_retries(one_attempt, budget)
        except ModelError as exc:
            # Older servers reject stream_options; retry once without it and remember.
            if self.stream_usage_supported and "stream_options" in str(exc) and not exc.retryable:
                self.stream_usage_supported = False
                stream, attempts = await self._with_retries(one_attempt, max(1, budget - exc.attempts))
                return stream, attempts + exc.attempts
            raise

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """Text deltas as the server streams them, then one chunk with the whole response.

        Opening the stream is retried like :meth:`generate`. A stream that turns out unreadable (a
        chunk that is not JSON or not a chunk, or no choices at all) is a transient fault like a
        garbage body, and is streamed again while none of its text has reached the caller yet; once
        some has, a retry would repeat text the caller already holds, so it fails with a
        :class:`MalformedResponse` that says so, with the attempts it took.
        """
        import openai

        started = time.perf_counter()
        where = f"model server at {self.server_label}"
        attempts = 0
        failures: list[_Attempt] = []
        try:
            params = self._params(request)
            while True:
                stream, opened = await self._open_stream(params, self.max_attempts - attempts)
                attempts += opened
                reply = _StreamedReply()
                try:
                    try:
                        async for chunk in stream:
                            for text in reply.feed(chunk):
                                reply.delivered += 1
                                yield ModelChunk(delta=text)
                    finally:
                        await stream.close()
                    if not reply.saw_choice:
                        raise MalformedResponse(f"{where} streamed no choices")
                    break
                except (MalformedResponse, KeyError, TypeError, AttributeError, ValueError) as exc:
                    detail = (str(exc).removeprefix(f"{where} ") if isinstance(exc, MalformedResponse)
                              else f"sent an unreadable stream: {type(exc).__name__}: {_short(str(exc), 160)}")
                    if reply.delivered:
                        cut_short = MalformedResponse(
                            f"{where} {detail}, after {reply.delivered} text chunk(s) had reached the caller; "
                            f"not retried, since a new stream would repeat that text")
                        cut_short.attempts = attempts
                        raise cut_short from exc
                    failures.append(_Attempt(MalformedResponse, detail, 200, retryable=True))
                    if attempts >= self.max_attempts:
                        given_up = self._final_error(failures)
                        given_up.attempts = attempts
                        raise given_up from exc
                    await asyncio.sleep(self._backoff(attempts, None))
        except (openai.APIError, asyncio.TimeoutError) as exc:
            error = self._final_error([_classify(exc)])
            error.attempts = max(1, attempts)
            self._report(request, Usage(), started, error)
            raise error from exc
        except ModelError as exc:
            if attempts > exc.attempts:
                exc.attempts = attempts  # earlier unreadable streams count too
            self._report(request, Usage(), started, exc)
            raise
        message = reply.message()
        usage = reply.usage if reply.usage is not None else _estimated_usage(request, message)
        response = ModelResponse(message=message, usage=usage, model=self.model, finish_reason=reply.finish,
                                 latency_ms=(time.perf_counter() - started) * 1000, attempts=attempts)
        self._report(request, usage, started, None, attempts)
        yield ModelChunk(response=response)


class _StreamedReply:
    """What one stream has delivered so far: text, tool-call pieces, usage, finish reason."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.usage: Usage | None = None
        self.finish: str | None = None
        self.saw_choice = False
        #: Text chunks already handed to the caller (after the first, a retry would repeat them).
        self.delivered = 0

    def feed(self, chunk: object) -> list[str]:
        """Take one chunk; return its text deltas. Raises on a chunk that is not a chunk."""
        from pydantic import BaseModel  # the library's chunks (imported with it)

        data = chunk.model_dump(warnings=False) if isinstance(chunk, BaseModel) else chunk
        if not isinstance(data, dict):
            raise MalformedResponse(f"stream chunk is not an object: {_short(data, 120)!r}")
        self.usage = _parse_usage(data.get("usage")) or self.usage
        texts: list[str] = []
        for choice in data.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            self.saw_choice = True
            self.finish = choice.get("finish_reason") or self.finish
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                self.content.append(text)
                texts.append(text)
            for piece in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(int(piece.get("index") or 0), {"id": "", "name": "", "arguments": ""})
                slot["id"] = piece.get("id") or slot["id"]
                function = piece.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
        return texts

    def message(self) -> Message:
        """The assistant message the whole stream amounts to."""
        tool_calls = tuple(
            ToolCall(id=slot["id"] or new_id("call_"), name=slot["name"], arguments=slot["arguments"] or "{}")
            for _, slot in sorted(self.calls.items())
        )
        return Message.assistant("".join(self.content), tool_calls)
