"""Shared pieces of the serve tests: tool declarations, a big tool result, a scripted upstream."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SEARCH_TOOL = {"type": "function", "function": {
    "name": "search_docs", "description": "Search the documentation.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}

#: A tool result far over compaction's 1,024-token limit (about 2,400 tokens).
BIG_RESULT = " ".join(f"Record {i}: the Lisbon office opened in {1900 + i} and employs {i * 3} people."
                      for i in range(160))

OFFICE_SYSTEM = {"role": "system", "content": "You answer questions about the company's offices."}


def office_conversation(server: Any, key: str, turns: int = 3, arm: str | None = None) -> None:
    """``turns`` rounds through the openai client: a question, the search the model asks for (``BIG_RESULT``),
    the answer. ``arm`` names another arm for these calls (the ``X-Agentlab-Arm`` header).
    """
    import openai

    headers = {"x-agentlab-arm": arm} if arm else None
    client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0, default_headers=headers)
    messages: list[Any] = [OFFICE_SYSTEM]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Question {turn} about the Lisbon office?"})
        call = client.chat.completions.create(model="test-model", messages=messages, tools=[SEARCH_TOOL])
        message = call.choices[0].message
        messages += [message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": BIG_RESULT}]
        answer = client.chat.completions.create(model="test-model", messages=messages, tools=[SEARCH_TOOL])
        messages.append({"role": "assistant", "content": answer.choices[0].message.content})


class ScriptedUpstream:
    """An upstream that answers each chat completion with the next scripted raw SSE body.

    A script entry is a list of ``data:`` payloads (dicts, or raw strings sent as they are); the
    sentinel ``"<drop>"`` closes the connection mid-stream, ``"<sleep>"`` pauses half a second.
    """

    def __init__(self, scripts: list[list[Any]]) -> None:
        self.scripts = list(scripts)
        self.received: list[dict[str, Any]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                payload = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                upstream.received.append(payload)
                script = upstream.scripts.pop(0)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for item in script:
                    if item == "<sleep>":
                        time.sleep(0.5)
                        continue
                    if item == "<drop>":
                        self.wfile.flush()
                        self.connection.shutdown(2)
                        return
                    data = item if isinstance(item, str) else json.dumps(item)
                    self.wfile.write(f"data: {data}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """Its OpenAI base URL."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def close(self) -> None:
        """Stop it."""
        self._httpd.shutdown()
        self._httpd.server_close()


def delta_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One upstream stream chunk."""
    return {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "test-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class RecordingUpstream:
    """An upstream that records the method, path and ``Authorization`` of every request it gets.

    ``GET /v1/models`` lists one model (``model-0``, window 32,768); any other GET answers its own
    path as a model object; ``POST /v1/chat/completions`` answers "ok".
    """

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, payload: Any) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                seen.append(("GET", self.path, self.headers.get("authorization", "")))
                if self.path == "/v1/models":
                    self._answer(200, {"object": "list", "data": [{"id": "model-0", "max_model_len": 32768}]})
                else:
                    self._answer(200, {"id": "m", "object": "model", "path": self.path})

            def do_POST(self) -> None:
                seen.append(("POST", self.path, self.headers.get("authorization", "")))
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                self._answer(200, {"id": "c", "object": "chat.completion", "created": 1, "model": body.get("model"),
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": "ok"}}],
                                   "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def close(self) -> None:
        """Stop it."""
        self._httpd.shutdown()
        self._httpd.server_close()
