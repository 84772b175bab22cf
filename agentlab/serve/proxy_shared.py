"""What every call through one proxy shares: the upstream (its client, credentials and model
objects), the conversation table, the message caches, the limits and the background work.

:class:`agentlab.serve.proxy.ProxyBackend` is this plus its routes; a call
(:class:`agentlab.serve.call.ProxyCall`) reads and updates it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from agentlab.model.openai_compat import OpenAICompatModel
from agentlab.serve.budget import SummaryBudgets
from agentlab.serve.conversations import MAX_CONVERSATION_BYTES, ConversationTable
from agentlab.serve.counting import MessageCounter
from agentlab.serve.handoff import parse_to_pieces, rebuild
from agentlab.serve.http import HTTPRequest
from agentlab.serve.store import MAX_CONVERSATIONS, ServeStore
from agentlab.serve.upstream import UpstreamClient, UpstreamError
from agentlab.serve.windows import FALLBACK_WINDOW, UpstreamWindows
from agentlab.serve.wire import RequestError, RequestLimits
from agentlab.session.duckdb import DuckDBSessionService

__all__ = ["FALLBACK_WINDOW", "MAX_MODELS", "ProxyShared"]

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

#: Bytes of a large body copied into shared memory at once (for the parsing process).
COPY_PIECE = 1 << 20
#: Upstream model objects (one per model name and upstream key) kept; the least recently used beyond it is closed.
MAX_MODELS = 64


class ProxyShared:
    """The state the calls of one proxy share (see the module docstring)."""

    def __init__(self, *, upstream: str, sessions: DuckDBSessionService, store: ServeStore,
                 upstream_api_key: str | None = None, forward_credentials: bool = True,
                 timeout: float = 60.0, max_recall_rounds: int = 3, context_window: int | None = None,
                 wait_for_ledger: bool = False, max_conversations: int = MAX_CONVERSATIONS,
                 limits: RequestLimits | None = None, max_models: int = MAX_MODELS,
                 max_conversation_bytes: int = MAX_CONVERSATION_BYTES, summary_budget: bool = True) -> None:
        if max_conversations < 1:
            raise ValueError(f"max_conversations must be >= 1, got {max_conversations}")
        self.upstream = upstream.rstrip("/")
        #: Whether an answer waits for its turn's ledger commit. Off (the default), an answer can
        #: reach the client a few milliseconds before its turn is on disk: a crash in between loses
        #: that turn from the ledger, and the client's next request (which carries its whole
        #: history) appends it again. Errors always wait for the commit.
        self.wait_for_ledger = wait_for_ledger
        self.sessions = sessions
        self.store = store
        self.upstream_api_key = upstream_api_key
        self.forward_credentials = forward_credentials
        self.timeout = timeout
        self.max_recall_rounds = max_recall_rounds
        self.context_window = context_window
        self.limits = limits or RequestLimits()
        self.max_models = max_models
        self.counter = MessageCounter()
        self.background: set[asyncio.Future[Any]] = set()
        #: Live conversations kept in memory (their ledger, prefix index and caches); the least
        #: recently used idle one beyond ``max_conversations`` (or ``max_conversation_bytes`` of text) is evicted and reloaded from the
        #: database when it comes back, so a long-running proxy's memory stays flat. An evicted
        #: conversation's next call reports no shared prefix with its previous one (``*_prefix_tokens`` = 0).
        self.table = ConversationTable(sessions, store, self.counter, self.background, max_conversations,
                                       max_conversation_bytes)
        self._client: UpstreamClient | None = None
        #: The worker process that parses large bodies (started on the first one).
        self._parser: ProcessPoolExecutor | None = None
        self._models: OrderedDict[tuple[str, str], OpenAICompatModel] = OrderedDict()
        #: The window of each model name, from the upstream's model list (see :mod:`agentlab.serve.windows`).
        self.windows = UpstreamWindows(max_names=max_models)
        #: What each tenant's summaries cost against what its calls saved (see :mod:`agentlab.serve.budget`).
        self.budgets = SummaryBudgets()
        #: Whether a summary waits until it can pay for itself (off: every summary the policy asks for is made).
        self.summary_budget = summary_budget
        #: Summary workers by ``id()`` of their model (dropped with the model).
        self._summary_workers: dict[int, Any] = {}
        #: Recent request bodies (by hash) -> (conversation, answered?, when): finds a retry's conversation.
        self.recent: OrderedDict[str, tuple[str, bool, float]] = OrderedDict()

    @property
    def max_conversations(self) -> int:
        """Conversations kept in memory (see :class:`ConversationTable`)."""
        return self.table.max_conversations

    @property
    def evictions(self) -> int:
        """Conversations evicted so far."""
        return self.table.evictions

    async def parse_elsewhere(self, raw: bytes | bytearray) -> dict[str, Any]:
        """:func:`parse_chat_request` of a large body in a worker process: the JSON decoder holds the
        interpreter lock for the whole parse (about 150 ms for 100,000 messages), which a thread
        would not give back to the event loop. ``RequestError`` as in this process.
        """
        if self._parser is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn, not fork: this process runs threads (DuckDB's, the writer's).
            self._parser = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        loop = asyncio.get_running_loop()
        # The body goes over in shared memory, copied in pieces: pickled into the pool's queue it was
        # one copy of tens of megabytes holding the interpreter lock (~170 ms for 60 MB).
        from multiprocessing.shared_memory import SharedMemory

        shared = SharedMemory(create=True, size=max(1, len(raw)))
        try:
            view, buffer = memoryview(raw), shared.buf
            assert buffer is not None
            for start in range(0, len(raw), COPY_PIECE):
                buffer[start:start + COPY_PIECE] = view[start:start + COPY_PIECE]
                await asyncio.sleep(0)  # let other calls run between pieces
            del view, buffer  # SharedMemory.close refuses while a view of its buffer lives
            handoff, error = await loop.run_in_executor(self._parser, parse_to_pieces, shared.name, len(raw),
                                                        self.limits.max_messages)
        finally:
            shared.close()
            shared.unlink()
        if handoff is None:
            message, status, param, code = error
            raise RequestError(message, status=status, param=param, code=code)
        # Rebuilt a piece at a time in a thread: unpickled whole (the pool's way) it was one call of
        # tens of megabytes holding the interpreter lock (see agentlab.serve.handoff).
        return await asyncio.to_thread(rebuild, handoff)

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``work`` in the background (``settle`` waits for it)."""
        task = asyncio.ensure_future(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    def client(self) -> UpstreamClient:
        """The pooled HTTP client to the upstream (made on first use, on the serving loop)."""
        if self._client is None:
            self._client = UpstreamClient(self.upstream, timeout=self.timeout)
        return self._client

    def upstream_headers(self, request: HTTPRequest) -> dict[str, str]:
        """The headers of a request sent upstream for ``request`` (its credentials, never the client's others)."""
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.upstream_api_key:
            headers["authorization"] = f"Bearer {self.upstream_api_key}"
        elif self.forward_credentials and request.headers.get("authorization"):
            headers["authorization"] = request.headers["authorization"]
        return headers

    async def model(self, name: str, request: HTTPRequest) -> OpenAICompatModel:
        """The upstream as an agentlab model (it makes the summaries) with the key this caller's calls
        go upstream with. Its window is ``context_window``, else what the upstream's model list
        states (:class:`~agentlab.serve.windows.UpstreamWindows`: one route, fetched at most every
        few minutes however many names); at most ``max_models`` are kept (the least recently used
        is closed beyond that), so random keys cannot grow memory.
        """
        authorization = self.upstream_headers(request).get("authorization", "")
        api_key = authorization.removeprefix("Bearer ").strip() or "not-needed"
        key = (name, api_key)
        model = self._models.get(key)
        if model is not None:
            self._models.move_to_end(key)
            return model
        model = OpenAICompatModel(name, base_url=self.upstream, api_key=api_key,
                                  context_window=self.context_window, timeout=self.timeout)
        if self.context_window is None:  # else the model states it, and nothing is asked upstream
            model.info = await self.windows.of(name, lambda: self._model_list(request))
        self._models[key] = model
        while len(self._models) > self.max_models:
            _, old = self._models.popitem(last=False)
            worker = self._summary_workers.pop(id(old), None)
            self.spawn(self._close_model(old, worker))
        return model

    async def _model_list(self, request: HTTPRequest) -> bytes | None:
        """The upstream's ``GET /models`` body, with this caller's upstream credentials (``None`` on failure)."""
        try:
            resp = await self.client().request("GET", "/models", self.upstream_headers(request))
            raw = await resp.read()
        except (UpstreamError, ValueError):
            return None
        return raw if resp.status == 200 else None

    @staticmethod
    async def _close_model(model: OpenAICompatModel, worker: Any) -> None:
        with contextlib.suppress(Exception):
            if worker is not None:
                await worker.close()
            await model.aclose()

    def summary_worker(self, model: OpenAICompatModel, mechanisms: Sequence[Any]) -> Any:
        """The background summariser of an arm with a rolling summary (its policy given directly or
        held by its mechanism), one per upstream model; ``None`` for an arm without one.
        """
        from agentlab.summary import SummaryPolicy

        policy = next((p for p in (getattr(m, "policy", m) for m in mechanisms) if isinstance(p, SummaryPolicy)),
                      None)
        if policy is None:
            return None
        worker = self._summary_workers.get(id(model))
        if worker is None:
            from agentlab.summary import SummaryWorker
            from agentlab.summary.summarizer import Summarizer

            worker = self._summary_workers[id(model)] = SummaryWorker(self.sessions, Summarizer(model, policy), policy)
        return worker

    async def close_upstream(self) -> None:
        """Close the summary workers, the model objects and the upstream client."""
        for worker in self._summary_workers.values():
            await worker.close()
        for model in self._models.values():
            with contextlib.suppress(Exception):
                await model.aclose()
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._parser is not None:
            self._parser.shutdown(wait=False, cancel_futures=True)
            self._parser = None
