"""One chat-completions call through the proxy, from the ledger update to the recorded row.

:class:`ProxyCall` brings the conversation's ledger up to date, projects the request with the
arm's mechanisms (a failing mechanism or a projection that fails the pairing check sends the
client's request unrewritten), sends it, runs the arm's own tools (recall) for a bounded number of
rounds, answers (a body here, a stream in :mod:`agentlab.serve.stream`) and records the answer and
the call row once the response is out (with ``wait_for_ledger``, the answer is committed before the
response ends).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import agentlab.serve.conversation_keys as conversation_keys
from agentlab.core.tools import Tool, ToolContext, render_tool_result
from agentlab.events import Event, Usage, new_id
from agentlab.model import tokens
from agentlab.model.base import CallRecord, observe_calls
from agentlab.serve.arms import Arm
from agentlab.serve.budget import FIRST_SUMMARY_CALL
from agentlab.serve.conversations import Conversation
from agentlab.serve.counting import prefix_tokens
from agentlab.serve.http import HTTPRequest, HTTPResponse, json_response
from agentlab.serve.proxy_shared import FALLBACK_WINDOW, ProxyShared
from agentlab.serve.stream import relay
from agentlab.serve.upstream import UpstreamError, UpstreamFailure, UpstreamResponse, openai_error
from agentlab.serve.upstream_request import CallerTool, project
from agentlab.serve.wire import chain_hashes, error_body, pairing_problem, to_message, usage_dict
from agentlab.session.base import FULL_SESSION_KEY, Session

log = logging.getLogger(__name__)


class ProxyCall:
    """One chat-completions call through the proxy, from ledger update to the recorded row."""

    def __init__(self, proxy: ProxyShared, request: HTTPRequest, body: dict[str, Any], conv: Conversation,
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
        self.headers = {conversation_keys.CONVERSATION_HEADER: conv.id, conversation_keys.KEY_SOURCE_HEADER: key_source,
                        "x-agentlab-arm": arm.name, "x-agentlab-call-id": self.row["call_id"]}
        self._finished = False
        self._recorded = False
        self._answer_hash = ""
        self._answer_wire: dict[str, Any] = {}
        self.answer: dict[str, Any] | None = None
        self.on_done: Callable[[], None] | None = None
        self.body_hash = ""
        self._turn_write: asyncio.Future[None] | None = None
        self._answer_write: asyncio.Future[None] | None = None
        self.canon: list[str] | None = None
        #: The request index of the conversation's last message, when found as a rewrite of its head.
        self.rewrite_at: int | None = None
        self._worker: Any = None
        self._window = FALLBACK_WINDOW
        self.stream_result: dict[str, Any] = {"status": 200, "outcome": "client_disconnected"}
        #: The upstream body when it is the client's own, unchanged (sent as the client's bytes).
        self._verbatim: dict[str, Any] | None = None
        self.view: Session = conv.session

    @property
    def max_recall_rounds(self) -> int:
        """Server-run tool rounds allowed per call."""
        return self.proxy.max_recall_rounds

    # -------------------------------------------------------------- ledger

    async def _update_ledger(self) -> None:
        assert self.canon is not None
        update = await self.proxy.table.bring_up_to_date(self.conv, self.body["messages"], self.chain, self.canon,
                                                         self.rewrite_at)
        self.ledger_mode, self.current, self.view = update.mode, update.current, update.view
        self.row["events_appended"] += len(update.appended)
        # Durable in the background while the request is projected and sent; awaited before answering.
        self._turn_write = update.written
        self.row["ledger_mode"] = self.ledger_mode
        self.row["session_id"] = self.conv.session.id
        self.row["summary_reused_events"] = update.reused_events
        if update.note:
            self.row["arm_note"] = update.note

    # -------------------------------------------------------------- the upstream request

    async def _upstream_body(self) -> dict[str, Any]:
        body = dict(self.body)
        metadata = body.get("metadata")
        if isinstance(metadata, dict) and conversation_keys.BODY_FIELD in metadata:
            metadata = {k: v for k, v in metadata.items() if k != conversation_keys.BODY_FIELD}
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
        model = await self.proxy.model(str(body.get("model") or "default"), self.request)
        messages = self.body["messages"]
        instruction = "\n\n".join(to_message(m).content for m in messages if m["role"] in ("system", "developer"))
        assert self.current is not None
        try:
            mechanisms = self.arm.mechanisms(model)
            worker = self.proxy.summary_worker(model, mechanisms)
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
        projected = [raw.get(id(m)) or self.proxy.counter.wire_of(m) for m in request.messages]
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
        client_tokens, client_chain = proxy.counter.count(self.body["messages"], self.body.get("tools"), conv.tenant,
                                                   self.canon, self.chain)
        if upstream["messages"] is self.body["messages"] and upstream.get("tools") == self.body.get("tools"):
            up_tokens, up_chain = client_tokens, client_chain  # sent as the client sent it
        else:
            up_tokens, up_chain = proxy.counter.count(upstream["messages"], upstream.get("tools"), conv.tenant)
        self.row.update(client_prompt_tokens=client_tokens, upstream_prompt_tokens=up_tokens,
                        upstream_messages=len(upstream["messages"]),
                        client_prefix_tokens=prefix_tokens(conv.last_client, client_chain),
                        upstream_prefix_tokens=prefix_tokens(conv.last_upstream, up_chain))
        conv.last_client, conv.last_upstream = client_chain, up_chain
        if self.arm.rewrites:
            proxy.budgets.of(conv.tenant).saved += client_tokens - up_tokens

    async def run_server_tools(self, calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
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

    def split_calls(self, calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The calls of the server's own tools, and those of the client's."""
        server = [c for c in calls if (c.get("function") or {}).get("name") in self.server_tools]
        client = [c for c in calls if (c.get("function") or {}).get("name") not in self.server_tools]
        return server, client

    def next_round(self, upstream: dict[str, Any], assistant: dict[str, Any], calls: list[dict[str, Any]],
                    results: list[dict[str, Any]]) -> None:
        """Extend the upstream request with one round of server-run calls and their results."""
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

    def add_usage(self, usage: Any) -> None:
        """Add one upstream answer's usage to the call's."""
        p, c, cached = usage_dict(usage)
        self.usage[0] += p
        self.usage[1] += c
        self.usage[2] += cached

    def usage_body(self) -> dict[str, Any]:
        """The call's usage summed over its rounds, in the OpenAI shape."""
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
        except UpstreamFailure as exc:
            return await self._fail(exc)
        problem = await self._turn_durable() if self.proxy.wait_for_ledger else None
        if problem is not None:
            return await self._fail(problem)
        self.prepare_answer()
        problem = await self.answer_durable()
        if problem is not None:
            return await self._fail(problem)
        done = functools.partial(self.finish, status=200, outcome="ok",
                                 finish_reason=data["choices"][0].get("finish_reason"))
        return self._respond(200, data, {}, done)

    async def _turn_durable(self) -> UpstreamFailure | None:
        """Wait for the client's turn to be committed; the failure to answer with when it was not."""
        return await self._durable(self._turn_write, "turn")

    async def answer_durable(self) -> UpstreamFailure | None:
        """With ``wait_for_ledger``: append the answer to the ledger now and wait for its commit, so
        the response ends only once the answer is on disk; the failure to answer with when it is not.
        Without it, nothing (the answer is written once the response is out).
        """
        if not self.proxy.wait_for_ledger:
            return None
        await self._record_answer()
        return await self._durable(self._answer_write, "answer")

    async def _durable(self, write: asyncio.Future[None] | None, what: str) -> UpstreamFailure | None:
        if write is None:
            return None
        try:
            await write
        except Exception as exc:
            log.error("the ledger could not store the %s of conversation %s: %s", what, self.conv.id, exc)
            return UpstreamFailure(500, error_body(f"the server could not store the conversation's {what}: {exc}",
                                                    "server_error", code=500), "ledger_error")
        return None

    async def _fail(self, exc: UpstreamFailure) -> HTTPResponse:
        if exc.outcome != "ledger_error":
            problem = await self._turn_durable()
            exc = problem or exc
        done = functools.partial(self.finish, status=exc.status, outcome=exc.outcome,
                                 error=exc.body["error"].get("message"))
        return self._respond(exc.status, exc.body, exc.headers, done)

    def _respond(self, status: int, payload: dict[str, Any], headers: dict[str, str],
                 done: Callable[[], Awaitable[None]]) -> HTTPResponse:
        self.mark_answered()
        response = json_response(status, payload, {**self.headers, **headers})
        response.on_close = done
        return response

    async def _send(self, upstream: dict[str, Any]) -> tuple[UpstreamResponse, bytes | None]:
        """Send one upstream request: the response and, unless it is an event stream, its whole body.

        A transport failure or a non-200 status is an :class:`UpstreamFailure` carrying what the
        client gets (504 on a timeout, 502 when unreachable, else the upstream's status and error).
        """
        began = time.perf_counter()
        self.row["upstream_calls"] += 1
        headers = self.proxy.upstream_headers(self.request)
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
                raise UpstreamFailure(504, error_body(f"upstream timed out: {exc}", "timeout", code=504),
                                       "timeout") from None
            raise UpstreamFailure(502, error_body(f"upstream unreachable: {exc}", "upstream_error", code=502),
                                   "unreachable") from None
        finally:
            self.row["upstream_ms"] += (time.perf_counter() - began) * 1000
        if resp.status != 200:
            retry = {"retry-after": resp.headers["retry-after"]} if "retry-after" in resp.headers else {}
            raise UpstreamFailure(resp.status, openai_error(resp.status, raw or b""), "upstream_error", retry)
        return resp, raw

    async def _post(self, upstream: dict[str, Any]) -> dict[str, Any]:
        resp, raw = await self._send(upstream)
        if raw is None:  # an event stream to a request that did not ask for one
            try:
                raw = await resp.read()
            except UpstreamError as exc:
                raise UpstreamFailure(502, error_body(str(exc), "upstream_error", code=502), "unreachable") from None
        try:
            data = json.loads(raw)
            message = data["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, IndexError, TypeError) as exc:
            raise UpstreamFailure(502, error_body(
                f"upstream answered 200 with a body that is not a chat completion ({type(exc).__name__}: "
                f"{raw[:120]!r})", "bad_upstream_response", code=502), "bad_upstream") from None
        self.add_usage(data.get("usage"))
        return data

    async def _complete(self, upstream: dict[str, Any]) -> dict[str, Any]:
        while True:
            data = await self._post(upstream)
            choice = data["choices"][0]
            message = choice["message"]
            server, client = self.split_calls(list(message.get("tool_calls") or []))
            if server and not client and self.row["recall_rounds"] < self.proxy.max_recall_rounds:
                self.next_round(upstream, message, server, await self.run_server_tools(server))
                continue
            if server:  # mixed with the client's calls, or over the budget: never shown to the client
                if client:
                    message["tool_calls"] = client
                else:
                    message.pop("tool_calls", None)
                    if choice.get("finish_reason") == "tool_calls":
                        choice["finish_reason"] = "stop"
            if self.row["recall_rounds"]:
                data["usage"] = self.usage_body()
            self.answer = message
            return data

    # -------------------------------------------------------------- streams

    async def open_stream(self, upstream: dict[str, Any]) -> UpstreamResponse:
        """Send ``upstream`` and return its event stream (a body that is not one is a 502)."""
        resp, raw = await self._send(upstream)
        if raw is not None:
            raise UpstreamFailure(502, error_body(
                f"upstream answered a stream request with {resp.headers.get('content-type')!r}, not an event "
                f"stream ({raw[:120]!r})", "bad_upstream_response", code=502), "bad_upstream")
        return resp

    async def _stream(self, upstream: dict[str, Any]) -> HTTPResponse:
        try:
            first = await self.open_stream(upstream)
        except UpstreamFailure as exc:
            return await self._fail(exc)
        problem = await self._turn_durable() if self.proxy.wait_for_ledger else None
        if problem is not None:
            await first.close()
            return await self._fail(problem)
        headers = {**self.headers, "cache-control": "no-cache", "x-accel-buffering": "no"}
        return HTTPResponse(200, relay(self, upstream, first), headers, "text/event-stream",
                            on_close=self._finish_stream)

    async def _finish_stream(self) -> None:
        await self.finish(**self.stream_result)

    # -------------------------------------------------------------- the end of a call

    def mark_answered(self) -> None:
        """The client has (or is about to have) its whole answer: the call's latency ends here."""
        self.row.setdefault("latency_ms", (time.perf_counter() - self.started) * 1000)

    def prepare_answer(self) -> None:
        """Before the client has its answer: index the conversation's next prefix in memory, so a
        next request sent the moment this answer arrives already finds its conversation.
        """
        answer, conv = self.answer, self.conv
        if answer is None or self.ledger_mode == "replay" or self._answer_hash:
            return
        self._answer_wire = {"role": "assistant", **answer}
        self._answer_hash = chain_hashes([self._answer_wire], self.chain[-1])[0]
        self.proxy.store.note_prefixes(conv.tenant, conv.id, [*self.chain, self._answer_hash])
        if self.canon:
            self.proxy.table.tips.note(conv.tenant, conv.id, self.canon[-1],
                                       self.proxy.counter.canonical_of_request(self._answer_wire))

    async def _record_answer(self) -> None:
        """Append the answer to the ledger when the request reached the ledger's tip (once)."""
        conv = self.conv
        self.prepare_answer()
        if not self._answer_hash or self._recorded:
            return
        self._recorded = True
        usage = Usage(prompt_tokens=self.usage[0], completion_tokens=self.usage[1], cached_tokens=self.usage[2])
        event = self.proxy.table.event(conv, self._answer_wire, self._answer_hash, author="upstream", usage=usage)
        written = self._answer_write = self.proxy.table.write(conv, [event])
        self.row["events_appended"] += 1
        self.proxy.store.index_prefixes(conv.tenant, conv.id, conv.chain)
        conv.answered.add(self.body_hash)
        self.proxy.recent[self.body_hash] = (conv.id, True, time.time())
        budget = self.proxy.budgets.of(conv.tenant)
        if self._worker is not None and self.proxy.summary_budget and not budget.may_summarize():
            # The summary made so far goes on being used.
            self.row["arm_note"] = "; ".join(filter(None, (self.row.get("arm_note"), budget.note())))
        elif self._worker is not None and self.proxy.summary_budget and len(conv.answered) < FIRST_SUMMARY_CALL:
            pass  # not yet: whether its client rewrites the tip is not known (see agentlab.serve.budget)
        elif self._worker is not None:
            conv.summary_task = self.proxy.spawn(self._summarize(self._worker, written, self._window))

    async def _summarize(self, worker: Any, written: asyncio.Future[None], window: int) -> None:
        try:
            await written  # the summariser reads the durable session, the answer included
            with observe_calls(functools.partial(self._record_model_call, "summary")):
                await worker.summarize(self.conv.summary_view(), FULL_SESSION_KEY, context_window=window)
        except Exception as exc:  # a failed summary leaves the ledger as it was; the next call retries
            log.warning("summary of conversation %s failed: %s: %s", self.conv.id, type(exc).__name__, exc)

    def _record_model_call(self, purpose: str, record: CallRecord) -> None:
        """A call a mechanism made upstream: a ``serve_calls`` row of purpose ``summary`` (the
        background summariser) or ``projection`` (a mechanism calling the model while projecting).
        """
        if purpose == "summary":
            budget = self.proxy.budgets.of(self.conv.tenant)
            budget.last_cost = record.usage.prompt_tokens + record.usage.completion_tokens
            budget.spent += budget.last_cost
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
            self.mark_answered()
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
                self.proxy.spawn(self._record_after_turn())
            else:
                await self._record_after_turn()
        finally:
            self.conv.lock.release()
            if self.on_done is not None:
                self.on_done()
