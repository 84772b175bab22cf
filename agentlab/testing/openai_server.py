"""A local OpenAI-compatible server that behaves like the endpoints researchers point agentlab at.

It exists so that the real-endpoint path (window discovery, HTTP errors, retries, streaming, tool
calls, concurrency) is tested against something that answers like vLLM, a llama.cpp server or
Ollama, not only against the scripted model. It listens on 127.0.0.1 only.

What it does, and why each part is there:

* **States its context window the way a given server family does** (``window_style``):
  vLLM ``GET /v1/models`` → ``max_model_len``; OpenRouter / LM Studio ``context_length``;
  llama.cpp ``GET /props`` → ``default_generation_settings.n_ctx``; Ollama ``POST /api/show`` →
  ``model_info["<arch>.context_length"]``; ``none`` states nothing (like a hosted API whose
  ``/v1/models`` lists ids only). A client has to find the window where the real server keeps it.
* **Refuses an overlong prompt with HTTP 400** in that family's words (prompt tokens counted with
  cl100k, plus the requested ``max_tokens``), as a real server does; it never truncates silently.
* **Answers deterministically and extractively**: a plain answer is the prompt's sentences that
  share the most words with the last user turn, so an answer that saw the evidence scores better
  than one that did not; agentlab's own summary requests get an extractive summary as long as their
  ``max_tokens`` and stated word cap allow (:mod:`agentlab.testing.summary_reply`). That makes quality loss and recovery measurable on it, not just non-zero.
  JSON requests get a JSON object (a judge verdict, or memory operations); when the request offers a
  search tool and the last turn is the user's, it calls that tool once, like an agentic model.
* **Injects faults** on a seeded schedule (``fault_rate`` over ``faults``): 429 with
  ``retry-after``, 500, 503, a 200 whose body is not JSON (``garbage``), a 200 with no choices
  (``empty``), and ``hang`` (answers only after ``hang_seconds``), so retry and timeout handling is
  exercised end to end.
* **Latency** per request (``latency`` seconds), for executor and overhead benchmarks.
* **Records what it was sent** (``record_requests``: every chat-completions body in ``received``),
  so a proxy in front of it can be checked for what it forwarded; ``queue_faults(...)`` makes the
  next completions fail in a given order (deterministic, unlike ``fault_rate``).
* **A prefix cache** (``prefix_cache``): usage reports ``prompt_tokens_details.cached_tokens`` as
  the tokens of the longest run of leading messages an earlier request already sent, the way a
  provider's prompt cache reuses a shared prefix, so a proxy's cache loss can be measured.

Use it from code::

    with OpenAITestServer(context_window=131_072) as server:
        model_spec = server.model_spec          # "openai:test-model@http://127.0.0.1:PORT/v1"

or from the shell (prints the model spec, serves until Ctrl-C)::

    python -m agentlab.testing.openai_server --context-window 131072 --window-style vllm
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentlab.testing.summary_reply import extractive_summary, is_summary_request, summary_word_budget

WINDOW_STYLES = ("vllm", "openrouter", "llamacpp", "ollama", "none")
FAULT_KINDS = ("429", "500", "503", "garbage", "empty", "hang")
#: Tokens a chat template adds around each message (the same order of magnitude as real templates).
PER_MESSAGE_OVERHEAD = 4
DEFAULT_MAX_TOKENS = 256
#: Every model spec a test server of this process has served: what a notebook's figures must label
#: "test server" (:mod:`agentlab.notebooks.provenance`); never emptied, a stopped server's too.
SERVED_MODEL_SPECS: set[str] = set()

_WORD = re.compile(r"[A-Za-z0-9']+")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_STOPWORDS = frozenset(
    "a an the and or but if of to in on at for with by from as is are was were be been being it its this that "
    "these those i you he she we they me him her us them my your his our their what which who whom when where "
    "why how do does did done have has had not no yes so than then there here about into over under up down "
    "out can could would should will shall may might must just also very too any all some each more most".split()
)


def _count_tokens(text: str) -> int:
    from agentlab.model import tokens

    return tokens.count_text(text)


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _content_text(content: Any) -> str:
    """Text of a message's content: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def prompt_tokens(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None) -> int:
    """The prompt size this server charges: cl100k tokens of every message and tool, plus overhead."""
    total = 0
    for m in messages:
        total += PER_MESSAGE_OVERHEAD + _count_tokens(_content_text(m.get("content")))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            total += _count_tokens(str(fn.get("name", ""))) + _count_tokens(str(fn.get("arguments", "")))
    if tools:
        total += _count_tokens(json.dumps(list(tools), separators=(",", ":")))
    return total


