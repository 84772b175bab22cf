"""The proxy's streams: one upstream SSE stream read and relayed (:class:`StreamRound`), and the
client's whole stream of a call across the rounds of server-run tools (:func:`relay`).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

from agentlab.serve.upstream import UpstreamError, UpstreamFailure, UpstreamResponse
from agentlab.serve.wire import SSE_DONE, chunk, error_body, sse, tool_call_deltas


class StreamingCall(Protocol):
    """What :func:`relay` needs of a call (:class:`agentlab.serve.call.ProxyCall`)."""

    row: dict[str, Any]
    started: float
    server_tools: dict[str, Any]
    client_usage: bool
    answer: dict[str, Any] | None
    stream_result: dict[str, Any]

    @property
    def max_recall_rounds(self) -> int:
        """Server-run tool rounds allowed per call."""

    def add_usage(self, usage: Any) -> None:
        """Add one upstream usage to the call's."""

    def split_calls(self, calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The calls of the server's tools and of the client's."""

    def next_round(self, upstream: dict[str, Any], assistant: dict[str, Any], calls: list[dict[str, Any]],
                   results: list[dict[str, Any]]) -> None:
        """Extend the upstream request with a round of server-run tool calls and their results."""

    async def run_server_tools(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run the server's tools the model called."""

    async def open_stream(self, upstream: dict[str, Any]) -> UpstreamResponse:
        """Send ``upstream`` and return its event stream."""

    def usage_body(self) -> dict[str, Any]:
        """The call's summed usage in the OpenAI shape."""

    def prepare_answer(self) -> None:
        """Index the answer's prefix before the client has it."""

    def mark_answered(self) -> None:
        """The call's latency ends here."""

    async def answer_durable(self) -> UpstreamFailure | None:
        """With ``wait_for_ledger``: the answer committed to the ledger (the failure when it is not)."""


async def relay(call: StreamingCall, upstream: dict[str, Any], resp: UpstreamResponse) -> AsyncIterator[bytes]:
    """The client's stream of one call: the upstream's rounds relayed (server-run tool rounds held
    back and run in between), then the call's own closing chunks and ``[DONE]``.

    What it ended with is left in ``call.stream_result`` (the call's ``on_close`` records it).
    """
    hold = bool(call.server_tools)
    ids: dict[str, Any] = {}
    text: list[str] = []
    outcome, error, finish = "client_disconnected", None, None
    try:
        while True:
            round_ = StreamRound(hold=hold, first_round=call.row["upstream_calls"] == 1)
            began = time.perf_counter()
            try:
                async for line in resp.lines():
                    for piece in round_.feed(line):
                        if "ttft_ms" not in call.row:
                            call.row["ttft_ms"] = (time.perf_counter() - call.started) * 1000
                        yield piece
                    if round_.done:
                        break
            except UpstreamError as exc:
                round_.failure = f"upstream stream broke: {type(exc).__name__}: {exc}"
            finally:
                await resp.close()
                call.row["upstream_ms"] += (time.perf_counter() - began) * 1000
            for usage in round_.usages:
                call.add_usage(usage)
            ids = ids or round_.ids
            if round_.failure is not None or not (round_.done or round_.finish_reason):
                error = round_.failure or "upstream stream ended before finishing"
                outcome = "stream_error"
                yield sse(error_body(error, "upstream_error", code=502))
                return
            text.append(round_.text)
            calls = round_.calls()
            server, client = call.split_calls(calls)
            if hold and server and not client and call.row["recall_rounds"] < call.max_recall_rounds:
                call.next_round(upstream, {"content": round_.text or None}, server,
                                 await call.run_server_tools(server))
                try:
                    resp = await call.open_stream(upstream)
                except UpstreamFailure as exc:
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
            if call.client_usage:
                yield sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                           "choices": [], "usage": call.usage_body()})
            content = "".join(text)
            call.answer = {"role": "assistant", "content": content or None}
            if client:
                call.answer["tool_calls"] = client
            call.prepare_answer()
            problem = await call.answer_durable()
            if problem is not None:  # the answer is not on disk: the client must not take it as stored
                error, outcome = problem.body["error"].get("message"), problem.outcome
                yield sse(problem.body)
                return
            outcome = "ok"
            call.mark_answered()
            yield SSE_DONE
            return
    finally:
        # Written by ``on_close`` once the last byte is out (see ``_finish_stream``).
        call.stream_result = {"status": 200, "outcome": outcome, "error": error, "finish_reason": finish}


class StreamRound:
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
            # Servers that leave out ``index`` (tRPC-Agent-Go's among them): a new id opens a call.
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
