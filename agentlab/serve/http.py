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
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentlab.serve.memory import ByteBudget, Hold

log = logging.getLogger(__name__)
_T = TypeVar("_T")
#: ``asyncio.timeout`` (Python 3.11+), else ``None`` (``asyncio.wait_for`` then).
_TIMEOUT: Any = getattr(asyncio, "timeout", None) if sys.version_info >= (3, 11) else None

MAX_HEADER_BYTES = 64 * 1024
#: Bytes read from a connection at a time for a large body.
_READ_PIECE = 1 << 20
#: A chunk size: hex digits only.
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
#: What a header value may not hold (RFC 9110 5.5: a CR, LF or NUL in a field value is refused).
_BAD_HEADER_VALUE = re.compile(r"[\r\n\x00]")
#: Default request body cap (``--max-body-bytes``).
MAX_BODY_BYTES = 64 * 1024 * 1024
#: Request bodies over this many bytes are admitted against the server's large-body budget.
ADMIT_OVER = 1 << 20
#: Default bytes of large request bodies in flight at once (read, being handled, or held by the
#: handler until its work on them is done, e.g. the proxy's ledger write): one body of the default
#: ``--max-body-bytes``. A large request beyond it waits (its body not read yet) until earlier ones
#: are let go, at most ``--idle-timeout`` seconds (then a 503); one larger than the whole budget
#: is admitted alone.
LARGE_BODY_BUDGET = MAX_BODY_BYTES
#: Default seconds a request's head may take to arrive, from its first byte (``--head-timeout``).
HEAD_TIMEOUT = 10.0
#: Default seconds a connection may sit without a request (and a body may take; ``--idle-timeout``).
IDLE_TIMEOUT = 60.0
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 413: "Payload Too Large", 429: "Too Many Requests",
            500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


