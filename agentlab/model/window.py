"""What an OpenAI-compatible server says about a model's context window.

Servers state the window in different places; we ask each of them once, cheaply, with a short
timeout, and take the first answer:

* ``GET <base>/models`` — vLLM lists ``max_model_len`` per model; OpenRouter and LM Studio list
  ``context_length`` (a few gateways say ``context_window``).
* ``GET <root>/props`` — the llama.cpp server: ``default_generation_settings.n_ctx`` (the window of
  one slot, i.e. of one request), else a top-level ``n_ctx``.
* ``POST <root>/api/show {"model": name}`` — Ollama: ``num_ctx`` in ``parameters`` when the model
  file sets it (that is what the server really uses), else ``model_info["<arch>.context_length"]``.
* ``GET <root>/api/v0/models`` — LM Studio's own API: ``loaded_context_length``, else
  ``max_context_length``.

``<root>`` is the base URL without its trailing ``/v1``. The first request that cannot connect at
all ends the probe: the server is unreachable, and the caller says so instead of guessing.

Nothing here guesses: when no endpoint names the model's window, :func:`probe_window` returns no
window and the caller either uses a window it knows for certain (the known-model table) or stops
with an error that names ``--context-window``.

Which window a run works with is decided here too, in one function: :func:`resolve_context_window`
takes what the caller knows, most specific first (a run's override such as
``RunOptions.context_window`` / ``--context-budget``, the agent's model, the summary model) and
returns the first one stated, else the caller's fallback. The runtime, the summary worker and
summariser, compaction's pressure path and the harness's prompt checks all ask it.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

#: Seconds one probe request may take; the whole probe is bounded by :data:`PROBE_BUDGET`.
PROBE_TIMEOUT = 3.0
#: Seconds all probe requests of one model may take together.
PROBE_BUDGET = 8.0


@dataclass
class ProbeResult:
    """The outcome of asking a server about one model."""

    #: Tokens the server states for the model, or ``None``.
    window: int | None = None
    #: Where the window came from, e.g. ``"server:/v1/models max_model_len"``.
    source: str = ""
    #: ``False`` when the server could not be reached at all (connection refused, DNS, timeout).
    reachable: bool = True
    #: Why it could not be reached (one short phrase), when ``reachable`` is false.
    unreachable_reason: str = ""
    #: 401 or 403 when the server refused the first request (a missing or wrong API key).
    refused_status: int | None = None
    #: The endpoints asked, in order (for error messages).
    tried: list[str] = field(default_factory=list)


class _Unreachable(Exception):
    pass


def _positive_int(value: Any) -> int | None:
    if type(value) is int:  # the common case, first (a bool is not an int here: its type is bool)
        return value if value > 0 else None
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def stated_window(source: Any) -> int:
    """The window ``source`` states: a positive int itself, a model's or ``ModelInfo``'s ``context_window``; else 0."""
    if source is None:
        return 0
    if isinstance(source, (int, str)):  # a tuple: ``int | str`` would be built anew at each call
        return _positive_int(source) or 0
    info = getattr(source, "info", source)
    return _positive_int(getattr(info, "context_window", None)) or 0


def resolve_context_window(*sources: Any, fallback: int = 0) -> int:
    """The first window stated by ``sources`` (in order; see :func:`stated_window`), else ``fallback``.

    Pass the most specific first: a run's override (``None`` when not set), then the models whose
    window applies. ``fallback`` is the policy's window for a custom model that states none (0:
    unknown).
    """
    for source in sources:
        window = stated_window(source)
        if window:
            return window
    return fallback


def server_root(base_url: str) -> str:
    """``http://host:port/v1`` → ``http://host:port`` (llama.cpp and Ollama serve their own API there)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _request(url: str, api_key: str | None, timeout: float,
             payload: dict[str, Any] | None = None) -> tuple[int, Any]:
    """HTTP status and JSON body of a GET (or POST of ``payload``); the body is ``None`` unless a 2xx JSON.

    Raises :class:`_Unreachable` when no HTTP answer came back at all.
    """
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="GET" if payload is None else "POST")
    request.add_header("accept", "application/json")
    if payload is not None:
        request.add_header("content-type", "application/json")
    if api_key and api_key != "not-needed":
        request.add_header("authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http(s) only)
            status, body = int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), None  # the server answered: it is there, it just has no such endpoint
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise _Unreachable(str(reason) if not isinstance(reason, TimeoutError) else "timed out") from exc
    except TimeoutError as exc:
        raise _Unreachable("timed out") from exc
    except (ConnectionError, OSError) as exc:
        raise _Unreachable(str(exc) or type(exc).__name__) from exc
    try:
        return status, json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return status, None


