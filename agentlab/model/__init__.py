"""The model layer: one protocol, OpenAI-compatible backends, a scripted test model, a call cache.

Pick a model with :func:`get_model` (spec strings are documented in
:mod:`agentlab.model.registry`); count tokens with :mod:`agentlab.model.tokens`.

The names below load on first use (like :mod:`agentlab.runtime`'s): the components import
``agentlab.model.base`` for the request types and should not pay for the OpenAI client, the
embedded server and the call cache they never use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab._lazy import lazy_exports
from agentlab.model import tokens

_EXPORTS = {
    "CallObserver": "agentlab.model.base",
    "CallRecord": "agentlab.model.base",
    "ContextLengthError": "agentlab.model.base",
    "ContextWindowUnknown": "agentlab.model.base",
    "GenerationConfig": "agentlab.model.base",
    "MalformedResponse": "agentlab.model.base",
    "Model": "agentlab.model.base",
    "ModelChunk": "agentlab.model.base",
    "ModelError": "agentlab.model.base",
    "ModelInfo": "agentlab.model.base",
    "ModelRequest": "agentlab.model.base",
    "ModelResponse": "agentlab.model.base",
    "ModelTimeout": "agentlab.model.base",
    "ModelUnavailable": "agentlab.model.base",
    "RateLimitError": "agentlab.model.base",
    "ServerError": "agentlab.model.base",
    "collect_text": "agentlab.model.base",
    "observe_calls": "agentlab.model.base",
    "report_call": "agentlab.model.base",
    "suppress_reports": "agentlab.model.base",
    "CachedModel": "agentlab.model.cache",
    "CallCache": "agentlab.model.cache",
    "default_cache_path": "agentlab.model.cache",
    "EmbeddedModel": "agentlab.model.embedded",
    "EmbeddedServer": "agentlab.model.embedded",
    "OpenAICompatModel": "agentlab.model.openai_compat",
    "default_spec": "agentlab.model.registry",
    "get_model": "agentlab.model.registry",
    "ScriptedModel": "agentlab.model.scripted",
    "count_event": "agentlab.model.tokens",
    "count_message": "agentlab.model.tokens",
    "count_messages": "agentlab.model.tokens",
    "count_text": "agentlab.model.tokens",
}

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

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
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


__getattr__, __dir__ = lazy_exports("agentlab.model", _EXPORTS, globals())