def extractive_answer(messages: Sequence[dict[str, Any]], max_words: int = 80) -> str:
    """The prompt's sentences that share the most content words with the last user turn.

    Deterministic and cheap; it rewards a prompt that contains the evidence, which is what the
    harness's quality metrics need from a stand-in model.
    """
    question = ""
    for m in reversed(messages):
        if m.get("role") == "user":
            question = _content_text(m.get("content"))
            break
    wanted = {w for w in _words(question) if w not in _STOPWORDS}
    sentences: list[tuple[int, int, str]] = []
    position = 0
    for m in messages:
        text = _content_text(m.get("content"))
        if m.get("role") == "user" and text == question:
            continue
        for sentence in _SENTENCE_SPLIT.split(text):
            sentence = sentence.strip()
            if len(sentence) < 8:
                continue
            overlap = len(wanted & set(_words(sentence)))
            if overlap:
                sentences.append((-overlap, position, sentence))
            position += 1
    if not sentences:
        return "I cannot find that in the conversation."
    sentences.sort()
    chosen: list[str] = []
    n_words = 0
    for _, _, sentence in sentences:
        chosen.append(sentence)
        n_words += len(sentence.split())
        if n_words >= max_words:
            break
    return " ".join(" ".join(chosen).split()[:max_words])