class BadRequest(Exception):
    """A request that cannot be read: the status to answer with and a one-line message."""

    def __init__(self, status: int, message: str, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.code = code

    def payload(self) -> bytes:
        """The OpenAI-shaped error body."""
        kind = "server_error" if self.status >= 500 else "invalid_request_error"
        return json.dumps({"error": {"message": str(self), "type": kind, "param": None, "code": self.code}}).encode()


@dataclass
class HTTPRequest:
    """One request: method, path (without the query), lower-case headers, the body and the query string.

    A body over 1 MiB is the ``bytearray`` it was read into (not copied into ``bytes``). ``hold``
    is its bytes admitted against the server's large-body budget (a body over :data:`ADMIT_OVER`):
    a handler still using the body's copies after its answer keeps them held with
    ``hold.extend()``.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes | bytearray
    query: str = ""
    hold: Hold | None = None


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


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readline()
    except ValueError:  # longer than the stream's line limit
        raise BadRequest(413, "a request header line is too long", "request_too_large") from None


async def _read_head(reader: asyncio.StreamReader, first: bytes) -> tuple[str, str, str, dict[str, str]]:
    try:
        method, target, version = first.decode("latin-1").split()
    except ValueError:
        raise BadRequest(400, "malformed request line") from None
    headers: dict[str, str] = {}
    size = len(first)
    while True:
        raw = await _read_line(reader)
        size += len(raw)
        if size > MAX_HEADER_BYTES:
            raise BadRequest(413, f"request headers over {MAX_HEADER_BYTES} bytes", "request_too_large")
        if raw in (b"\r\n", b"\n"):
            break
        if not raw:
            raise asyncio.IncompleteReadError(b"", None)
        name, _, value = raw.decode("latin-1").partition(":")
        value = value.strip()
        if _BAD_HEADER_VALUE.search(value):
            # A bare CR would end the line where this header is forwarded (Authorization upstream).
            raise BadRequest(400, f"header {name.strip()[:40]!r} holds a CR, LF or NUL character")
        headers[name.strip().lower()] = value
    return method.upper(), target, version, headers


def _too_large(limit: int) -> BadRequest:
    return BadRequest(413, f"the request body is over this server's limit of {limit} bytes (--max-body-bytes)",
                      "request_too_large")


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str], limit: int) -> bytes | bytearray:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        joined = bytearray()
        total = 0
        while True:
            line = (await _read_line(reader)).split(b";")[0].strip()
            if not _CHUNK_SIZE.fullmatch(line):  # int() would take "-5", "+5", "0x5", "1_0"
                raise BadRequest(400, f"malformed chunk size {line[:20]!r} in a chunked body (hex digits only)")
            size = int(line, 16)
            if size == 0:
                await reader.readline()
                return b"".join(parts) if total <= _READ_PIECE else joined
            total += size
            if total > limit:
                raise _too_large(limit)
            while size:  # a large chunk in pieces too
                piece = await reader.readexactly(min(size, _READ_PIECE))
                size -= len(piece)
                if total <= _READ_PIECE:
                    parts.append(piece)
                else:  # past a piece, gathered in one bytearray (the body, not joined again at the end)
                    if parts:
                        joined += b"".join(parts)
                        parts.clear()
                    joined += piece
            await reader.readline()
    try:
        length = int(headers.get("content-length") or 0)
    except ValueError:
        raise BadRequest(400, f"Content-Length is not a number: {headers['content-length'][:40]!r}") from None
    if length < 0:
        raise BadRequest(400, "Content-Length is negative")
    if length > limit:
        raise _too_large(limit)
    if length <= _READ_PIECE:
        return await reader.readexactly(length) if length else b""
    # A large body in pieces: one readexactly would copy the whole of it several times in one
    # step of the event loop (the stream's buffer grows, then is sliced and copied).
    # The bytearray itself is the request's body: a bytes() of it was one more copy of tens of
    # megabytes, made in one call holding the interpreter lock.
    body = bytearray()
    async for piece in _pieces(reader, length):
        body += piece
    if len(body) < length:
        raise asyncio.IncompleteReadError(b"", length)
    return body


async def _pieces(reader: asyncio.StreamReader, size: int) -> AsyncIterator[bytes]:
    """The next ``size`` bytes of ``reader``, at most :data:`_READ_PIECE` at a time (fewer if it ends)."""
    while size > 0:
        piece = await reader.read(min(_READ_PIECE, size))
        if not piece:
            return
        size -= len(piece)
        yield piece


async def _drop(reader: asyncio.StreamReader, size: int) -> None:
    """Read and forget ``size`` bytes, a piece at a time."""
    async for _ in _pieces(reader, size):
        pass


def _declared_length(headers: dict[str, str]) -> int:
    """The body's ``Content-Length`` when it is a number, else 0 (:func:`_read_body` says what is wrong)."""
    try:
        return int(headers.get("content-length") or 0)
    except ValueError:
        return 0


async def _within(seconds: float, work: Coroutine[Any, Any, _T]) -> _T:
    """``await work``, or ``asyncio.TimeoutError`` after ``seconds``."""
    if _TIMEOUT is not None:  # a timer on this task; wait_for would make a task per read
        async with _TIMEOUT(seconds):
            return await work
    return await asyncio.wait_for(work, seconds)


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class HTTPServer:
    """Serves ``handler`` on ``host:port`` (port 0 = a free one).

    A connection is closed when no request starts within ``idle_timeout`` seconds (the first one
    included), when a head does not arrive whole within ``head_timeout`` seconds of its first byte,
    or when a body takes longer than ``idle_timeout``; all before any route or key check, so
    half-sent requests cannot pile up. A request begun and not finished in time gets a 408 first;
    one that cannot be read (a malformed chunk size, a CR, LF or NUL inside a header value) a 4xx.

    A body over :data:`ADMIT_OVER` bytes is admitted against ``large_body_budget`` bytes of such
    bodies in flight (a :class:`~agentlab.serve.memory.ByteBudget`; see :data:`LARGE_BODY_BUDGET`)
    before it is read (a chunked one, whose length is not said, after); smaller ones never wait.
    """

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0, *,
                 max_body_bytes: int = MAX_BODY_BYTES, head_timeout: float = HEAD_TIMEOUT,
                 idle_timeout: float = IDLE_TIMEOUT, large_body_budget: int = LARGE_BODY_BUDGET) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.max_body_bytes = max_body_bytes
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        #: The large bodies in flight (see the class docstring).
        self.budget = ByteBudget(large_body_budget)
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
                started = False
                try:
                    first = await _within(self.idle_timeout, _read_line(reader))
                    if not first:
                        return
                    started = True
                    method, target, version, headers = await _within(self.head_timeout, _read_head(reader, first))
                    hold = await self._admit(reader, _declared_length(headers))
                    try:
                        body = await _within(self.idle_timeout, _read_body(reader, headers, self.max_body_bytes))
                        if hold is None and len(body) > ADMIT_OVER:  # a chunked body: admitted once read
                            hold = await self._admit(None, len(body))
                    except BaseException:
                        if hold is not None:
                            hold.release()
                        raise
                except asyncio.TimeoutError:
                    log.debug("connection closed: a request did not arrive in time")
                    if started:  # a request begun and not finished: say so before closing
                        await self._refuse(writer, BadRequest(
                            408, "the request did not arrive whole in time (--head-timeout for its head, "
                                 "--idle-timeout for its body)", "request_timeout"))
                    return
                except asyncio.IncompleteReadError:
                    return
                except BadRequest as exc:
                    log.debug("bad request: %s", exc)
                    await self._refuse(writer, exc)
                    return
                path, _, query = target.partition("?")
                request = HTTPRequest(method, path, headers, body, query, hold)
                del body
                try:
                    try:
                        response = await self.handler(request)
                    except Exception as exc:  # the handler's own bug: answer 500 and keep serving
                        log.exception("handler failed")
                        response = json_response(500, {"error": {"message": f"internal error: {exc}",
                                                                 "type": "server_error", "code": "internal_error"}})
                    keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                    await self._write(writer, response, keep_alive)
                finally:
                    del request
                    if hold is not None:
                        hold.release()
                        hold = None
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _admit(self, reader: asyncio.StreamReader | None, size: int) -> Hold | None:
        """Wait until a body of ``size`` bytes, if over :data:`ADMIT_OVER` and within the body cap,
        fits in the budget (``None`` for any other); :class:`BadRequest` 503 after ``idle_timeout``,
        once the unread body (from ``reader``) was read and dropped a piece at a time, so that the
        client, still sending, gets the answer instead of a reset connection.
        """
        if size <= ADMIT_OVER or size > self.max_body_bytes:
            return None
        try:
            return await _within(self.idle_timeout, self.budget.acquire(size))
        except asyncio.TimeoutError:
            if reader is not None:
                with contextlib.suppress(Exception):
                    await _within(self.idle_timeout, _drop(reader, size))
            raise BadRequest(503, f"large requests in flight held this server's budget of {self.budget.limit} "
                                  f"bytes of large bodies for {self.idle_timeout:g} s; retry later",
                             "server_busy") from None

    @staticmethod
    async def _refuse(writer: asyncio.StreamWriter, exc: BadRequest) -> None:
        """Answer a request that could not be read with its error (the connection closes after it)."""
        payload = exc.payload()
        writer.write(_head(exc.status, {"content-type": "application/json", "content-length": str(len(payload)),
                                        "connection": "close"}) + payload)
        with contextlib.suppress(Exception):
            await writer.drain()

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
