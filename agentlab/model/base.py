"""The Model seam: one request shape, one response shape, one error family.

Every backend (OpenAI-compatible HTTP, the embedded llama.cpp server, the scripted test model)
implements :class:`Model`. Every finished call is reported to the call observers active in the
current context (see :func:`observe_calls`) so a harness can attribute calls and tokens to a case.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from agentlab.events import Message, Usage

Purpose = Literal["answer", "summary", "judge", "memory", "tool", "other"]


@dataclass(frozen=True)
class ModelInfo:
    """What a model is and how much it can read: its name and context window in tokens, with where that
    window came from (it is never guessed).
    """

    name: str
    context_window: int
    #: Where the window came from: ``"--context-window"``, ``"server:/v1/models max_model_len"``,
    #: ``"known-model table"``... (stored with a run, printed in its header).
    context_window_source: str = ""


@dataclass(frozen=True)
class GenerationConfig:
    """Generation parameters; they are part of the cache key."""

    temperature: float | None = 0.0
    max_tokens: int | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    #: ``"json"`` asks for a JSON object (structured output); ``None`` for free text.
    response_format: str | None = None
    #: With ``response_format="json"``: the JSON Schema (as compact JSON text) the object must
    #: follow. Backends that can enforce it (llama.cpp compiles it into a grammar) do; the others
    #: fall back to a plain JSON object and rely on the prompt.
    json_schema: str | None = None

    def __post_init__(self) -> None:
        # A value a server would take literally (max_tokens=0 asks for nothing) or refuse is stopped
        # here, where the setting that produced it can still be named.
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, or none for the model's default; got {self.max_tokens}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"temperature must be >= 0; got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1]; got {self.top_p}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, as hashed into the cache key and stored with a call."""
        # Field by field in declaration order (what dataclasses.asdict gave, without its deep copy:
        # every field is a plain value), once per model call.
        d: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens, "top_p": self.top_p,
                             "stop": list(self.stop), "seed": self.seed, "response_format": self.response_format}
        if self.json_schema is not None:  # absent when unset: keeps the cache keys of schema-less requests
            d["json_schema"] = self.json_schema
        return d

    @staticmethod
    def schema_text(schema: dict[str, Any]) -> str:
        """Compact JSON text of a schema, for :attr:`json_schema`.

        Key order is kept: a grammar built from the schema emits properties in this order (a judge
        says ``correct`` before ``confidence`` and ends with its ``reason``).
        """
        return json.dumps(schema, separators=(",", ":"))


@dataclass
class ModelRequest:
    """One chat call: the messages, the tools offered, the generation settings, and why it is made."""

    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    config: GenerationConfig = field(default_factory=GenerationConfig)
    #: What the call is for; recorded with the call (not part of the cache key).
    purpose: Purpose = "answer"
    #: Distinguishes repeated samples of one request in the call cache.
    sample_index: int = 0

    def cache_payload(self, model_name: str) -> dict[str, Any]:
        """The normalised request: what identifies a call, without ids or transport settings."""
        msgs = []
        for m in self.messages:
            d: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.tool_calls:
                d["tool_calls"] = [{"name": c.name, "arguments": c.arguments} for c in m.tool_calls]
            if m.role == "tool":
                d["name"] = m.name
            msgs.append(d)
        return {
            "model": model_name,
            "messages": msgs,
            "tools": self.tools,
            "config": self.config.to_dict(),
            "sample_index": self.sample_index,
        }

    def cache_blob(self, model_name: str) -> str:
        """:meth:`cache_payload` as the JSON text that is hashed into the key (and stored with the answer)."""
        return json.dumps(self.cache_payload(model_name), sort_keys=True, ensure_ascii=False)

    def cache_key(self, model_name: str) -> str:
        """SHA-256 of :meth:`cache_payload`: equal for calls that must get the same cached answer."""
        return blob_key(self.cache_blob(model_name))


def blob_key(blob: str) -> str:
    """The cache key of a :meth:`ModelRequest.cache_blob`."""
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class ModelResponse:
    """A finished call: the assistant message, token usage, and how it was obtained (cache hit, latency,
    HTTP attempts).
    """

    message: Message
    usage: Usage
    model: str
    finish_reason: str | None = None
    cache_hit: bool = False
    latency_ms: float = 0.0
    #: HTTP attempts it took (a retried 5xx or garbage body counts); 0 when replayed from the cache.
    attempts: int = 1


