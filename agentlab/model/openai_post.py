"""A chat completion as one plain HTTP POST to a named server, without importing the ``openai`` library.

:class:`~agentlab.model.openai_compat.OpenAICompatModel` sends ``generate`` calls to a server it
is given the address of (vLLM, llama.cpp, Ollama, the embedded server, the test server) through
:class:`PlainPoster`: the HTTP client the installed ``openai`` library itself is built on
(``httpx2``, or ``httpx`` for earlier library versions), with the library's connection limits,
redirect handling and JSON encoding, and no import of the library: ``import openai`` alone costs
about 0.3 s of CPU at start-up (its typed models), more than the rest of a run's imports.

A failure is raised as an :class:`~agentlab.model.openai_wire.Attempt`, classified exactly as
:func:`~agentlab.model.openai_wire.classify` classifies the library's exception for the same
failure (same error class, sentence, retryability and ``Retry-After``), so a retry and the final
error read the same on either path. Streams, and calls to the OpenAI API itself (no base URL: the
library's credentials and environment handling apply), still go through the library.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
from collections.abc import Mapping
from typing import Any

try:  # the transport of the installed openai library (httpx2 from its 3.x line on, httpx before)
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - depends on the installed library version
    import httpx as _httpx  # type: ignore[no-redef]

import agentlab.model.openai_wire as wire
from agentlab.model.base import ModelTimeout

#: The openai library's connection limits (its ``DEFAULT_CONNECTION_LIMITS``).
CONNECTION_LIMITS = _httpx.Limits(max_connections=1000, max_keepalive_connections=100)
#: Environment variables only the library interprets (extra headers, other credentials): when one is
#: set, every call goes through the library so that it still applies.
LIBRARY_ONLY_ENV = ("OPENAI_CUSTOM_HEADERS", "OPENAI_ADMIN_KEY")


def plain_post_applies(base_url: str | None) -> bool:
    """Whether calls to ``base_url`` go out as plain POSTs: a server was named, and no variable of
    :data:`LIBRARY_ONLY_ENV` asks for what only the library does.
    """
    return base_url is not None and not any(os.environ.get(name) for name in LIBRARY_ONLY_ENV)


def _request_errors() -> tuple[type[BaseException], ...]:
    """What the library turns into ``APIConnectionError`` (its ``request_exceptions``)."""
    errors: tuple[type[BaseException], ...] = (_httpx.RequestError, ssl.SSLError)
    anyio = sys.modules.get("anyio")
    end_of_stream = getattr(anyio, "EndOfStream", None)
    return (*errors, end_of_stream) if isinstance(end_of_stream, type) else errors


def status_failure(status: int, text: str, headers: Mapping[str, str]) -> wire.Attempt:
    """The :class:`~agentlab.model.openai_wire.Attempt` of an HTTP error answer, read as the library
    reads it (a JSON body's ``error`` object, else the body text).
    """
    body: Any = text.strip()
    try:
        body = json.loads(body)
    except ValueError:
        pass
    data = body.get("error", body) if isinstance(body, Mapping) else body
    return wire.status_attempt(status, wire.error_detail(data, lambda: text), wire.retry_after(headers))


class PlainPoster:
    """``POST {base_url}/chat/completions`` with a bearer key; one per event loop (an HTTP pool must
    not cross loops).
    """

    def __init__(self, base_url: str, api_key: str, timeout: float) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json",
                   "Accept": "application/json"}
        # The two identity headers the library adds from the environment when they are set.
        for header, name in (("OpenAI-Organization", "OPENAI_ORG_ID"), ("OpenAI-Project", "OPENAI_PROJECT_ID")):
            if os.environ.get(name):
                headers[header] = os.environ[name]
        self._client = _httpx.AsyncClient(headers=headers, timeout=timeout, limits=CONNECTION_LIMITS,
                                          follow_redirects=True)

    async def post(self, body: dict[str, Any]) -> str:
        """The answer's body text; an :class:`~agentlab.model.openai_wire.Attempt` for a failed attempt."""
        # The library's encoding of a request body (its openapi_dumps, as httpx's JSON).
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        try:
            response = await self._client.post(self.url, content=content)
            if response.status_code >= 400:
                raise status_failure(response.status_code, response.text, response.headers)
            return response.text
        except _httpx.TimeoutException:
            raise wire.Attempt(ModelTimeout, "timed out", None, retryable=True) from None
        except _request_errors() as exc:
            raise wire.connection_failure(exc) from exc

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


__all__ = ["CONNECTION_LIMITS", "LIBRARY_ONLY_ENV", "PlainPoster", "plain_post_applies", "status_failure"]
