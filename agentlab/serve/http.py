"""A small HTTP/1.1 server on asyncio streams: keep-alive, Content-Length bodies, chunked streams.

Enough for OpenAI clients (httpx underneath) and nothing more; the standard library's
``http.server`` is thread-per-request and cannot share the proxy's event loop, and a framework
would be a new dependency for three routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


@dataclass
class HTTPRequest:
    """One request: method, path (without the query), lower-case headers and the body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HTTPResponse:
    """A response: a whole body, or an async iterator of pieces sent with chunked encoding.

    ``on_close`` runs once the response is over (sent, failed or abandoned by the client).
    """

    status: int
    body: bytes | AsyncIterator[bytes]
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    on_close: Callable[[], Awaitable[None]] | None = None


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> HTTPResponse:
    """A JSON response."""
    return HTTPResponse(status, json.dumps(payload, ensure_ascii=False).encode(), dict(headers or {}))


Handler = Callable[[HTTPRequest], Awaitable[HTTPResponse]]


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, str, dict[str, str]] | None:
    line = await reader.readline()
    if not line:
        return None
    try:
        method, target, version = line.decode("latin-1").split()
    except ValueError:
        raise ValueError("malformed request line") from None
    headers: dict[str, str] = {}
    size = len(line)
    while True:
        raw = await reader.readline()
        size += len(raw)
        if size > MAX_HEADER_BYTES:
            raise ValueError("request headers too large")
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return method.upper(), target, version, headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        total = 0
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return b"".join(parts)
            total += size
            if total > MAX_BODY_BYTES:
                raise ValueError("request body too large")
            parts.append(await reader.readexactly(size))
            await reader.readline()
    length = int(headers.get("content-length") or 0)
    if length > MAX_BODY_BYTES:
        raise ValueError("request body too large")
    return await reader.readexactly(length) if length else b""


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class HTTPServer:
    """Serves ``handler`` on ``host:port`` (port 0 = a free one)."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        """Bind and start accepting connections."""
        self._server = await asyncio.start_server(self._serve_connection, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop accepting and drop the open connections."""
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            while True:
                try:
                    head = await _read_head(reader)
                    if head is None:
                        return
                    method, target, version, headers = head
                    body = await _read_body(reader, headers)
                except (ValueError, asyncio.IncompleteReadError) as exc:
                    writer.write(_head(400, {"content-type": "application/json", "content-length": "0",
                                             "connection": "close"}))
                    log.debug("bad request: %s", exc)
                    return
                request = HTTPRequest(method, target.split("?", 1)[0], headers, body)
                try:
                    response = await self.handler(request)
                except Exception as exc:  # the handler's own bug: answer 500 and keep serving
                    log.exception("handler failed")
                    response = json_response(500, {"error": {"message": f"internal error: {exc}",
                                                             "type": "server_error", "code": "internal_error"}})
                keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                await self._write(writer, response, keep_alive)
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _write(self, writer: asyncio.StreamWriter, response: HTTPResponse, keep_alive: bool) -> None:
        headers = {"content-type": response.content_type, **response.headers}
        headers["connection"] = "keep-alive" if keep_alive else "close"
        body = response.body
        try:
            if isinstance(body, bytes):
                headers["content-length"] = str(len(body))
                writer.write(_head(response.status, headers) + body)
                await writer.drain()
                return
            headers["transfer-encoding"] = "chunked"
            writer.write(_head(response.status, headers))
            async for piece in body:
                if piece:
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            if not isinstance(body, bytes):
                aclose = getattr(body, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception):
                        await aclose()
            if response.on_close is not None:
                await response.on_close()
