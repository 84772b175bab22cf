"""The model layer: one protocol, OpenAI-compatible backends, a scripted test model, a call cache.

Pick a model with :func:`get_model` (spec strings are documented in
:mod:`agentlab.model.registry`); count tokens with :mod:`agentlab.model.tokens`.
"""

from agentlab.model import tokens
from agentlab.model.base import (
    CallObserver,
    CallRecord,
    ContextLengthError,
    ContextWindowUnknown,
    GenerationConfig,
    MalformedResponse,
    Model,
    ModelChunk,
    ModelError,
    ModelInfo,
    ModelRequest,
    ModelResponse,
    ModelTimeout,
    ModelUnavailable,
    RateLimitError,
    ServerError,
    collect_text,
    observe_calls,
    report_call,
    suppress_reports,
)
from agentlab.model.cache import CachedModel, CallCache, default_cache_path
from agentlab.model.embedded import EmbeddedModel, EmbeddedServer
from agentlab.model.openai_compat import OpenAICompatModel
from agentlab.model.registry import default_spec, get_model
from agentlab.model.scripted import ScriptedModel
from agentlab.model.tokens import count_event, count_message, count_messages, count_text

__all__ = [
    "CachedModel",
    "CallCache",
    "EmbeddedModel",
    "EmbeddedServer",
    "OpenAICompatModel",
    "default_cache_path",
    "default_spec",
    "get_model",
    "CallObserver",
    "CallRecord",
    "ContextLengthError",
    "ContextWindowUnknown",
    "GenerationConfig",
    "MalformedResponse",
    "Model",
    "ModelChunk",
    "ModelError",
    "ModelInfo",
    "ModelRequest",
    "ModelResponse",
    "ModelTimeout",
    "ModelUnavailable",
    "RateLimitError",
    "ScriptedModel",
    "ServerError",
    "collect_text",
    "count_event",
    "count_message",
    "count_messages",
    "count_text",
    "observe_calls",
    "report_call",
    "suppress_reports",
    "tokens",
]
