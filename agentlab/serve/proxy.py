"""The proxy back end: any OpenAI-compatible upstream, with an arm's projection in between.

Per request: check the body (400 on anything malformed, nothing stored), find the conversation
(:mod:`agentlab.serve.keys`), bring its durable ledger up to date with the client's messages
(appended before anything goes upstream, so a failed call keeps the client's turn), project the
request with the arm's mechanisms, check the pairs and roles of what would go out (a failed check
sends the client's request unrewritten and records why), send, run the arm's own tools (recall)
server-side for a bounded number of rounds, answer the client, append the answer and record the
call in ``serve_calls``.

How a request relates to its conversation's ledger (its *ledger mode*, recorded per call):

* ``append``: it extends the ledger; the new messages are appended.
* ``repeat``: it is exactly the ledger (a retry after a failed attempt): nothing is appended.
* ``replay``: it is a strict prefix of the ledger (a retry after an attempt that succeeded, or
  a regeneration): nothing is appended and the answer is not recorded in the ledger.
* ``branch``: it diverges from the ledger (the client edited its history): the conversation moves
  to a new session seeded with the request; the old ledger stays as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import agentlab.serve.keys as keys
from agentlab.events import OBJ_COMPLETION, OBJ_TOOL_RESPONSE, OBJ_USER, Event, Message, Usage, new_id
from agentlab.model import tokens
from agentlab.model.base import CallRecord, ContextWindowUnknown, ModelInfo, observe_calls
from agentlab.model.openai_compat import OpenAICompatModel
from agentlab.runtime.tools import Tool, ToolContext, render_tool_result
from agentlab.serve.arms import Arm, get_arm
from agentlab.serve.http import HTTPRequest, HTTPResponse, json_response
from agentlab.serve.projection import CallerTool, project
from agentlab.serve.store import MAX_CONVERSATIONS, ServeStore
from agentlab.serve.upstream import UpstreamClient, UpstreamError, UpstreamResponse
from agentlab.serve.wire import (
    SSE_DONE,
    RequestError,
    canonical,
    chain_hashes,
    chunk,
    error_body,
    pairing_problem,
    parse_chat_request,
    sse,
    to_message,
    to_wire,
    tool_call_deltas,
    usage_dict,
)
from agentlab.session.base import FULL_SESSION_KEY, Session
from agentlab.session.duckdb import DuckDBSessionService

log = logging.getLogger(__name__)

APP_NAME = "agentlab-serve"
#: Window assumed for the arm's triggers when neither ``--context-window`` nor the upstream states one.
FALLBACK_WINDOW = 8192
#: Seconds within which the same request body again counts as a retry of the first.
RETRY_WINDOW = 600.0
#: A request header choosing another arm than the server's for one call (an unknown one is a 400).
ARM_HEADER = "x-agentlab-arm"
#: Request bodies remembered for that.
RECENT_BODIES = 10_000


@dataclass
class _Conversation:
    """What the server keeps in memory about one conversation (the ledger itself is durable)."""

    tenant: str
    id: str
    session: Session
    #: Chain hash of each ledger message, in ledger order.
    chain: list[str]
    #: Request unit of the latest user turn.
    unit: str
    #: The ledger as this server knows it: the session's events plus the writes still in flight.
    events: list[Event] = field(default_factory=list)
    #: The latest ledger write (each write starts after the one before: the ledger keeps its order).
    last_write: asyncio.Future[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: (chain hash, cumulative tokens) of the previous call's client and upstream messages.
    last_client: list[tuple[str, int]] = field(default_factory=list)
    last_upstream: list[tuple[str, int]] = field(default_factory=list)
    #: Request-body hashes of calls already answered (a repeat of one is a retry).
    answered: set[str] = field(default_factory=set)
    summary_task: asyncio.Task[Any] | None = None
    #: Calls holding this object (from finding the conversation to their end): never evicted meanwhile.
    users: int = 0
    #: The session is not stored yet: the next ledger write creates it (in the same commit).
    unborn: bool = False

    def evictable(self) -> bool:
        """No call uses it, no ledger write or summary is pending: it can be reloaded from disk as it is."""
        return (self.users == 0 and not self.lock.locked() and (self.last_write is None or self.last_write.done())
                and (self.summary_task is None or self.summary_task.done()))


class _UpstreamFailure(Exception):
    """An upstream call that did not produce a usable answer: the status and body to pass on."""

    def __init__(self, status: int, body: dict[str, Any], outcome: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("error", {}).get("message", outcome))
        self.status = status
        self.body = body
        self.outcome = outcome
        self.headers = headers or {}


def _openai_error(status: int, raw: bytes) -> dict[str, Any]:
    """An upstream error body in the OpenAI shape (vLLM's and plain-text bodies are wrapped)."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return data
    if isinstance(data, dict) and data.get("message"):
        return error_body(str(data["message"]), str(data.get("type") or "upstream_error"), code=status)
    text = raw.decode("utf-8", "replace").strip()[:300] or f"HTTP {status}"
    return error_body(f"upstream answered HTTP {status}: {text}", "upstream_error", code=status)


def _consume(future: asyncio.Future[None]) -> None:
    """Mark a background write's failure as seen (whoever needs it awaits the future itself)."""
    if not future.cancelled():
        future.exception()


def _prefix_tokens(previous: Sequence[tuple[str, int]], current: Sequence[tuple[str, int]]) -> int:
    """Tokens of the longest message prefix two calls share (what a provider's prefix cache can reuse)."""
    shared = 0
    for (a, _), (b, cum) in zip(previous, current, strict=False):
        if a != b:
            break
        shared = cum
    return shared


class ProxyBackend:
    """Serves ``/v1/chat/completions`` by forwarding to ``upstream`` under ``arm``."""

    kind = "proxy"

    def __init__(self, *, upstream: str, arm: str, sessions: DuckDBSessionService, store: ServeStore,
                 upstream_api_key: str | None = None, forward_credentials: bool = True,
                 timeout: float = 60.0, max_recall_rounds: int = 3, context_window: int | None = None,
                 wait_for_ledger: bool = False, max_conversations: int = MAX_CONVERSATIONS) -> None:
        if max_conversations < 1:
            raise ValueError(f"max_conversations must be >= 1, got {max_conversations}")
        self.upstream = upstream.rstrip("/")
        #: Live conversations kept in memory (their ledger, prefix index and caches); the least
        #: recently used idle one beyond this is evicted and reloaded from the database when it
        #: comes back, so a long-running proxy's memory stays flat. An evicted conversation's next
        #: call reports no shared prefix with its previous one (``*_prefix_tokens`` = 0).
        self.max_conversations = max_conversations
        #: Conversations evicted so far.
        self.evictions = 0
        #: Whether an answer waits for its turn's ledger commit. Off (the default), an answer can
        #: reach the client a few milliseconds before its turn is on disk: a crash in between loses
        #: that turn from the ledger, and the client's next request (which carries its whole
        #: history) appends it again. Errors always wait for the commit.
        self.wait_for_ledger = wait_for_ledger
        self.arm = get_arm(arm)
        self._arms: dict[str, Arm] = {self.arm.name: self.arm}
        self.sessions = sessions
        self.store = store
        self.upstream_api_key = upstream_api_key
        self.forward_credentials = forward_credentials
        self.timeout = timeout
        self.max_recall_rounds = max_recall_rounds
        self.context_window = context_window
        self._client: UpstreamClient | None = None
        self._live: OrderedDict[tuple[str, str], _Conversation] = OrderedDict()
        self._live_lock = asyncio.Lock()
        self._models: dict[tuple[str, str], OpenAICompatModel] = {}
        #: Summary workers by ``id()`` of their model (the models live as long as this backend).
        self._summary_workers: dict[int, Any] = {}
        self._token_cache: dict[str, int] = {}
        self._canon_cache: dict[int, tuple[dict[str, Any], str]] = {}
        self._request_canon: dict[tuple[Any, Any, Any, Any], str] = {}
        self._wire_cache: dict[int, tuple[Message, dict[str, Any]]] = {}
        #: Recent request bodies (by hash) -> (conversation, answered?, when): finds a retry's conversation.
        self._recent: OrderedDict[str, tuple[str, bool, float]] = OrderedDict()
        self._background: set[asyncio.Future[Any]] = set()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    # ------------------------------------------------------------------ plumbing

    def client(self) -> UpstreamClient:
        """The pooled HTTP client to the upstream (made on first use, on the serving loop)."""
        if self._client is None:
            self._client = UpstreamClient(self.upstream, timeout=self.timeout)
        return self._client

    async def close(self) -> None:
        """Let pending writes and summaries finish, then close the upstream client and the summary workers."""
        await self.settle()
        for worker in self._summary_workers.values():
            await worker.close()
        for model in self._models.values():
            with contextlib.suppress(Exception):
                await model.aclose()
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _upstream_headers(self, request: HTTPRequest) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.upstream_api_key:
            headers["authorization"] = f"Bearer {self.upstream_api_key}"
        elif self.forward_credentials and request.headers.get("authorization"):
            headers["authorization"] = request.headers["authorization"]
        return headers

    def _message_tokens(self, canon: str, message: Message) -> int:
        cached = self._token_cache.get(canon)
        if cached is None:
            if len(self._token_cache) > 100_000:
                self._token_cache.clear()
            cached = self._token_cache[canon] = tokens.count_message(message)
        return cached

    def wire_of(self, m: Message) -> dict[str, Any]:
        """:func:`to_wire` of ``m``, the same dict every time for a message that lives on (a ledger
        message), so its canonical text and token count are computed once, not every call.
        """
        cached = self._wire_cache.get(id(m))
        if cached is not None and cached[0] is m:
            return cached[1]
        if len(self._wire_cache) > 200_000:
            self._wire_cache.clear()
        wire = to_wire(m)
        self._wire_cache[id(m)] = (m, wire)
        return wire

    def canonical_of(self, m: dict[str, Any]) -> str:
        """:func:`canonical` of ``m``, remembered for message objects that live on (the ledger's raw messages)."""
        cached = self._canon_cache.get(id(m))
        if cached is not None and cached[0] is m:
            return cached[1]
        if len(self._canon_cache) > 200_000:
            self._canon_cache.clear()
        text = self.canonical_of_request(m)  # a new copy of a known message (compaction's) hits by content
        self._canon_cache[id(m)] = (m, text)
        return text

    def canonical_of_request(self, m: dict[str, Any]) -> str:
        """:func:`canonical` of a message a client sent, remembered by what it depends on when that
        is hashable (role, text, answered call id, and each tool call's id, name and arguments): a
        client sends its whole history every call, so without this every earlier message is
        normalised again each time.
        """
        content = m.get("content")
        if not (content is None or isinstance(content, str)):
            return canonical(m)
        calls: tuple[Any, ...] = ()
        if m.get("tool_calls"):
            try:  # (id, name, arguments) of each call, when all are plain strings
                calls = tuple((c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"])
                hash(calls)
            except (KeyError, TypeError):
                return canonical(m)
        key = (m.get("role"), content, m.get("tool_call_id"), calls)
        text = self._request_canon.get(key)
        if text is None:
            if len(self._request_canon) > 100_000:
                self._request_canon.clear()
            text = self._request_canon[key] = canonical(m)
        return text

    def _count(self, messages: Sequence[dict[str, Any]], tool_list: Sequence[dict[str, Any]] | None,
               seed: str, canon: Sequence[str] | None = None,
               chain: Sequence[str] | None = None) -> tuple[int, list[tuple[str, int]]]:
        """Prompt tokens (local estimate, the same counter on both sides) and the cumulative chain
        (``chain``: the messages' chain hashes from ``seed``, when already known).
        """
        canon = canon if canon is not None else [self.canonical_of(m) for m in messages]
        chain = chain if chain is not None else chain_hashes(messages, seed, canon)
        total = 0
        cumulative: list[tuple[str, int]] = []
        for h, text, m in zip(chain, canon, messages, strict=True):
            counted = self._token_cache.get(text)
            if counted is None:
                counted = self._message_tokens(text, to_message(m))
            total += counted
            cumulative.append((h, total))
        return total + tokens.REPLY_PRIMING_TOKENS + self._tool_tokens(tool_list), cumulative

    def _tool_tokens(self, tool_list: Sequence[dict[str, Any]] | None) -> int:
        if not tool_list:
            return 0
        key = json.dumps(tool_list, sort_keys=True)
        counted = self._token_cache.get(key)
        if counted is None:
            counted = self._token_cache[key] = tokens.count_tools(list(tool_list))
        return counted

    async def _model(self, name: str, request: HTTPRequest) -> OpenAICompatModel:
        """The upstream as an agentlab model (it makes the summaries) with the key this caller's calls
        go upstream with; its window resolved once.
        """
        authorization = self._upstream_headers(request).get("authorization", "")
        api_key = authorization.removeprefix("Bearer ").strip() or "not-needed"
        model = self._models.get((name, api_key))
        if model is None:
            model = OpenAICompatModel(name, base_url=self.upstream, api_key=api_key,
                                      context_window=self.context_window, timeout=self.timeout)
            try:
                await asyncio.to_thread(model.resolve_info)
            except ContextWindowUnknown:
                model.info = ModelInfo(name, FALLBACK_WINDOW, "agentlab-serve fallback")
            self._models[(name, api_key)] = model
        return model

    def _summary_worker(self, model: OpenAICompatModel, mechanisms: Sequence[Any]) -> Any:
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

    # ------------------------------------------------------------------ conversations

    async def _conversation(self, tenant: str, conversation_id: str, key_source: str) -> _Conversation:
        key = (tenant, conversation_id)
        async with self._live_lock:
            conv = self._live.get(key)
            if conv is not None:
                self._live.move_to_end(key)
                conv.users += 1
                return conv
            session_id = await self.store.session_of(tenant, conversation_id)
            session = None
            if session_id is not None:
                session = await self.sessions.get_session(APP_NAME, tenant, session_id)
            created = session is None
            if session is None:
                session = Session(app_name=APP_NAME, user_id=tenant, id=conversation_id)
                self.store.save_conversation(tenant, conversation_id, session.id, key_source)
            chain = [e.metadata["chain"] for e in session.events if "chain" in e.metadata]
            unit = next((e.request_id for e in reversed(session.events) if e.role == "user"), "")
            conv = self._live[key] = _Conversation(tenant, conversation_id, session, chain, unit,
                                                   events=list(session.events), users=1)
            if created:
                self._create(conv)
            else:
                self.store.remember(tenant, conversation_id, session.id, chain)
            self._evict()
            return conv

    def _evict(self) -> None:
        """Drop the least recently used idle conversations beyond ``max_conversations`` from memory."""
        while len(self._live) > self.max_conversations:
            key = next((k for k, c in self._live.items() if c.evictable()), None)
            if key is None:
                return  # every one is busy: over the bound until some call ends
            conv = self._live.pop(key)
            self.store.forget(*key)
            for event in conv.events:  # the caches keyed by its messages' ids would keep them alive
                if event.message is not None:
                    self._wire_cache.pop(id(event.message), None)
                raw = event.metadata.get("raw")
                if raw is not None:
                    self._canon_cache.pop(id(raw), None)
            self.evictions += 1

    @staticmethod
    def _create(conv: _Conversation) -> None:
        """Have the conversation's next ledger write create its session (one commit for both)."""
        conv.unborn = True

    async def _branch(self, conv: _Conversation) -> None:
        """Move the conversation to a fresh session (its history diverged from the ledger)."""
        session_id = f"{conv.id}~{uuid.uuid4().hex[:8]}"
        conv.session = Session(app_name=APP_NAME, user_id=conv.tenant, id=session_id)
        conv.chain, conv.unit, conv.events = [], "", []
        self._create(conv)
        self.store.save_conversation(conv.tenant, conv.id, session_id, "branch")

    @staticmethod
    def _event(conv: _Conversation, message: dict[str, Any], chain_hash: str, *, author: str,
               usage: Usage | None = None, token_count: int | None = None) -> Event:
        """The ledger event of one message, added to the conversation's in-memory ledger (see :meth:`_write`)."""
        msg = to_message(message)
        if msg.role == "user":
            conv.unit = new_id("unit-")
        obj = OBJ_USER if msg.role == "user" else OBJ_TOOL_RESPONSE if msg.role == "tool" else OBJ_COMPLETION
        metadata: dict[str, Any] = {"chain": chain_hash}
        if message != to_wire(msg):
            # Fields the agentlab message cannot hold (content parts, reasoning, names...): kept, so
            # the message goes upstream again exactly as the client sent it.
            metadata["raw"] = message
        event = Event(author=author, choices=[msg], object=obj, invocation_id=conv.unit, request_id=conv.unit,
                      usage=usage, metadata=metadata,
                      token_count=tokens.count_message(msg) if token_count is None else token_count)
        conv.chain.append(chain_hash)
        conv.events.append(event)
        return event

    def _write(self, conv: _Conversation, events: Sequence[Event]) -> asyncio.Future[None]:
        """Append ``events`` to the durable ledger in the background, after the conversation's previous write.

        One write's events go in one group commit, with other conversations' writes of the same
        moment (see ``ServeConfig.ledger_linger``); a new session's row goes in with its first write.
        Callers that need the events durable await the returned future (an error answer does, and
        every answer with ``wait_for_ledger``).
        """
        session, create, conv.unborn = conv.session, conv.unborn, False

        async def write() -> None:
            await self.sessions.append_events(session, events, create=create)

        return self._chain(conv, write())

    def _chain(self, conv: _Conversation, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """Run ``work`` after the conversation's previous write (which must have succeeded)."""
        previous = conv.last_write

        async def run() -> None:
            if previous is not None:
                try:
                    await previous  # a failed earlier write fails this one too: the ledger never has a gap
                except BaseException:
                    work.close()
                    raise
            await work

        task = asyncio.ensure_future(run())
        conv.last_write = task
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_consume)
        return task

    # ------------------------------------------------------------------ the route

    async def chat(self, request: HTTPRequest) -> HTTPResponse:
        """``POST /v1/chat/completions``."""
        started = time.perf_counter()
        started_at = time.time()
        try:
            body = parse_chat_request(request.body)
            explicit = keys.explicit_id(request.headers, body)
            arm = self._arm_of(request)
        except RequestError as exc:
            return json_response(exc.status, exc.body(), {"x-should-retry": "false"})
        tenant = keys.tenant_of(request.headers.get("authorization", ""), self.upstream)
        messages: list[dict[str, Any]] = body["messages"]
        canon = [self.canonical_of_request(m) for m in messages]
        chain = chain_hashes(messages, tenant, canon)
        body_hash = chain[-1] + json.dumps({k: v for k, v in body.items() if k != "messages"}, sort_keys=True,
                                           default=str)
        retry_header = request.headers.get("x-stainless-retry-count", "0")
        retried = retry_header.isdigit() and int(retry_header) > 0
        recent = self._recent.get(body_hash)
        if explicit is not None:
            conversation_id, key_source = explicit
        elif recent is not None and (retried or not recent[1]) and time.time() - recent[2] < RETRY_WINDOW:
            # The same body again: a retry (the client says so, or the earlier attempt failed). A first
            # turn has no prefix to match yet, so without this its retry would start a new conversation.
            conversation_id, key_source = recent[0], "retry"
        else:
            match = await self.store.match_prefix(tenant, chain, keys.min_prefix_length(messages))
            if match.conversation_id is not None:
                conversation_id, key_source = match.conversation_id, "prefix"
            else:
                conversation_id = keys.new_conversation_id()
                key_source = "new-ambiguous" if match.ambiguous else "new"
        conv = await self._conversation(tenant, conversation_id, key_source)
        self._recent[body_hash] = (conversation_id, False, time.time())
        self._recent.move_to_end(body_hash)
        while len(self._recent) > RECENT_BODIES:
            self._recent.popitem(last=False)
        self._in_flight += 1
        self._idle.clear()
        try:
            await conv.lock.acquire()
        except BaseException:
            self._call_done(conv)
            raise
        call = _Call(self, request, body, conv, chain, key_source, started, started_at, arm)
        call.body_hash, call.row["retry"] = body_hash, retried or body_hash in conv.answered
        call.canon = canon
        call.on_done = functools.partial(self._call_done, conv)
        try:
            return await call.run()
        except BaseException as exc:
            await call.finish(status=500, outcome="internal_error", error=f"{type(exc).__name__}: {exc}")
            raise

    def _arm_of(self, request: HTTPRequest) -> Arm:
        """The arm of one call: the server's, or the one the ``X-Agentlab-Arm`` header names."""
        name = request.headers.get(ARM_HEADER)
        if name is None:
            return self.arm
        arm = self._arms.get(name)
        if arm is None:
            try:
                arm = self._arms[name] = get_arm(name)
            except ValueError as exc:
                raise RequestError(f"header {ARM_HEADER}: {exc}", param=ARM_HEADER) from None
        return arm

    def _call_done(self, conv: _Conversation) -> None:
        conv.users -= 1
        if len(self._live) > self.max_conversations:
            self._evict()
        self._in_flight -= 1
        if not self._in_flight:
            self._idle.set()

    async def settle(self) -> None:
        """Wait until no call is in flight and every ledger write, summary and call row is committed."""
        await self._idle.wait()
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        await self.store.flush()

    async def models(self, request: HTTPRequest, model_id: str | None = None) -> HTTPResponse:
        """``GET /v1/models`` (and ``/v1/models/{id}``), answered by the upstream."""
        path = "/models" + (f"/{model_id}" if model_id else "")
        try:
            resp = await self.client().request("GET", path, self._upstream_headers(request))
            raw = await resp.read()
        except UpstreamError as exc:
            return json_response(502, error_body(f"upstream {self.upstream} unreachable: {exc}", "upstream_error"))
        if resp.status != 200:
            return json_response(resp.status, _openai_error(resp.status, raw))
        return HTTPResponse(200, raw)


class _Call:
    """One chat-completions call through the proxy, from ledger update to the recorded row."""

    def __init__(self, proxy: ProxyBackend, request: HTTPRequest, body: dict[str, Any], conv: _Conversation,
                 chain: list[str], key_source: str, started: float, started_at: float, arm: Arm) -> None:
        self.proxy = proxy
        self.arm = arm
        self.request = request
        self.body = body
        self.conv = conv
        self.chain = chain
        self.key_source = key_source
        self.started = started
        self.stream = bool(body.get("stream"))
        self.client_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.row: dict[str, Any] = {
            "call_id": new_id("call-"), "started_at": started_at, "tenant": conv.tenant, "purpose": "answer",
            "conversation_id": conv.id, "key_source": key_source, "arm": arm.name,
            "model": body.get("model"), "stream": self.stream, "client_messages": len(body["messages"]),
            "upstream_calls": 0, "recall_rounds": 0, "upstream_ms": 0.0, "events_appended": 0,
        }
        self.usage = [0, 0, 0]
        self.ledger_mode = "append"
        self.current: Event | None = None
        self.inv: Any = None
        self.server_tools: dict[str, Tool] = {}
        #: The server-run tool exchanges of this call (``serve_exchanges`` rows).
        self.exchanges: list[dict[str, Any]] = []
        self.headers = {keys.CONVERSATION_HEADER: conv.id, keys.KEY_SOURCE_HEADER: key_source,
                        "x-agentlab-arm": arm.name, "x-agentlab-call-id": self.row["call_id"]}
        self._finished = False
        self._recorded = False
        self._answer_hash = ""
        self._answer_wire: dict[str, Any] = {}
        self._answer: dict[str, Any] | None = None
        self.on_done: Callable[[], None] | None = None
        self.body_hash = ""
        self._turn_write: asyncio.Future[None] | None = None
        self.canon: list[str] | None = None
        self._worker: Any = None
        self._window = FALLBACK_WINDOW
        self._stream_result: dict[str, Any] = {"status": 200, "outcome": "client_disconnected"}
        #: The upstream body when it is the client's own, unchanged (sent as the client's bytes).
        self._verbatim: dict[str, Any] | None = None
        self.view: Session = conv.session

    # -------------------------------------------------------------- ledger

    async def _update_ledger(self) -> None:
        conv, chain, messages = self.conv, self.chain, self.body["messages"]
        if conv.summary_task is not None:
            with contextlib.suppress(Exception):
                await conv.summary_task
            conv.summary_task = None
        shared = 0
        for a, b in zip(conv.chain, chain, strict=False):
            if a != b:
                break
            shared += 1
        if shared == len(conv.chain):
            self.ledger_mode = "append" if len(chain) > shared else "repeat"
        elif shared == len(chain):
            self.ledger_mode = "replay"
        else:
            self.ledger_mode = "branch"
            await self.proxy._branch(conv)
            shared = 0
        canon = self.canon or [canonical(m) for m in messages]
        new = [self.proxy._event(conv, messages[i], chain[i], author="client",
                                 token_count=self.proxy._message_tokens(canon[i], to_message(messages[i])))
               for i in range(shared, len(chain))]
        self.row["events_appended"] += len(new)
        # Durable in the background while the request is projected and sent; awaited before answering.
        self._turn_write = self.proxy._write(conv, new)
        # The ledger event of the latest message: the projection's current input.
        seen = cut = 0
        for cut, event in enumerate(conv.events, 1):  # noqa: B007 - cut is used after the loop
            seen += "chain" in event.metadata
            if seen == len(chain):
                break
        self.current = conv.events[cut - 1]
        s = conv.session
        # The projection reads this view: the ledger with the writes in flight (up to the current
        # message when the request replays an earlier point).
        self.view = Session(app_name=s.app_name, user_id=s.user_id, id=s.id, events=conv.events[:cut],
                            state=s.state, summaries=s.summaries, created_at=s.created_at)
        self.row["ledger_mode"] = self.ledger_mode
        self.row["session_id"] = conv.session.id

    # -------------------------------------------------------------- the upstream request

    async def _upstream_body(self) -> dict[str, Any]:
        body = dict(self.body)
        metadata = body.get("metadata")
        if isinstance(metadata, dict) and keys.BODY_FIELD in metadata:
            metadata = {k: v for k, v in metadata.items() if k != keys.BODY_FIELD}
            if metadata:
                body["metadata"] = metadata
            else:
                body.pop("metadata")
        if self.stream:
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        if not self.arm.rewrites:
            if body == self.body:
                self._verbatim = body  # goes upstream as the bytes the client sent (see _send)
            return body
        model = await self.proxy._model(str(body.get("model") or "default"), self.request)
        messages = self.body["messages"]
        instruction = "\n\n".join(to_message(m).content for m in messages if m["role"] in ("system", "developer"))
        assert self.current is not None
        try:
            mechanisms = self.arm.mechanisms(model)
            worker = self.proxy._summary_worker(model, mechanisms)
            with observe_calls(functools.partial(self._record_model_call, "projection")):
                # A mechanism that calls the model while projecting (a peer policy's summariser) is billed here.
                result, self.inv = await project(
                    model=model, instruction=instruction, caller_tools=self.body.get("tools") or [],
                    mechanisms=mechanisms, session=self.view, session_service=self.proxy.sessions,
                    current=self.current, context_window=model.info.context_window, summary_worker=worker)
            request, tools = result.request, list(result.draft.tools)
            self._worker, self._window = worker, model.info.context_window
        except Exception as exc:  # a failing mechanism must not take the call down: send it unrewritten
            log.warning("projection failed (%s: %s); sending the request unrewritten", type(exc).__name__, exc)
            self.row["check_error"] = f"projection failed: {type(exc).__name__}: {exc}"
            return body
        raw = {id(e.message): e.metadata["raw"] for e in self.view.events
               if e.message is not None and "raw" in e.metadata}
        projected = [raw.get(id(m)) or self.proxy.wire_of(m) for m in request.messages]
        problem = pairing_problem(projected)
        if problem is not None:
            self.row["check_error"] = problem
            log.warning("projected request failed the check (%s); sending it unrewritten", problem)
            return body
        body["messages"] = projected
        declarations = [t.declaration() for t in tools]
        if declarations:
            body["tools"] = declarations
        self.server_tools = {t.name: t for t in tools if not isinstance(t, CallerTool)}
        if self.server_tools:
            body["parallel_tool_calls"] = False
        return body

    def _measure(self, upstream: dict[str, Any]) -> None:
        conv, proxy = self.conv, self.proxy
        client_tokens, client_chain = proxy._count(self.body["messages"], self.body.get("tools"), conv.tenant,
                                                   self.canon, self.chain)
        if upstream["messages"] is self.body["messages"] and upstream.get("tools") == self.body.get("tools"):
            up_tokens, up_chain = client_tokens, client_chain  # sent as the client sent it
        else:
            up_tokens, up_chain = proxy._count(upstream["messages"], upstream.get("tools"), conv.tenant)
        self.row.update(client_prompt_tokens=client_tokens, upstream_prompt_tokens=up_tokens,
                        upstream_messages=len(upstream["messages"]),
                        client_prefix_tokens=_prefix_tokens(conv.last_client, client_chain),
                        upstream_prefix_tokens=_prefix_tokens(conv.last_upstream, up_chain))
        conv.last_client, conv.last_upstream = client_chain, up_chain

    async def _run_server_tools(self, calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run the arm's own tools the model called; each exchange is kept for ``serve_exchanges``."""
        results = []
        for c in calls:
            fn = c["function"]
            tool = self.server_tools[fn["name"]]
            began, began_at, error = time.perf_counter(), time.time(), None
            try:
                args = json.loads(fn.get("arguments") or "{}")
                if not isinstance(args, dict):
                    raise ValueError("arguments must be a JSON object")
                content = render_tool_result(await tool.call(args, ToolContext(self.inv, c["id"], fn["name"])))
            except Exception as exc:  # a failing tool is a result the model can read
                content = error = f"error: {type(exc).__name__}: {exc}"
            results.append({"role": "tool", "tool_call_id": c["id"], "content": content})
            self.exchanges.append({
                "call_id": self.row["call_id"], "started_at": began_at, "tenant": self.conv.tenant,
                "conversation_id": self.conv.id, "session_id": self.conv.session.id, "arm": self.arm.name,
                "round": self.row["recall_rounds"] + 1, "tool_call_id": c["id"], "tool": fn["name"],
                "arguments": fn.get("arguments") or "", "result": content, "result_tokens": tokens.count_text(content),
                "latency_ms": (time.perf_counter() - began) * 1000, "error": error})
        return results

    def _split_calls(self, calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        server = [c for c in calls if (c.get("function") or {}).get("name") in self.server_tools]
        client = [c for c in calls if (c.get("function") or {}).get("name") not in self.server_tools]
        return server, client

    def _next_round(self, upstream: dict[str, Any], assistant: dict[str, Any], calls: list[dict[str, Any]],
                    results: list[dict[str, Any]]) -> None:
        self.row["recall_rounds"] += 1
        upstream["messages"] = [*upstream["messages"], {"role": "assistant", "content": assistant.get("content"),
                                                        "tool_calls": calls}, *results]
        if self.row["recall_rounds"] >= self.proxy.max_recall_rounds:
            # The last round: the model has to answer with what it has (or call the client's tools).
            kept = [t for t in upstream.get("tools") or [] if t["function"]["name"] not in self.server_tools]
            if kept:
                upstream["tools"] = kept
            else:
                upstream.pop("tools", None)
                upstream.pop("tool_choice", None)
                upstream.pop("parallel_tool_calls", None)

    def _add_usage(self, usage: Any) -> None:
        p, c, cached = usage_dict(usage)
        self.usage[0] += p
        self.usage[1] += c
        self.usage[2] += cached

    def _usage_body(self) -> dict[str, Any]:
        return {"prompt_tokens": self.usage[0], "completion_tokens": self.usage[1],
                "total_tokens": self.usage[0] + self.usage[1],
                "prompt_tokens_details": {"cached_tokens": self.usage[2]}}

    # -------------------------------------------------------------- run

    async def run(self) -> HTTPResponse:
        """Update the ledger, project, send, answer (a stream or a body).

        The client's turn is written to the ledger while the request goes upstream. An error goes
        out only once the turn is committed (the ledger keeps the client's turn); an answer goes
        out without waiting for that commit unless ``wait_for_ledger`` is set (see
        :class:`ProxyBackend`). The answer and the call row are written once the response is out
        (``on_close``), so they add nothing to the client's latency.
        """
        await self._update_ledger()
        upstream = await self._upstream_body()
        self._measure(upstream)
        if self.stream:
            return await self._stream(upstream)
        try:
            data = await self._complete(upstream)
        except _UpstreamFailure as exc:
            return await self._fail(exc)
        problem = await self._turn_durable() if self.proxy.wait_for_ledger else None
        if problem is not None:
            return await self._fail(problem)
        done = functools.partial(self.finish, status=200, outcome="ok",
                                 finish_reason=data["choices"][0].get("finish_reason"))
        self._prepare_answer()
        return self._respond(200, data, {}, done)

    async def _turn_durable(self) -> _UpstreamFailure | None:
        """Wait for the client's turn to be committed; the failure to answer with when it was not."""
        if self._turn_write is None:
            return None
        try:
            await self._turn_write
        except Exception as exc:
            log.error("the ledger could not store a turn of conversation %s: %s", self.conv.id, exc)
            return _UpstreamFailure(500, error_body(f"the server could not store the conversation's turn: {exc}",
                                                    "server_error", code=500), "ledger_error")
        return None

    async def _fail(self, exc: _UpstreamFailure) -> HTTPResponse:
        if exc.outcome != "ledger_error":
            problem = await self._turn_durable()
            exc = problem or exc
        done = functools.partial(self.finish, status=exc.status, outcome=exc.outcome,
                                 error=exc.body["error"].get("message"))
        return self._respond(exc.status, exc.body, exc.headers, done)

    def _respond(self, status: int, payload: dict[str, Any], headers: dict[str, str],
                 done: Callable[[], Awaitable[None]]) -> HTTPResponse:
        self._mark_answered()
        response = json_response(status, payload, {**self.headers, **headers})
        response.on_close = done
        return response

    async def _send(self, upstream: dict[str, Any]) -> tuple[UpstreamResponse, bytes | None]:
        """Send one upstream request: the response and, unless it is an event stream, its whole body.

        A transport failure or a non-200 status is an :class:`_UpstreamFailure` carrying what the
        client gets (504 on a timeout, 502 when unreachable, else the upstream's status and error).
        """
        began = time.perf_counter()
        self.row["upstream_calls"] += 1
        headers = self.proxy._upstream_headers(self.request)
        # An unchanged request (passthrough, nothing of ours in it) is forwarded byte for byte: no
        # re-encoding, and exactly the bytes a provider's prompt cache saw from this client before.
        verbatim = upstream is self._verbatim and not self.server_tools
        payload = self.request.body if verbatim else json.dumps(upstream, ensure_ascii=False).encode()
        try:
            resp = await self.proxy.client().request("POST", "/chat/completions", headers, payload)
            raw = None
            if "text/event-stream" not in resp.headers.get("content-type", "") or resp.status != 200:
                raw = await resp.read()
        except UpstreamError as exc:
            if exc.timeout:
                raise _UpstreamFailure(504, error_body(f"upstream timed out: {exc}", "timeout", code=504),
                                       "timeout") from None
            raise _UpstreamFailure(502, error_body(f"upstream unreachable: {exc}", "upstream_error", code=502),
                                   "unreachable") from None
        finally:
            self.row["upstream_ms"] += (time.perf_counter() - began) * 1000
        if resp.status != 200:
            retry = {"retry-after": resp.headers["retry-after"]} if "retry-after" in resp.headers else {}
            raise _UpstreamFailure(resp.status, _openai_error(resp.status, raw or b""), "upstream_error", retry)
        return resp, raw

    async def _post(self, upstream: dict[str, Any]) -> dict[str, Any]:
        resp, raw = await self._send(upstream)
        if raw is None:  # an event stream to a request that did not ask for one
            try:
                raw = await resp.read()
            except UpstreamError as exc:
                raise _UpstreamFailure(502, error_body(str(exc), "upstream_error", code=502), "unreachable") from None
        try:
            data = json.loads(raw)
            message = data["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, IndexError, TypeError) as exc:
            raise _UpstreamFailure(502, error_body(
                f"upstream answered 200 with a body that is not a chat completion ({type(exc).__name__}: "
                f"{raw[:120]!r})", "bad_upstream_response", code=502), "bad_upstream") from None
        self._add_usage(data.get("usage"))
        return data

    async def _complete(self, upstream: dict[str, Any]) -> dict[str, Any]:
        while True:
            data = await self._post(upstream)
            choice = data["choices"][0]
            message = choice["message"]
            server, client = self._split_calls(list(message.get("tool_calls") or []))
            if server and not client and self.row["recall_rounds"] < self.proxy.max_recall_rounds:
                self._next_round(upstream, message, server, await self._run_server_tools(server))
                continue
            if server:  # mixed with the client's calls, or over the budget: never shown to the client
                if client:
                    message["tool_calls"] = client
                else:
                    message.pop("tool_calls", None)
                    if choice.get("finish_reason") == "tool_calls":
                        choice["finish_reason"] = "stop"
            if self.row["recall_rounds"]:
                data["usage"] = self._usage_body()
            self._answer = message
            return data

    # -------------------------------------------------------------- streams

    async def _open(self, upstream: dict[str, Any]) -> UpstreamResponse:
        resp, raw = await self._send(upstream)
        if raw is not None:
            raise _UpstreamFailure(502, error_body(
                f"upstream answered a stream request with {resp.headers.get('content-type')!r}, not an event "
                f"stream ({raw[:120]!r})", "bad_upstream_response", code=502), "bad_upstream")
        return resp

    async def _stream(self, upstream: dict[str, Any]) -> HTTPResponse:
        try:
            first = await self._open(upstream)
        except _UpstreamFailure as exc:
            return await self._fail(exc)
        problem = await self._turn_durable() if self.proxy.wait_for_ledger else None
        if problem is not None:
            await first.close()
            return await self._fail(problem)
        headers = {**self.headers, "cache-control": "no-cache", "x-accel-buffering": "no"}
        return HTTPResponse(200, self._events(upstream, first), headers, "text/event-stream",
                            on_close=self._finish_stream)

    async def _events(self, upstream: dict[str, Any], resp: UpstreamResponse) -> AsyncIterator[bytes]:
        hold = bool(self.server_tools)
        ids: dict[str, Any] = {}
        text: list[str] = []
        outcome, error, finish = "client_disconnected", None, None
        try:
            while True:
                round_ = _StreamRound(hold=hold, first_round=self.row["upstream_calls"] == 1)
                began = time.perf_counter()
                try:
                    async for line in resp.lines():
                        for piece in round_.feed(line):
                            if "ttft_ms" not in self.row:
                                self.row["ttft_ms"] = (time.perf_counter() - self.started) * 1000
                            yield piece
                        if round_.done:
                            break
                except UpstreamError as exc:
                    round_.failure = f"upstream stream broke: {type(exc).__name__}: {exc}"
                finally:
                    await resp.close()
                    self.row["upstream_ms"] += (time.perf_counter() - began) * 1000
                for usage in round_.usages:
                    self._add_usage(usage)
                ids = ids or round_.ids
                if round_.failure is not None or not (round_.done or round_.finish_reason):
                    error = round_.failure or "upstream stream ended before finishing"
                    outcome = "stream_error"
                    yield sse(error_body(error, "upstream_error", code=502))
                    return
                text.append(round_.text)
                calls = round_.calls()
                server, client = self._split_calls(calls)
                if hold and server and not client and self.row["recall_rounds"] < self.proxy.max_recall_rounds:
                    self._next_round(upstream, {"content": round_.text or None}, server,
                                     await self._run_server_tools(server))
                    try:
                        resp = await self._open(upstream)
                    except _UpstreamFailure as exc:
                        error, outcome = exc.body["error"].get("message"), "stream_error"
                        yield sse(exc.body)
                        return
                    continue
                finish = round_.finish_reason
                rid, model, created = ids.get("id", "chatcmpl-agentlab"), ids.get("model", ""), ids.get("created", 0)
                if hold:
                    if client:
                        yield sse(chunk(rid, model, created, {"tool_calls": tool_call_deltas(client)}))
                    finish = "tool_calls" if client else ("stop" if finish in (None, "tool_calls") else finish)
                    yield sse(chunk(rid, model, created, {}, finish))
                if self.client_usage:
                    yield sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                               "choices": [], "usage": self._usage_body()})
                content = "".join(text)
                self._answer = {"role": "assistant", "content": content or None}
                if client:
                    self._answer["tool_calls"] = client
                outcome = "ok"
                self._prepare_answer()
                self._mark_answered()
                yield SSE_DONE
                return
        finally:
            # Written by ``on_close`` once the last byte is out (see ``_finish_stream``).
            self._stream_result = {"status": 200, "outcome": outcome, "error": error, "finish_reason": finish}

    async def _finish_stream(self) -> None:
        await self.finish(**self._stream_result)

    # -------------------------------------------------------------- the end of a call

    def _mark_answered(self) -> None:
        """The client has (or is about to have) its whole answer: the call's latency ends here."""
        self.row.setdefault("latency_ms", (time.perf_counter() - self.started) * 1000)

    def _prepare_answer(self) -> None:
        """Before the client has its answer: index the conversation's next prefix in memory, so a
        next request sent the moment this answer arrives already finds its conversation.
        """
        answer, conv = self._answer, self.conv
        if answer is None or self.ledger_mode == "replay" or self._answer_hash:
            return
        self._answer_wire = {"role": "assistant", **answer}
        self._answer_hash = chain_hashes([self._answer_wire], self.chain[-1])[0]
        self.proxy.store.note_prefixes(conv.tenant, conv.id, [*self.chain, self._answer_hash])

    async def _record_answer(self) -> None:
        """Append the answer to the ledger when the request reached the ledger's tip (once)."""
        conv = self.conv
        self._prepare_answer()
        if not self._answer_hash or self._recorded:
            return
        self._recorded = True
        usage = Usage(prompt_tokens=self.usage[0], completion_tokens=self.usage[1], cached_tokens=self.usage[2])
        event = self.proxy._event(conv, self._answer_wire, self._answer_hash, author="upstream", usage=usage)
        written = self.proxy._write(conv, [event])
        self.row["events_appended"] += 1
        self.proxy.store.index_prefixes(conv.tenant, conv.id, conv.chain)
        conv.answered.add(self.body_hash)
        self.proxy._recent[self.body_hash] = (conv.id, True, time.time())
        if self._worker is not None:
            conv.summary_task = asyncio.ensure_future(self._summarize(self._worker, written, self._window))
            self.proxy._background.add(conv.summary_task)
            conv.summary_task.add_done_callback(self.proxy._background.discard)

    async def _summarize(self, worker: Any, written: asyncio.Future[None], window: int) -> None:
        try:
            await written  # the summariser reads the durable session, the answer included
            with observe_calls(functools.partial(self._record_model_call, "summary")):
                await worker.summarize(self.conv.session, FULL_SESSION_KEY, context_window=window)
        except Exception as exc:  # a failed summary leaves the ledger as it was; the next call retries
            log.warning("summary of conversation %s failed: %s: %s", self.conv.id, type(exc).__name__, exc)

    def _record_model_call(self, purpose: str, record: CallRecord) -> None:
        """A call a mechanism made upstream: a ``serve_calls`` row of purpose ``summary`` (the
        background summariser) or ``projection`` (a mechanism calling the model while projecting).
        """
        self.proxy.store.record_call({
            "call_id": new_id("call-"), "started_at": time.time() - record.latency_ms / 1000,
            "tenant": self.conv.tenant, "conversation_id": self.conv.id, "session_id": self.conv.session.id,
            "key_source": self.key_source, "arm": self.arm.name, "model": record.model, "purpose": purpose,
            "stream": False, "usage_prompt_tokens": record.usage.prompt_tokens,
            "usage_completion_tokens": record.usage.completion_tokens,
            "usage_cached_tokens": record.usage.cached_tokens, "upstream_calls": record.attempts,
            "latency_ms": record.latency_ms, "upstream_ms": record.latency_ms,
            "status": 200 if record.error is None else 502, "outcome": "ok" if record.error is None else "error",
            "error": record.error})

    async def _record_after_turn(self) -> None:
        problem = await self._turn_durable()
        if problem is not None and self.row.get("outcome") == "ok":
            # The answer the client has is not in the ledger either (a write after a failed one fails).
            self.row.update(outcome=problem.outcome, error=problem.body["error"].get("message"))
        self.proxy.store.record_call(self.row, self.exchanges)

    async def finish(self, *, status: int | None = None, outcome: str | None = None, error: str | None = None,
                     finish_reason: str | None = None) -> None:
        """Record the answer (non-stream) and the call row, and release the conversation (once)."""
        if self._finished:
            return
        self._finished = True
        try:
            if outcome == "ok":
                await self._record_answer()
            self._mark_answered()
            self.row.update(status=status, outcome=outcome or "client_disconnected", error=error,
                            finish_reason=finish_reason,
                            usage_prompt_tokens=self.usage[0], usage_completion_tokens=self.usage[1],
                            usage_cached_tokens=self.usage[2])
            self.row.setdefault("ledger_mode", self.ledger_mode)
            self.row.setdefault("session_id", self.conv.session.id)
            turn = self._turn_write
            if turn is not None and not turn.done():
                # The answer went out before its turn was committed: the row follows the commit (and
                # says so when the ledger could not store the turn), off this conversation's lock.
                task = asyncio.ensure_future(self._record_after_turn())
                self.proxy._background.add(task)
                task.add_done_callback(self.proxy._background.discard)
            else:
                await self._record_after_turn()
        finally:
            self.conv.lock.release()
            if self.on_done is not None:
                self.on_done()


class _StreamRound:
    """Reads one upstream SSE stream: forwards chunks (usage stripped, tool-call ``index`` always
    present) or, when the server's own tools are offered, holds the tool calls back until the
    round ends.
    """

    def __init__(self, *, hold: bool, first_round: bool) -> None:
        self.hold = hold
        self.first_round = first_round
        self.done = False
        self.failure: str | None = None
        self.finish_reason: str | None = None
        self.usages: list[Any] = []
        self.ids: dict[str, Any] = {}
        self._text: list[str] = []
        self._calls: list[dict[str, Any]] = []

    @property
    def text(self) -> str:
        """The content streamed this round."""
        return "".join(self._text)

    def calls(self) -> list[dict[str, Any]]:
        """The tool calls assembled this round."""
        return [{"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}} for c in self._calls]

    def _tool_delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        index = delta.get("index")
        if not isinstance(index, int):
            # Servers that leave out ``index`` (the seed's among them): a new id opens a call.
            index = len(self._calls) if delta.get("id") or not self._calls else len(self._calls) - 1
        while len(self._calls) <= index:
            self._calls.append({"id": "", "name": "", "arguments": ""})
        call = self._calls[index]
        fn = delta.get("function") or {}
        if delta.get("id"):
            call["id"] = delta["id"]
        if fn.get("name"):
            call["name"] = fn["name"]
        call["arguments"] += fn.get("arguments") or ""
        return {**delta, "index": index}

    def feed(self, line: str) -> list[bytes]:
        """The pieces to send on for one line of the upstream stream."""
        if self.done or not line.startswith("data:"):
            return []
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return []
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            self.failure = f"upstream sent a stream event that is not JSON: {data[:80]!r}"
            self.done = True
            return []
        if not isinstance(obj, dict):
            return []
        if "error" in obj:
            self.failure = str((obj.get("error") or {}).get("message") if isinstance(obj.get("error"), dict)
                               else obj.get("error"))
            self.done = True
            return []
        for key in ("id", "model", "created"):
            if key in obj and key not in self.ids:
                self.ids[key] = obj[key]
        if obj.get("usage"):
            self.usages.append(obj["usage"])
        obj.pop("usage", None)  # the client's usage chunk is made at the end (summed over rounds)
        choices = obj.get("choices") or []
        if not choices:
            return []
        out_choices = []
        for choice in choices:
            delta = dict(choice.get("delta") or {})
            if delta.get("content"):
                self._text.append(delta["content"])
            if delta.get("tool_calls"):
                fixed = [self._tool_delta(d) for d in delta["tool_calls"] if isinstance(d, dict)]
                if self.hold:
                    delta.pop("tool_calls")
                else:
                    delta["tool_calls"] = fixed
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            if not self.first_round:
                delta.pop("role", None)
            finish = None if self.hold else choice.get("finish_reason")
            if not delta and finish is None:
                continue
            if self.hold and not any(v for k, v in delta.items() if k != "role") and not self.first_round:
                continue
            out_choices.append({**choice, "delta": delta, "finish_reason": finish})
        if not out_choices:
            return []
        obj["choices"] = out_choices
        return [sse(obj)]