@dataclass
class ModelChunk:
    """A streamed piece of a response; the last chunk carries ``response``."""

    delta: str = ""
    response: ModelResponse | None = None


@runtime_checkable
class Model(Protocol):
    """What the runtime, the summariser and the judge call: any chat backend (HTTP, embedded,
    scripted, or the call cache wrapping one of them).
    """

    @property
    def info(self) -> ModelInfo:
        """Name and context window. Read-only here so that wrappers (the call cache) can forward
        it; an HTTP backend may ask its server on first read, or raise ``ContextWindowUnknown``.
        """
        ...

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response in one piece; raises a :class:`ModelError` subclass on failure."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """Text deltas as they arrive; the last chunk carries the complete :class:`ModelResponse`."""
        ...


def model_name(model: Model) -> str:
    """A model's name without resolving anything else about it.

    An HTTP model learns its context window from its server on first use of ``info``; a cache key
    or a call record needs only the name, so it must not trigger (or fail on) that probe.
    """
    name = getattr(model, "model_name", None)
    return name if isinstance(name, str) else model.info.name


# --------------------------------------------------------------------------------------- errors


class ModelError(Exception):
    """A model call failed in a way the caller should see as one clear sentence."""

    code = "model_error"
    retryable = False
    #: Attempts made before giving up (set by backends that retry).
    attempts = 1


class ContextLengthError(ModelError):
    """The prompt does not fit the model's window (the server said so); not retried."""

    code = "context_length"


class ContextWindowUnknown(ModelError):
    """Nobody states the model's window: not the caller, not the server, not the known-model table."""

    code = "context_window_unknown"


class RateLimitError(ModelError):
    """The server asked us to slow down (HTTP 429); retried, waiting at least its ``Retry-After``
    (up to the backoff cap).
    """

    code = "rate_limit"
    retryable = True


class ServerError(ModelError):
    """The server failed (HTTP 5xx); transient, so retried."""

    code = "server_error"
    retryable = True


class ModelTimeout(ModelError):
    """The call took too long (client timeout or HTTP 408); retried."""

    code = "timeout"
    retryable = True


class MalformedResponse(ModelError):
    """The server answered with a body that is not a chat completion (bad JSON, no choices, ...)."""

    code = "malformed_response"


class ModelUnavailable(ModelError):
    """The model cannot be used: the server is unreachable, or refuses us (401/403) or does not know the
    model (404).
    """

    code = "unavailable"


# ------------------------------------------------------------------------------- call observers


@dataclass(frozen=True)
class CallRecord:
    """One finished (or failed) model call, as reported to observers."""

    model: str
    purpose: str
    usage: Usage
    latency_ms: float
    cache_hit: bool
    cache_key: str = ""
    error: str | None = None
    #: HTTP attempts the call took (retries of transient faults included); 0 for a cache hit.
    attempts: int = 1


CallObserver = Callable[[CallRecord], None]
_observers: contextvars.ContextVar[tuple[CallObserver, ...]] = contextvars.ContextVar(
    "agentlab_call_observers", default=()
)


@contextlib.contextmanager
def observe_calls(observer: CallObserver) -> Iterator[None]:
    """Report every model call made in this context (and tasks it spawns) to ``observer``."""
    token = _observers.set(_observers.get() + (observer,))
    try:
        yield
    finally:
        _observers.reset(token)


def reporting() -> bool:
    """Whether a call reported now reaches anyone (a reporter can skip building a record that would not)."""
    return bool(_observers.get())


def report_call(record: CallRecord) -> None:
    """Send ``record`` to every observer active in this context (none: nothing happens)."""
    for observer in _observers.get():
        observer(record)


async def collect_text(model: Model, request: ModelRequest) -> ModelResponse:
    """Generate and return the response; a convenience for callers that do not stream."""
    return await model.generate(request)


@contextlib.contextmanager
def suppress_reports() -> Iterator[None]:
    """Silence call reports inside; a wrapper (such as the call cache) reports the call itself."""
    token = _observers.set(())
    try:
        yield
    finally:
        _observers.reset(token)
