"""The proxy back end: any OpenAI-compatible upstream, with an arm's projection in between.

Per request: check the body (400 on anything malformed, nothing stored), find the conversation
(:mod:`agentlab.serve.conversation_keys`), bring its durable ledger up to date with the client's messages
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
  to a new session seeded with the request; the old ledger stays as it was. A summary of the old
  session whose boundary lies in the prefix the request shares with it (the same chain hashes) is
  carried into the new session (``serve_calls.summary_reused_events`` says how many events it
  covers), and from then on the conversation's summaries stop before the user messages its client
  rewrote, so a client that rewrites the end of its history each turn keeps its summary
  (:mod:`agentlab.serve.carry`). Compaction and the clearing arms are projections of the ledger
  with no per-session state: they apply to the new session as to any other.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import agentlab.serve.conversation_keys as conversation_keys
from agentlab.serve.arms import Arm, get_arm
from agentlab.serve.call import ProxyCall
from agentlab.serve.conversations import APP_NAME, Conversation
from agentlab.serve.http import HTTPRequest, HTTPResponse, json_response
from agentlab.serve.memory import hand_back_large_blocks, trim
from agentlab.serve.proxy_shared import FALLBACK_WINDOW, ProxyShared
from agentlab.serve.rewrites import tip_keys
from agentlab.serve.upstream import UpstreamError, openai_error
from agentlab.serve.wire import (
    RequestError,
    chain_hashes,
    error_body,
    parse_chat_request,
    stored_size,
    to_message,
)

__all__ = ["APP_NAME", "ARM_HEADER", "FALLBACK_WINDOW", "RETRY_WINDOW", "ProxyBackend"]

#: Seconds within which the same request body again counts as a retry of the first.
RETRY_WINDOW = 600.0
#: A request header choosing another arm than the server's for one call (an unknown one is a 400).
ARM_HEADER = "x-agentlab-arm"
#: Request bodies remembered for that.
RECENT_BODIES = 10_000
#: Request bodies larger than this are parsed in a worker process and hashed on a worker thread,
#: off the event loop.
OFF_LOOP_BYTES = 256 * 1024
#: After a request body larger than this the heap's free pages are given back (:func:`trim`).
TRIM_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class _Digest:
    """A checked request: its body, explicit conversation id, canonical messages, chain and body hash."""

    body: dict[str, Any]
    explicit: tuple[str, str] | None
    canon: list[str]
    chain: list[str]
    body_hash: str
    #: The rewrite index's keys of a large request (:func:`tip_keys`, hashed off the event loop).
    tips: list[tuple[int, str]] | None = None


class ProxyBackend(ProxyShared):
    """Serves ``/v1/chat/completions`` by forwarding to ``upstream`` under ``arm``."""

    kind = "proxy"

    def __init__(self, *, arm: str, **shared: Any) -> None:
        super().__init__(**shared)
        hand_back_large_blocks()
        self.arm = get_arm(arm)
        self._arms: dict[str, Arm] = {self.arm.name: self.arm}
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def close(self) -> None:
        """Let pending writes and summaries finish, then close the upstream client and the summary workers."""
        await self.settle()
        await self.close_upstream()

    def _digest(self, request: HTTPRequest, tenant: str, parsed: dict[str, Any] | None = None) -> _Digest:
        """Parse (unless ``parsed``), check and hash a request body (``RequestError`` naming what is
        wrong with it). A parsed (large) body's messages and tools are counted here too: this runs
        in a worker thread then, and the counts are cached for the call on the event loop.
        """
        limits = self.limits
        body = parsed if parsed is not None else parse_chat_request(request.body, max_messages=limits.max_messages)
        explicit = conversation_keys.explicit_id(request.headers, body)
        messages: list[dict[str, Any]] = body["messages"]
        canon = [self.counter.canonical_of_request(m) for m in messages]
        for i, (m, text) in enumerate(zip(messages, canon, strict=True)):
            size = stored_size(m, text, limits.max_message_bytes)
            if size > limits.max_message_bytes:
                raise RequestError(f"messages[{i}] is {size} bytes, over this server's limit of "
                                   f"{limits.max_message_bytes} bytes a message (--max-message-bytes)",
                                   status=413, param=f"messages[{i}]", code="request_too_large")
        chain = chain_hashes(messages, tenant, canon)
        if parsed is not None:  # tokenizing megabytes would hold up every other call on the loop
            for m, text in zip(messages, canon, strict=True):
                self.counter.message_tokens(text, to_message(m))
            self.counter.tool_tokens(body.get("tools"))
        body_hash = chain[-1] + json.dumps({k: v for k, v in body.items() if k != "messages"}, sort_keys=True,
                                           default=str)
        # A large request's tip keys are hashed here (a worker thread) in case the loop needs them.
        tips = tip_keys(tenant, canon) if parsed is not None else None
        return _Digest(body, explicit, canon, chain, body_hash, tips)

    async def chat(self, request: HTTPRequest) -> HTTPResponse:
        """``POST /v1/chat/completions``."""
        started = time.perf_counter()
        started_at = time.time()
        try:
            arm = self._arm_of(request)
            tenant = conversation_keys.tenant_of(request.headers.get("authorization", ""), self.upstream)
            if len(request.body) > OFF_LOOP_BYTES:  # parsing and hashing it would hold up every other call
                parsed = await self.parse_elsewhere(request.body)
                digest = await asyncio.to_thread(self._digest, request, tenant, parsed)
            else:
                digest = self._digest(request, tenant)
        except RequestError as exc:
            return json_response(exc.status, exc.body(), {"x-should-retry": "false"})
        body, explicit, canon, chain, body_hash = (digest.body, digest.explicit, digest.canon, digest.chain,
                                                   digest.body_hash)
        messages: list[dict[str, Any]] = body["messages"]
        rewrite_at: int | None = None
        retry_header = request.headers.get("x-stainless-retry-count", "0")
        retried = retry_header.isdigit() and int(retry_header) > 0
        recent = self.recent.get(body_hash)
        if explicit is not None:
            conversation_id, key_source = explicit
        elif recent is not None and (retried or not recent[1]) and time.time() - recent[2] < RETRY_WINDOW:
            # The same body again: a retry (the client says so, or the earlier attempt failed). A first
            # turn has no prefix to match yet, so without this its retry would start a new conversation.
            conversation_id, key_source = recent[0], "retry"
        else:
            match = await self.store.match_prefix(tenant, chain, conversation_keys.min_prefix_length(messages))
            rewrite = None
            if match.conversation_id is None and not match.ambiguous:
                tips = self.table.tips
                rewrite = tips.find(tenant, canon) if digest.tips is None else tips.find_keys(digest.tips)
            if match.conversation_id is not None:
                conversation_id, key_source = match.conversation_id, "prefix"
            elif rewrite is not None:  # the client rewrote its head and kept its latest turns
                (conversation_id, rewrite_at), key_source = rewrite, "rewrite"
            else:
                conversation_id = conversation_keys.new_conversation_id()
                key_source = "new-ambiguous" if match.ambiguous else "new"
        conv = await self.table.get(tenant, conversation_id, key_source)
        self.recent[body_hash] = (conversation_id, False, time.time())
        self.recent.move_to_end(body_hash)
        while len(self.recent) > RECENT_BODIES:
            self.recent.popitem(last=False)
        self._in_flight += 1
        self._idle.clear()
        try:
            await conv.lock.acquire()
        except BaseException:
            self._call_done(conv)
            raise
        call = ProxyCall(self, request, body, conv, chain, key_source, started, started_at, arm)
        call.body_hash, call.row["retry"] = body_hash, retried or body_hash in conv.answered
        call.canon, call.rewrite_at = canon, rewrite_at
        # A large body's bytes stay held against the server's budget until this call's ledger
        # writes (which hold copies of its text) are done: the next large request waits for that.
        let_go = request.hold.extend() if request.hold is not None else None
        call.on_done = functools.partial(self._call_done, conv, len(request.body), let_go)
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

    def _call_done(self, conv: Conversation, body_bytes: int = 0, let_go: Callable[[], None] | None = None) -> None:
        self.table.release(conv)
        if body_bytes > TRIM_BYTES or let_go is not None:
            # The conversation's last ledger write (its writes are committed in order): the call's own are
            # done with it, not with the other background work (a summary can take the upstream's time).
            writes = [conv.last_write] if conv.last_write is not None else []
            self.spawn(self._after_writes(writes, body_bytes > TRIM_BYTES, let_go))
        self._in_flight -= 1
        if not self._in_flight:
            self._idle.set()

    @staticmethod
    async def _after_writes(writes: list[asyncio.Future[Any]], trim_heap: bool,
                            let_go: Callable[[], None] | None) -> None:
        """Once ``writes`` (the ledger writes of a call that ended) are done, the call's copies of a
        large body are freed: give the heap's free pages back (``trim_heap``) and the body's bytes
        back to the server's budget.
        """
        try:
            if writes:
                await asyncio.wait(writes)
            if trim_heap:
                await asyncio.to_thread(trim)
        finally:
            if let_go is not None:
                let_go()

    async def settle(self) -> None:
        """Wait until no call is in flight and every ledger write, summary and call row is committed."""
        await self._idle.wait()
        while self.background:
            await asyncio.gather(*list(self.background), return_exceptions=True)
        await self.store.flush()

    async def models(self, request: HTTPRequest, model_id: str | None = None) -> HTTPResponse:
        """``GET /v1/models`` (and ``/v1/models/{id}``), answered by the upstream."""
        # Only these two paths are sent upstream with its key; the id (checked by the route) is
        # percent-encoded whole, so it names one path segment whatever it holds.
        path = "/models" + (f"/{quote(model_id, safe='')}" if model_id else "")
        try:
            resp = await self.client().request("GET", path, self.upstream_headers(request))
            raw = await resp.read()
        except UpstreamError as exc:
            return json_response(502, error_body(f"upstream {self.upstream} unreachable: {exc}", "upstream_error"))
        if resp.status != 200:
            return json_response(resp.status, openai_error(resp.status, raw))
        return HTTPResponse(200, raw)