@dataclass
class ServerStats:
    """What the server saw: requests by path, answers by kind, faults injected."""

    requests: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    prompt_tokens: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the counters (printed when the command-line server stops)."""
        return {"requests": dict(self.requests), "answers": dict(self.answers), "faults": dict(self.faults),
                "completions": len(self.prompt_tokens), "prompt_tokens_total": sum(self.prompt_tokens)}


class _Server(ThreadingHTTPServer):
    # The default backlog (5) resets connections when dozens of clients connect at once.
    request_queue_size = 256
    daemon_threads = True


class OpenAITestServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 (see the module docstring)."""

    def __init__(self, *, model: str = "test-model", context_window: int | None = 131_072,
                 window_style: str = "vllm", latency: float = 0.0, fault_rate: float = 0.0,
                 faults: Sequence[str] = ("429", "500", "garbage"), hang_seconds: float = 30.0,
                 seed: int = 0, tool_calls: bool = True, api_key: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, record_requests: bool = False,
                 prefix_cache: bool = False) -> None:
        if window_style not in WINDOW_STYLES:
            raise ValueError(f"window_style must be one of {', '.join(WINDOW_STYLES)}, got {window_style!r}")
        unknown = [f for f in faults if f not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(FAULT_KINDS)}")
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be within [0, 1], got {fault_rate}")
        if window_style != "none" and not context_window:
            raise ValueError("a server that states its window needs context_window")
        self.model = model
        self.context_window = context_window
        self.window_style = window_style
        self.latency = latency
        self.fault_rate = fault_rate
        self.faults = tuple(faults)
        self.hang_seconds = hang_seconds
        self.tool_calls = tool_calls
        self.api_key = api_key
        self.stats = ServerStats()
        self.record_requests = record_requests
        #: Chat-completions bodies received, in order (when ``record_requests``).
        self.received: list[dict[str, Any]] = []
        #: The bytes of every POST body received, in order (when ``record_requests``).
        self.received_raw: list[bytes] = []
        self.prefix_cache = prefix_cache
        self._seen_prefixes: set[str] = set()
        self._fault_queue: list[str] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._httpd = _Server((host, port), self._handler_class())
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The port it listens on (a free one was picked when ``port=0``)."""
        return int(self._httpd.server_address[1])

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT``: where the non-``/v1`` probes (``/props``, ``/api/show``) live."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``.../v1``) to give a client."""
        return f"{self.root_url}/v1"

    @property
    def model_spec(self) -> str:
        """The ``--model`` spec that reaches this server through agentlab's OpenAI client."""
        return f"openai:{self.model}@{self.base_url}"

    def start(self) -> OpenAITestServer:
        """Serve in a daemon thread (idempotent); returns the server for chaining."""
        SERVED_MODEL_SPECS.add(self.model_spec)
        if self._thread is None:
            self._thread = threading.Thread(target=self._httpd.serve_forever, name="openai-test-server",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> OpenAITestServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------------------ behaviour

    def queue_faults(self, *kinds: str) -> None:
        """Make the next completions fail with ``kinds``, in order, before ``fault_rate`` applies again."""
        unknown = [k for k in kinds if k not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(FAULT_KINDS)}")
        with self._lock:
            self._fault_queue.extend(kinds)

    def cached_tokens(self, messages: Sequence[dict[str, Any]]) -> int:
        """Tokens of the longest run of leading messages an earlier request sent (and remember these)."""
        digest = hashlib.sha256()
        cached = total = 0
        shared = True
        with self._lock:
            for m in messages:
                digest.update(json.dumps(m, sort_keys=True).encode())
                key = digest.hexdigest()
                total += PER_MESSAGE_OVERHEAD + _count_tokens(_content_text(m.get("content")))
                shared = shared and key in self._seen_prefixes
                if shared:
                    cached = total
                self._seen_prefixes.add(key)
        return cached

    def _next_fault(self) -> str | None:
        with self._lock:
            if self._fault_queue:
                kind = self._fault_queue.pop(0)
                self.stats.faults[kind] += 1
                return kind
            if self.fault_rate and self.faults and self._rng.random() < self.fault_rate:
                kind = self._rng.choice(self.faults)
                self.stats.faults[kind] += 1
                return kind
        return None

    def models_body(self) -> dict[str, Any]:
        """The ``/v1/models`` listing, stating the window the way the chosen server family does (vLLM
        ``max_model_len``, OpenRouter ``context_length``) or not at all.
        """
        entry: dict[str, Any] = {"id": self.model, "object": "model", "created": 0, "owned_by": "agentlab-test"}
        if self.window_style == "vllm":
            entry["max_model_len"] = self.context_window
        elif self.window_style == "openrouter":
            entry["context_length"] = self.context_window
        return {"object": "list", "data": [entry]}

    def too_long_body(self, needed: int, prompt: int) -> dict[str, Any]:
        """The 400 body a server of this family sends for a prompt that does not fit.

        Only meaningful for a server with a window: one without never rejects a prompt as too long.
        """
        window = self.context_window
        if window is None:
            raise ValueError("a server without a context_window never rejects a prompt as too long")
        if self.window_style == "llamacpp":
            return {"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": prompt,
                              "n_ctx": window,
                              "message": "the request exceeds the available context size, try increasing it"}}
        if self.window_style == "ollama":
            return {"error": {"message": f"prompt too long; exceeded max context length by {needed - window} tokens"}}
        if self.window_style == "vllm":
            return {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
                    "message": (f"This model's maximum context length is {window} tokens. However, you requested "
                                f"{needed} tokens ({prompt} in the messages, {needed - prompt} in the completion). "
                                "Please reduce the length of the messages or completion.")}
        return {"error": {"type": "invalid_request_error", "code": "context_length_exceeded", "param": "messages",
                          "message": (f"This model's maximum context length is {window} tokens. However, your "
                                      f"messages resulted in {needed} tokens. Please reduce the length.")}}

    def reply_message(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for a chat-completions payload (text, JSON or one tool call)."""
        messages = payload.get("messages") or []
        response_format = (payload.get("response_format") or {}).get("type")
        max_words = max(8, int((payload.get("max_tokens") or DEFAULT_MAX_TOKENS) * 0.7))
        if response_format in ("json_object", "json_schema"):
            return {"role": "assistant", "content": json.dumps(self._json_reply(messages), ensure_ascii=False)}
        if is_summary_request(messages):  # as long as the policy's budget allows (summary_reply.py)
            budget = summary_word_budget(messages, int(payload.get("max_tokens") or DEFAULT_MAX_TOKENS))
            return {"role": "assistant", "content": extractive_summary(messages, budget)}
        tools = payload.get("tools") or []
        last = messages[-1] if messages else {}
        if self.tool_calls and tools and last.get("role") == "user" and payload.get("tool_choice") != "none":
            call = self._tool_call(tools, _content_text(last.get("content")))
            if call is not None:
                return {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"role": "assistant", "content": extractive_answer(messages, max_words=min(max_words, 120))}

    def _json_reply(self, messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
        text = "\n".join(_content_text(m.get("content")) for m in messages)
        if '"operations"' in text:
            # A memory-extraction request: remember the first substantial sentence of the last turn.
            last_user = next((_content_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
            sentences = [s.strip() for s in _SENTENCE_SPLIT.split(last_user) if len(s.strip()) > 20]
            ops = [{"op": "add", "text": sentences[-1][:200], "kind": "fact", "topics": ["conversation"]}] if sentences else []
            return {"operations": ops}
        # A judge request. The verdict is a seeded function of the prompt (deterministic per prompt),
        # carrying every key the harness's judges ask for.
        digest = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
        correct = digest % 10 < 6
        return {"correct": correct, "label": "CORRECT" if correct else "WRONG",
                "score": (1.0, 0.8, 0.6, 0.4)[digest % 4], "confidence": 0.8,
                "reason": "verdict of the agentlab test server (deterministic, not a real judgement)"}

    @staticmethod
    def _tool_call(tools: Sequence[dict[str, Any]], query: str) -> dict[str, Any] | None:
        """Call the first search-like tool whose required arguments are all strings."""
        ranked = sorted(tools, key=lambda t: "search" not in str((t.get("function") or {}).get("name", "")))
        for tool in ranked:
            fn = tool.get("function") or {}
            params = fn.get("parameters") or {}
            props = params.get("properties") or {}
            required = params.get("required") or []
            if not required or not all((props.get(r) or {}).get("type") == "string" for r in required):
                continue
            arguments = {r: " ".join(query.split()[:16]) for r in required}
            digest = hashlib.sha256(json.dumps([fn.get("name"), arguments]).encode()).hexdigest()[:12]
            return {"id": f"call_{digest}", "type": "function",
                    "function": {"name": fn.get("name"), "arguments": json.dumps(arguments)}}
        return None

    # ------------------------------------------------------------------------------ HTTP

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; with Nagle on, the body waits for the client's
            # delayed ACK (~40 ms) on every reused connection, which no real server makes clients wait.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # quiet: tests read stats instead
                pass

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _authorised(self) -> bool:
                if server.api_key is None:
                    return True
                if self.headers.get("authorization") == f"Bearer {server.api_key}":
                    return True
                self._send(401, {"error": {"message": "invalid api key", "type": "authentication_error"}})
                return False

            def _read_json(self) -> dict[str, Any] | None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if server.record_requests:
                    with server._lock:
                        server.received_raw.append(raw)
                try:
                    payload = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                    return None
                return payload if isinstance(payload, dict) else {}

            def do_GET(self) -> None:
                path = self.path.split("?")[0].rstrip("/")
                with server._lock:
                    server.stats.requests[f"GET {path}"] += 1
                if not self._authorised():
                    return
                if path == "/v1/models":
                    self._send(200, server.models_body())
                elif path == "/props" and server.window_style == "llamacpp":
                    self._send(200, {"default_generation_settings": {"n_ctx": server.context_window},
                                     "total_slots": 1, "model_path": f"/models/{server.model}.gguf"})
                elif path == "/health":
                    self._send(200, {"status": "ok"})
                else:
                    self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

            def do_POST(self) -> None:
                path = self.path.split("?")[0].rstrip("/")
                with server._lock:
                    server.stats.requests[f"POST {path}"] += 1
                if not self._authorised():
                    return
                payload = self._read_json()
                if payload is None:
                    return
                if path == "/api/show" and server.window_style == "ollama":
                    self._send(200, {"details": {"family": "llama"},
                                     "model_info": {"general.architecture": "llama",
                                                    "llama.context_length": server.context_window}})
                elif path == "/v1/chat/completions":
                    self._chat(payload)
                else:
                    self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

            def _chat(self, payload: dict[str, Any]) -> None:
                if server.record_requests:
                    with server._lock:
                        server.received.append(payload)
                if server.latency:
                    time.sleep(server.latency)
                fault = server._next_fault()
                if fault == "429":
                    self._send(429, {"error": {"message": "rate limit reached, slow down", "type": "rate_limit"}},
                               {"retry-after": "0"})
                    return
                if fault in ("500", "503"):
                    self._send(int(fault), {"error": {"message": "upstream failure (injected)", "type": "server_error"}})
                    return
                if fault == "garbage":
                    self._send(200, b"<html>502 Bad Gateway</html>")
                    return
                if fault == "empty":
                    self._send(200, {"id": "chatcmpl-empty", "object": "chat.completion", "choices": []})
                    return
                if fault == "hang":
                    time.sleep(server.hang_seconds)
                messages = payload.get("messages") or []
                prompt = prompt_tokens(messages, payload.get("tools"))
                needed = prompt + int(payload.get("max_tokens") or payload.get("max_completion_tokens") or 0)
                if server.context_window and needed > server.context_window:
                    with server._lock:
                        server.stats.answers["context_length"] += 1
                    self._send(400, server.too_long_body(needed, prompt))
                    return
                message = server.reply_message(payload)
                completion = _count_tokens(message.get("content") or "") + sum(
                    _count_tokens(c["function"]["arguments"]) for c in message.get("tool_calls") or [])
                usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                         "total_tokens": prompt + completion}
                if server.prefix_cache:
                    usage["prompt_tokens_details"] = {"cached_tokens": server.cached_tokens(messages)}
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                with server._lock:
                    server.stats.answers[finish] += 1
                    server.stats.prompt_tokens.append(prompt)
                if payload.get("stream"):
                    self._stream(message, usage, finish, bool((payload.get("stream_options") or {}).get("include_usage")))
                    return
                self._send(200, {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                                 "model": server.model, "usage": usage,
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish}]})

            def _stream(self, message: dict[str, Any], usage: dict[str, Any], finish: str, with_usage: bool) -> None:
                def chunk(delta: dict[str, Any], finish_reason: str | None = None,
                          extra: dict[str, Any] | None = None) -> bytes:
                    body = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0,
                            "model": server.model,
                            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
                    body.update(extra or {})
                    return f"data: {json.dumps(body)}\n\n".encode()

                parts = [chunk({"role": "assistant", "content": ""})]
                content = message.get("content") or ""
                words = content.split(" ")
                step = max(1, len(words) // 3)
                for i in range(0, len(words), step):
                    piece = " ".join(words[i:i + step]) + (" " if i + step < len(words) else "")
                    parts.append(chunk({"content": piece}))
                for index, call in enumerate(message.get("tool_calls") or []):
                    parts.append(chunk({"tool_calls": [{"index": index, **call}]}))
                parts.append(chunk({}, finish))
                if with_usage:
                    parts.append(f"data: {json.dumps({'id': 'chatcmpl-test', 'object': 'chat.completion.chunk', 'choices': [], 'usage': usage})}\n\n".encode())
                parts.append(b"data: [DONE]\n\n")
                data = b"".join(parts)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def main(argv: Sequence[str] | None = None) -> int:
    """The command line entry point: serve until interrupted (or ``--exit-after``), then print the
    stats; returns the exit code.
    """
    p = argparse.ArgumentParser(prog="python -m agentlab.testing.openai_server",
                                description="Serve a local OpenAI-compatible test endpoint on 127.0.0.1.")
    p.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    p.add_argument("--model", default="test-model", help="model id it serves (default test-model)")
    p.add_argument("--context-window", type=int, default=131_072, help="window in tokens (default 131072)")
    p.add_argument("--window-style", choices=WINDOW_STYLES, default="vllm",
                   help="how the window is stated: vllm, openrouter, llamacpp, ollama, or none (default vllm)")
    p.add_argument("--latency", type=float, default=0.0, help="seconds before each completion (default 0)")
    p.add_argument("--fault-rate", type=float, default=0.0, help="share of completions that fail (default 0)")
    p.add_argument("--faults", default="429,500,garbage",
                   help=f"comma-separated fault kinds out of {','.join(FAULT_KINDS)} (default 429,500,garbage)")
    p.add_argument("--hang-seconds", type=float, default=30.0, help="how long a 'hang' fault waits (default 30)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault schedule (default 0)")
    p.add_argument("--no-tool-calls", action="store_true", help="never call tools, even when offered")
    p.add_argument("--api-key", help="require this bearer token (default: accept any)")
    p.add_argument("--exit-after", type=float, default=None, help="stop by itself after this many seconds")
    args = p.parse_args(argv)
    try:
        server = OpenAITestServer(
            model=args.model, context_window=args.context_window, window_style=args.window_style,
            latency=args.latency, fault_rate=args.fault_rate,
            faults=[f for f in args.faults.split(",") if f], hang_seconds=args.hang_seconds, seed=args.seed,
            tool_calls=not args.no_tool_calls, api_key=args.api_key, port=args.port)
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    window = "no window" if args.window_style == "none" else f"window {args.context_window} stated the {args.window_style} way"
    print(f"serving {server.base_url} ({window}); use --model {server.model_spec}", flush=True)
    stop.wait(args.exit_after)
    server.stop()
    print(json.dumps(server.stats.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
