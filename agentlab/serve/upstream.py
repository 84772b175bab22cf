"""A lean HTTP/1.1 client for the upstream: pooled keep-alive connections on asyncio streams.

The proxy sends every call upstream, so the client's own cost is the proxy's floor: httpx spends
about 2 ms of CPU per request here (measured against the test server; its connection pool scans
every connection per request), this client about 0.4 ms. It does what the proxy needs and no
more: ``Content-Length`` and chunked bodies, event streams read line by line, a timeout per read
(the head is one read),
one retry on a fresh connection when a reused idle one turns out closed before any byte came back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import sys
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from agentlab.serve.wire import error_body

#: ``asyncio.timeout`` (Python 3.11+), else ``None`` (``asyncio.wait_for`` then).
_TIMEOUT: Any = getattr(asyncio, "timeout", None) if sys.version_info >= (3, 11) else None
#: Bytes of a request body beyond which it is written after its head rather than joined to it.
_LARGE_BODY = 1 << 20
#: What a header line sent upstream may not hold (it would end the line and start another header).
_BREAKS_LINE = re.compile(r"[\r\n\x00]")


#: Bytes handed to the transport at once when a body is written (then the write waits for the socket).
WRITE_PIECE = 1 << 20


async def _write_in_pieces(writer: asyncio.StreamWriter, data: bytes | bytearray) -> None:
    """Write ``data`` at most :data:`WRITE_PIECE` bytes at a time, draining in between.

    One ``write`` of tens of megabytes makes the transport copy what the socket did not take into
    its buffer and, on every later send, move the rest of that buffer to its front (Python 3.11's
    ``bytearray`` buffer): hundreds of milliseconds on the event loop for a 60 MB request.
    """
    view = memoryview(data)
    for start in range(0, len(view), WRITE_PIECE):
        writer.write(view[start:start + WRITE_PIECE])
        await writer.drain()
    if not view:
        await writer.drain()


class UpstreamError(Exception):
    """The upstream could not be reached or answered something that is not HTTP; ``timeout`` says which."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class UpstreamResponse:
    """A response whose head was read; read the body with :meth:`read` or :meth:`lines`, then :meth:`close`."""

    def __init__(self, client: UpstreamClient, conn: _Connection, status: int, headers: dict[str, str]) -> None:
        self._client = client
        self._conn: _Connection | None = conn
        self.status = status
        self.headers = headers
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._remaining = int(length) if length is not None and not self._chunked else None
        self._until_eof = not self._chunked and self._remaining is None
        self._done = self._remaining == 0

    async def _read_some(self) -> bytes:
        """The next piece of the body (``b""`` at its end)."""
        conn = self._conn
        if self._done or conn is None:
            return b""
        read = self._client._timed
        if self._chunked:
            size_line = await read(conn.reader.readline())
            try:
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
            except ValueError:
                raise UpstreamError(f"upstream sent a bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                while (await read(conn.reader.readline())) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                self._done = True
                return b""
            data = await read(conn.reader.readexactly(size + 2))
            return data[:-2]
        if self._remaining is not None:
            data = await read(conn.reader.read(min(self._remaining, 65536)))
            if not data:
                raise UpstreamError("upstream closed the connection before the end of the body")
            self._remaining -= len(data)
            self._done = self._remaining <= 0
            return data
        data = await read(conn.reader.read(65536))
        self._done = not data
        return data

    async def read(self) -> bytes:
        """The whole body."""
        parts = []
        try:
            while piece := await self._read_some():
                parts.append(piece)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            await self.close()
            raise UpstreamError(f"upstream connection broke while reading: {exc!r}") from None
        await self.close()
        return b"".join(parts)

    async def lines(self) -> AsyncIterator[str]:
        """The body line by line (an event stream), without line endings."""
        buffer = b""
        try:
            while piece := await self._read_some():
                buffer += piece
                *complete, buffer = buffer.split(b"\n")
                for line in complete:
                    yield line.rstrip(b"\r").decode("utf-8", "replace")
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            await self.close()
            raise UpstreamError(f"upstream stream broke: {exc!r}") from None
        if buffer:
            yield buffer.rstrip(b"\r").decode("utf-8", "replace")

    async def close(self) -> None:
        """Give the connection back when the body was read to its end (and the server keeps it), else drop it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and not self._until_eof and self.headers.get("connection", "").lower() != "close":
            self._client._release(conn)
        else:
            conn.close()


class UpstreamClient:
    """Pooled keep-alive connections to one upstream (``http`` or ``https``)."""

    def __init__(self, base_url: str, *, timeout: float = 60.0, max_idle: int = 128) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream must be an http(s) URL, got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.prefix = parts.path.rstrip("/")
        self.host_header = parts.netloc
        self.timeout = timeout
        self.max_idle = max_idle
        self._idle: list[_Connection] = []

    async def _timed(self, awaitable: Any) -> bytes:
        try:
            if _TIMEOUT is not None:  # a timer on this task; wait_for would make a task per read
                async with _TIMEOUT(self.timeout):
                    return bytes(await awaitable)
            return bytes(await asyncio.wait_for(awaitable, self.timeout))
        except asyncio.TimeoutError:
            raise UpstreamError(f"no answer from {self.host}:{self.port} within {self.timeout:g} s",
                                timeout=True) from None

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=2 ** 22),
                min(self.timeout, 10.0))
        except asyncio.TimeoutError:
            raise UpstreamError(f"connecting to {self.host}:{self.port} timed out", timeout=True) from None
        except OSError as exc:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        return _Connection(reader, writer)

    def _release(self, conn: _Connection) -> None:
        if len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    async def request(self, method: str, path: str, headers: dict[str, str],
                      body: bytes | bytearray = b"") -> UpstreamResponse:
        """Send a request to ``<base path><path>``; the response with its head read."""
        head = [f"{method} {self.prefix}{path} HTTP/1.1", f"host: {self.host_header}",
                f"content-length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        if any(_BREAKS_LINE.search(line) for line in head):  # the server refuses them; this guards the rest
            raise ValueError("a header sent upstream may not hold a CR, LF or NUL character")
        request_head = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        # One write (one segment) for a usual body; a large one is not copied behind its head on the loop.
        pieces = [request_head + body] if len(body) < _LARGE_BODY else [request_head, body]
        for attempt in (0, 1):
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            try:
                for piece in pieces:
                    await _write_in_pieces(conn.writer, piece)
                # The whole head in one read (one timer, not one per header line).
                head_bytes = await self._timed(conn.reader.readuntil(b"\r\n\r\n"))
            except asyncio.IncompleteReadError as exc:
                conn.close()
                if not exc.partial and reused and attempt == 0:
                    continue  # an idle connection the server had closed: once more, on a new one
                what = "closed before answering" if not exc.partial else f"sent an incomplete head {exc.partial[:60]!r}"
                raise UpstreamError(f"upstream {self.host}:{self.port} {what}") from None
            except asyncio.LimitOverrunError:
                conn.close()
                raise UpstreamError(f"upstream {self.host}:{self.port} sent a response head over 4 MiB") from None
            except (ConnectionError, OSError) as exc:
                conn.close()
                if reused and attempt == 0:
                    continue  # an idle connection the server had closed: once more, on a new one
                raise UpstreamError(f"upstream {self.host}:{self.port} dropped the request: {exc!r}") from None
            except UpstreamError:
                conn.close()
                raise
            status_line, *header_lines = head_bytes[:-4].decode("latin-1").split("\r\n")
            try:
                if not status_line.startswith("HTTP/"):
                    raise ValueError(status_line)
                status = int(status_line.split()[1])
            except (IndexError, ValueError):
                conn.close()
                raise UpstreamError(f"upstream answered something that is not HTTP: {status_line[:60]!r}") from None
            headers_in: dict[str, str] = {}
            for line in header_lines:
                name, _, value = line.partition(":")
                headers_in[name.strip().lower()] = value.strip()
            return UpstreamResponse(self, conn, status, headers_in)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class UpstreamFailure(Exception):
    """An upstream call that did not produce a usable answer: the status and body to pass on."""

    def __init__(self, status: int, body: dict[str, Any], outcome: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("error", {}).get("message", outcome))
        self.status = status
        self.body = body
        self.outcome = outcome
        self.headers = headers or {}


def openai_error(status: int, raw: bytes) -> dict[str, Any]:
    """An upstream error body in the OpenAI shape (vLLM's and plain-text bodies are wrapped)."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return data
    if isinstance(data, dict) and data.get("message"):
        return error_body(str(data["message"]), str(data.get("type") or "upstream_error"), code=status)
    text = raw.decode("utf-8", "replace").strip()[:300] or f"HTTP {status}"
    return error_body(f"upstream answered HTTP {status}: {text}", "upstream_error", code=status)
