"""The server: configuration, routes, authentication, and starting it (blocking or in a thread).

Routes: ``POST /v1/chat/completions`` (streaming and not), ``GET /v1/models`` and
``/v1/models/{id}``, ``GET /health`` (also ``/healthz``). Bound to 127.0.0.1 unless told
otherwise; any other address needs an API key, which every route but the health check then asks for
(``Authorization: Bearer <key>``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import re
import signal
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from agentlab.serve.arms import get_arm
from agentlab.serve.conversations import MAX_CONVERSATION_BYTES
from agentlab.serve.http import (
    HEAD_TIMEOUT,
    IDLE_TIMEOUT,
    MAX_BODY_BYTES,
    HTTPRequest,
    HTTPResponse,
    HTTPServer,
    json_response,
)
from agentlab.serve.store import (
    DUCKDB_THREADS,
    FLUSH_INTERVAL,
    MAX_CONVERSATIONS,
    WRITER_NICE,
    ServeStore,
    background_writer,
)
from agentlab.serve.wire import MAX_MESSAGE_BYTES, MAX_MESSAGES, RequestError, RequestLimits, error_body
from agentlab.session.duckdb import DuckDBSessionService
from agentlab.session.duckdb_texts import TEXT_FILE_OVER

_T = TypeVar("_T")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: What a model id may hold (``org/name`` ids included; they go upstream percent-encoded).
VALID_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+/-]{0,255}")
#: Read-only routes of the call log (what ``report --url`` and ``serve_calls_df(url=...)`` read).
TABLE_PATHS = {"/v1/agentlab/calls": "serve_calls", "/v1/agentlab/exchanges": "serve_exchanges"}
CHAT_PATHS = ("/v1/chat/completions", "/v1/chat/completions/")
#: Default :attr:`ServeConfig.ledger_linger`, seconds.
LEDGER_LINGER = 0.2


def model_id_of(raw: str) -> str:
    """The model id of a ``/v1/models/{id}`` path (percent-decoded); ``RequestError`` for one that
    could name another path (dot segments, empty segments, characters outside a model id's).
    """
    model_id = unquote(raw)
    segments = model_id.split("/")
    if not VALID_MODEL_ID.fullmatch(model_id) or any(seg in ("", ".", "..") for seg in segments):
        raise RequestError(f"not a model id: {raw[:80]!r} (1-256 characters of A-Z a-z 0-9 . _ : @ + - /, "
                           "no empty or dot-only path segments)", param="model")
    return model_id


@dataclass(frozen=True)
class ServeConfig:
    """How to serve: which back end (``upstream`` + ``arm``, or ``agent``), where, and with what."""

    #: Proxy back end: the OpenAI base URL of the upstream (``http://host:port/v1``).
    upstream: str | None = None
    #: The arm whose projection decides what goes upstream (see :mod:`agentlab.serve.arms`).
    arm: str = "long_context"
    #: Agent back end: ``module:factory`` returning an ``LLMAgent`` (instead of ``upstream``).
    agent: str | None = None
    #: DuckDB file of the ledger and the call log.
    db: str = "serve.duckdb"
    host: str = "127.0.0.1"
    #: 0 = a free port.
    port: int = 0
    #: Required of clients when set (and required to bind anything but loopback).
    api_key: str | None = None
    #: More keys clients may use (``--api-key`` repeated); each key is its own tenant.
    api_keys: tuple[str, ...] = ()
    #: A file of keys, one a line (blank lines and ``#`` comments skipped), each its own tenant.
    api_key_file: str | None = None
    #: Key sent upstream; without one the client's ``Authorization`` is forwarded (unless
    #: ``api_key`` is set: then the client's header carries this server's key, not the upstream's).
    upstream_api_key: str | None = None
    #: Seconds an upstream call may take.
    timeout: float = 60.0
    #: Rounds of server-run tools (recall) per call before the model must answer.
    max_recall_rounds: int = 3
    #: Window assumed for the arm's triggers instead of what the upstream states.
    context_window: int | None = None
    #: Durable commits (see ``DuckDBSessionService``); ``False`` only for throwaway stores.
    fsync: bool = True
    #: Proxy back end: an answer waits until its turn is committed to the ledger (see
    #: ``ProxyBackend.wait_for_ledger``; errors always wait).
    wait_for_ledger: bool = False
    #: Proxy back end: conversations kept in memory, least recently used evicted beyond it (they
    #: are reloaded from the database when they come back; see ``ProxyBackend.max_conversations``).
    max_conversations: int = MAX_CONVERSATIONS
    #: Proxy back end: bytes of ledger text the idle conversations in memory may hold (least recently
    #: used evicted beyond it, like ``max_conversations``).
    max_conversation_bytes: int = MAX_CONVERSATION_BYTES
    #: Proxy back end: a summarising arm makes a summary only when its savings can pay for it
    #: (see :mod:`agentlab.serve.budget`); ``False`` makes every summary its policy asks for.
    summary_budget: bool = True
    #: Proxy back end: seconds a ledger commit waits for other conversations' events to join it
    #: (one DuckDB statement for all; see ``DuckDBSessionService.linger``). The commit runs while
    #: the request is upstream and after, so no answer waits for it (an error answer does, up to this long);
    #: the default gathers several calls of one client per commit. 0 with ``wait_for_ledger``.
    ledger_linger: float = LEDGER_LINGER
    #: Seconds the call log and the proxy's conversation index wait to be committed together (a
    #: ``kill -9`` loses at most this much of the call log; see :mod:`agentlab.serve.store`).
    flush_interval: float = FLUSH_INTERVAL
    #: Niceness of the thread that commits what nothing waits for (call rows, the proxy's ledger):
    #: 0-19, 0 = normal priority (Linux only; see ``agentlab.serve.store.background_writer``).
    writer_nice: int = WRITER_NICE
    #: Bytes a request body may hold (beyond it: 413).
    max_body_bytes: int = MAX_BODY_BYTES
    #: Proxy back end: messages a request may hold (beyond it: 413).
    max_messages: int = MAX_MESSAGES
    #: Proxy back end: bytes one message may hold as the ledger stores it (beyond it: 413).
    max_message_bytes: int = MAX_MESSAGE_BYTES
    #: Seconds a request head may take from its first byte (then the connection is closed).
    head_timeout: float = HEAD_TIMEOUT
    #: Seconds a connection may wait for a request, or a body take (then the connection is closed).
    idle_timeout: float = IDLE_TIMEOUT

    def keys(self) -> tuple[str, ...]:
        """Every key clients may use (``api_key``, ``api_keys``, then the key file's); ``ValueError``
        when the key file cannot be read or holds none.
        """
        found = [k for k in (self.api_key, *self.api_keys) if k]
        if self.api_key_file is not None:
            try:
                text = Path(self.api_key_file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"--api-key-file {self.api_key_file}: {exc}") from None
            from_file = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
            if not from_file:
                raise ValueError(f"--api-key-file {self.api_key_file} holds no key")
            found += from_file
        for key in found:
            if any(c.isspace() for c in key) or not key.isprintable():
                raise ValueError("an API key must be printable and without spaces")
        return tuple(dict.fromkeys(found))

    def warnings(self) -> list[str]:
        """What a user starting this configuration should know (printed at start by the command line)."""
        if self.keys():
            return []
        return [f"no --api-key: anyone who can connect to {self.host} reads every conversation's call log and "
                "recall exchanges (the text recall sent upstream) at /v1/agentlab/calls and /v1/agentlab/exchanges; "
                "on a machine shared with other users, give --api-key (one per user: each is its own tenant)"]

    def check(self) -> None:
        """``ValueError`` naming the first problem of this configuration."""
        if (self.upstream is None) == (self.agent is None):
            raise ValueError("give exactly one back end: --upstream URL (with --arm) or --agent module:factory")
        if self.upstream is not None:
            if not self.upstream.startswith(("http://", "https://")):
                raise ValueError(f"--upstream must be an http(s) URL, got {self.upstream!r}")
            get_arm(self.arm)
        keys = self.keys()  # a key file that cannot be read, or holds none, is refused at start-up
        if self.host not in LOOPBACK and not keys:
            raise ValueError(f"binding to {self.host} (not loopback) requires --api-key")
        RequestLimits(self.max_messages, self.max_message_bytes).check()
        if self.max_body_bytes < 1:
            raise ValueError(f"--max-body-bytes must be >= 1, got {self.max_body_bytes}")
        if self.head_timeout <= 0 or self.idle_timeout <= 0:
            raise ValueError("--head-timeout and --idle-timeout must be > 0")
        if self.max_recall_rounds < 0:
            raise ValueError("--max-recall-rounds must be >= 0")
        if self.max_conversations < 1:
            raise ValueError("--max-conversations must be >= 1")
        if self.max_conversation_bytes < 1:
            raise ValueError("--max-conversation-bytes must be >= 1")
        if self.timeout <= 0:
            raise ValueError("--timeout must be > 0")
        if not 0 <= self.ledger_linger <= 1:
            raise ValueError(f"--ledger-linger must be between 0 and 1 second, got {self.ledger_linger}")
        if not 0 <= self.flush_interval <= 60:
            raise ValueError(f"--flush-interval must be between 0 and 60 seconds, got {self.flush_interval}")
        if not 0 <= self.writer_nice <= 19:
            raise ValueError(f"--writer-nice must be between 0 and 19, got {self.writer_nice}")


class ServeApp:
    """The routes over one back end, with its ledger and call log."""

    def __init__(self, config: ServeConfig) -> None:
        config.check()
        self.config = config
        #: The keys clients may use (none: no key asked for).
        self.keys = config.keys()
        #: The commits nothing waits for, on one low-priority thread (see ``background_writer``).
        self.writer = background_writer(config.writer_nice)
        self.store = ServeStore(config.db, fsync=config.fsync, flush_interval=config.flush_interval,
                                write_executor=self.writer)
        # The proxy's ledger commits are off the answer's path (unless it waits for them); the agent
        # back end's are on it (its runner awaits each append), so they keep the default executor.
        off_path = config.upstream is not None and not config.wait_for_ledger
        # Long texts go to files beside the ledger, so DuckDB's checkpoints never rewrite them.
        self.sessions = DuckDBSessionService(config.db, fsync=config.fsync, threads=DUCKDB_THREADS,
                                             linger=config.ledger_linger if off_path else 0.0,
                                             append_executor=self.writer if off_path else None,
                                             text_file_over=None if config.db == ":memory:" else TEXT_FILE_OVER)
        self.backend: Any
        if config.upstream is not None:
            from agentlab.serve.proxy import ProxyBackend

            self.backend = ProxyBackend(
                upstream=config.upstream, arm=config.arm, sessions=self.sessions, store=self.store,
                upstream_api_key=config.upstream_api_key, forward_credentials=not self.keys,
                timeout=config.timeout, max_recall_rounds=config.max_recall_rounds,
                context_window=config.context_window, wait_for_ledger=config.wait_for_ledger,
                max_conversations=config.max_conversations, max_conversation_bytes=config.max_conversation_bytes,
                summary_budget=config.summary_budget,
                limits=RequestLimits(config.max_messages, config.max_message_bytes))
        else:
            from agentlab.serve.agent_backend import AgentBackend

            assert config.agent is not None
            self.backend = AgentBackend(config.agent, sessions=self.sessions, store=self.store)
        self.http = HTTPServer(self.handle, config.host, config.port, max_body_bytes=config.max_body_bytes,
                               head_timeout=config.head_timeout, idle_timeout=config.idle_timeout)

    async def start(self) -> None:
        """Bind the port."""
        await self.http.start()

    @property
    def base_url(self) -> str:
        """The OpenAI base URL clients use (``http://host:port/v1``)."""
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"http://{host}:{self.http.port}/v1"

    async def close(self) -> None:
        """Stop serving, finish pending work, close the stores."""
        await self.http.close()
        await self.backend.close()
        await self.sessions.close()
        await self.store.close()
        self.writer.shutdown(wait=False)

    def _authorised(self, request: HTTPRequest) -> bool:
        if not self.keys:
            return True
        sent = request.headers.get("authorization", "").encode("latin-1", "replace")
        # Every key compared, so the time taken does not say which one came close.
        matched = [hmac.compare_digest(sent, f"Bearer {key}".encode()) for key in self.keys]
        return any(matched)

    async def handle(self, request: HTTPRequest) -> HTTPResponse:
        """Route one request."""
        path = request.path
        if path in ("/health", "/healthz"):
            return json_response(200, {"status": "ok", "backend": self.backend.kind,
                                       "arm": self.config.arm if self.config.upstream else None})
        if not self._authorised(request):
            return json_response(401, error_body("missing or wrong API key (Authorization: Bearer <key>)",
                                                 "authentication_error", code="invalid_api_key"))
        if path in CHAT_PATHS:
            if request.method != "POST":
                return json_response(405, error_body(f"{request.method} is not allowed here; use POST",
                                                     "invalid_request_error"), {"allow": "POST"})
            return await self.backend.chat(request)
        if path in TABLE_PATHS and request.method == "GET":
            return await self._table(request, TABLE_PATHS[path])
        if path.rstrip("/") == "/v1/models" and request.method == "GET":
            return await self.backend.models(request)
        if path.startswith("/v1/models/") and request.method == "GET":
            try:
                model_id = model_id_of(path[len("/v1/models/"):])
            except RequestError as exc:
                return json_response(exc.status, exc.body(), {"x-should-retry": "false"})
            return await self.backend.models(request, model_id)
        return json_response(404, error_body(f"no route {request.method} {path}", "not_found"))


    async def _table(self, request: HTTPRequest, table: str) -> HTTPResponse:
        """A call-log table as JSON rows, read through the server's own connection (so it can be read
        while the server holds the database file): every row, or with API keys the caller's tenant's.
        The savings report is computed from these rows by the client (:mod:`agentlab.serve.analysis`).
        """
        await self.store.flush()
        sql, params = f"SELECT * FROM {table}", []
        if self.keys and self.config.upstream is not None:
            from agentlab.serve.conversation_keys import tenant_of

            sql += " WHERE tenant = ?"
            params.append(tenant_of(request.headers.get("authorization", ""), self.config.upstream.rstrip("/")))
        frame = await asyncio.to_thread(self.store.query, sql + " ORDER BY started_at", params)
        rows = json.loads(frame.to_json(orient="records", date_format="iso"))
        return json_response(200, {"object": "list", "table": table, "data": rows})


async def serve_forever(config: ServeConfig, ready: Any = None) -> None:
    """Serve until cancelled (``python -m agentlab.serve`` runs this); ``ready(app)`` once bound."""
    app = ServeApp(config)
    await app.start()
    stop = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
        # SIGTERM (a supervisor, ``timeout``) ends the server like Ctrl-C does: the queued writes are committed.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if ready is not None:
        ready(app)
    try:
        await stop.wait()
    finally:
        await app.close()


class ServeHandle:
    """A server running in a background thread with its own event loop (notebooks, tests).

    ``with start_server(ServeConfig(upstream=..., arm="compaction", db=...)) as server:`` then point a
    client at ``server.base_url``; ``server.calls()`` is the call log as a DataFrame.
    """

    def __init__(self, config: ServeConfig) -> None:
        config.check()
        self.config = config
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentlab-serve", daemon=True)
        self._thread.start()
        self.app: ServeApp = self.run(self._start())

    async def _start(self) -> ServeApp:
        app = ServeApp(self.config)
        await app.start()
        return app

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float | None = 120) -> _T:
        """Run ``coro`` on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL clients use."""
        return self.app.base_url

    @property
    def port(self) -> int:
        """The port it listens on."""
        return self.app.http.port

    def settle(self) -> None:
        """Wait until no call is in flight and pending summaries are written."""
        settle = getattr(self.app.backend, "settle", None)
        if settle is not None:
            self.run(settle())

    def calls(self) -> Any:
        """``serve_calls`` as a DataFrame, oldest first (after :meth:`settle`)."""
        self.settle()
        return self.app.store.query("SELECT * FROM serve_calls ORDER BY started_at")

    def ledger(self, conversation_id: str) -> list[Any]:
        """The ledger events of a conversation's current session (any tenant; proxy back end)."""
        self.settle()
        store = self.app.store
        found = [tuple(r) for r in store.query("SELECT tenant, session_id FROM serve_conversations "
                                               "WHERE conversation_id = ?", [conversation_id]).itertuples(index=False)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} conversations are called {conversation_id!r}")
        from agentlab.serve.conversations import APP_NAME

        tenant, session_id = found[0]
        session = self.run(self.app.sessions.get_session(APP_NAME, tenant, session_id))
        return list(session.events) if session is not None else []

    def stop(self) -> None:
        """Stop serving and release the port and the database file."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self.run(self.app.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> ServeHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_server(config: ServeConfig | None = None, **fields: Any) -> ServeHandle:
    """Start a server in a background thread: ``start_server(upstream=url, arm="compaction", db=path)``."""
    if config is None:
        config = ServeConfig(**fields)
    elif fields:
        raise TypeError("give a ServeConfig or its fields, not both")
    if isinstance(config.db, Path):
        config = ServeConfig(**{**config.__dict__, "db": str(config.db)})
    return ServeHandle(config)