def _from_models_list(body: Any, model: str) -> tuple[int, str] | None:
    items = body.get("data") if isinstance(body, dict) else body
    if not isinstance(items, list):
        return None
    for item in items:
        if not isinstance(item, dict) or item.get("id") != model:
            continue
        for key in ("max_model_len", "context_length", "context_window"):
            window = _positive_int(item.get(key))
            if window:
                return window, key
    return None


def _from_props(body: Any) -> tuple[int, str] | None:
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    if isinstance(settings, dict):
        window = _positive_int(settings.get("n_ctx"))
        if window:
            return window, "default_generation_settings.n_ctx"
    window = _positive_int(body.get("n_ctx"))
    return (window, "n_ctx") if window else None


def _from_ollama_show(body: Any) -> tuple[int, str] | None:
    if not isinstance(body, dict):
        return None
    parameters = body.get("parameters")
    if isinstance(parameters, str):
        for line in parameters.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "num_ctx" and _positive_int(parts[1]):
                return int(parts[1]), "parameters num_ctx"
    info = body.get("model_info")
    if isinstance(info, dict):
        for key, value in info.items():
            if isinstance(key, str) and key.endswith(".context_length") and _positive_int(value):
                return int(value), f"model_info {key}"
    return None


def _from_lmstudio(body: Any, model: str) -> tuple[int, str] | None:
    items = body.get("data") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return None
    for item in items:
        if isinstance(item, dict) and item.get("id") == model:
            for key in ("loaded_context_length", "max_context_length"):
                window = _positive_int(item.get(key))
                if window:
                    return window, key
    return None


def probe_window(base_url: str, model: str, api_key: str | None = None, *,
                 timeout: float = PROBE_TIMEOUT, budget: float = PROBE_BUDGET) -> ProbeResult:
    """Ask the server at ``base_url`` for ``model``'s context window (see the module docstring)."""
    base = base_url.rstrip("/")
    root = server_root(base)
    suffix = base[len(root):] or ""
    probes: list[tuple[str, str, dict[str, Any] | None, Any]] = [
        (f"{base}/models", f"{suffix}/models", None, lambda b: _from_models_list(b, model)),
        (f"{root}/props", "/props", None, _from_props),
        (f"{root}/api/show", "/api/show", {"model": model}, _from_ollama_show),
        (f"{root}/api/v0/models", "/api/v0/models", None, lambda b: _from_lmstudio(b, model)),
    ]
    result = ProbeResult()
    deadline = time.monotonic() + budget
    for url, label, payload, read in probes:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        result.tried.append(label)
        try:
            status, body = _request(url, api_key, min(timeout, left), payload)
        except _Unreachable as exc:
            if len(result.tried) == 1:  # nothing answered at all
                result.reachable = False
                result.unreachable_reason = str(exc)
            break
        if len(result.tried) == 1 and status in (401, 403):
            result.refused_status = status
        found = read(body) if body is not None else None
        if found:
            result.window, key = found
            result.source = f"server:{label} {key}"
            return result
    return result


def server_problem(result: ProbeResult) -> str | None:
    """What stops every call to the server, as a phrase with its fix; ``None`` when it answers."""
    if not result.reachable:
        return f"cannot be reached ({result.unreachable_reason}); start it, or fix the URL in the model spec"
    if result.refused_status is not None:
        return (f"refused the API key (HTTP {result.refused_status} on {result.tried[0]}); "
                "set OPENAI_API_KEY to a key it accepts")
    return None


def check_server(base_url: str, api_key: str | None = None, timeout: float = PROBE_TIMEOUT) -> str | None:
    """:func:`server_problem` of one cheap ``GET <base>/models``."""
    result = ProbeResult(tried=["/models"])
    try:
        status, _ = _request(f"{base_url.rstrip('/')}/models", api_key, timeout)
    except _Unreachable as exc:
        result.reachable, result.unreachable_reason = False, str(exc)
    else:
        result.refused_status = status if status in (401, 403) else None
    return server_problem(result)
