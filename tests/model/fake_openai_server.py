"""A tiny OpenAI-compatible HTTP server on 127.0.0.1 for tests: it plays back scripted answers."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    status: int = 200
    body: str | dict[str, Any] = ""
    headers: dict[str, str] = field(default_factory=dict)
    #: When set, the answer is an SSE stream of these chunks (dicts as JSON, strings raw) and [DONE].
    stream_chunks: list[dict[str, Any] | str] | None = None
    #: Seconds to wait before answering (to provoke client timeouts).
    delay: float = 0.0


def completion(content: str | None = "ok", *, tool_calls: list[dict[str, Any]] | None = None,
               usage: dict[str, Any] | None = None, finish_reason: str = "stop") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def error_body(message: str, *, type_: str = "invalid_request_error", **extra: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, **extra}}


def stream_chunks(pieces: list[str], usage: dict[str, Any] | None = None) -> list[dict[str, Any] | str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "fake",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in pieces]
    out.append(chunk({}, "stop"))
    if usage is not None:
        out.append({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "fake",
                    "choices": [], "usage": usage})
    return out


class FakeOpenAIServer:
    """Answers POST /v1/chat/completions from a script; the last answer repeats when it runs out.

    ``routes`` answers other paths (GET or POST, e.g. ``/v1/models``, ``/props``, ``/api/show``)
    with a fixed JSON body (or an :class:`Answer` for another status); any other path is a 404. ``probes`` lists the (method, path) asked.
    """

    def __init__(self, answers: list[Answer], routes: dict[str, Any] | None = None) -> None:
        self.answers = list(answers)
        self.routes = dict(routes or {})
        self.requests: list[dict[str, Any]] = []
        self.probes: list[tuple[str, str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _route(self, method: str, payload: Any) -> None:
                with server._lock:
                    server.probes.append((method, self.path, payload))
                body: Any = server.routes.get(self.path)
                status = 200 if body is not None else 404
                if isinstance(body, Answer):  # a route with its own status (e.g. 401)
                    status, body = body.status, body.body
                data = json.dumps(body if body is not None else {"error": "not found"}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._route("GET", None)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                payload = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self._route("POST", payload)
                    return
                with server._lock:
                    server.requests.append(payload)
                    answer = server.answers.pop(0) if len(server.answers) > 1 else server.answers[0]
                if answer.delay:
                    time.sleep(answer.delay)
                if answer.stream_chunks is not None:
                    self.send_response(answer.status)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    for item in answer.stream_chunks:
                        data = item if isinstance(item, str) else json.dumps(item)
                        self.wfile.write(f"data: {data}\n\n".encode())
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                body = answer.body if isinstance(answer.body, str) else json.dumps(answer.body)
                data = body.encode()
                self.send_response(answer.status)
                self.send_header("content-type", answer.headers.get("content-type", "application/json"))
                for key, value in answer.headers.items():
                    if key != "content-type":
                        self.send_header(key, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A client that timed out hangs up mid-answer; that broken pipe is expected, not news.
        self._httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
