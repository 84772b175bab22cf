"""Opening a DuckDB file: with an error a user can act on, and for a service that keeps it open.

DuckDB's own messages for the two common mistakes — the file is held by another process (a
notebook kernel, a second run), or it is not a DuckDB file at all — are long and name no fix.
:func:`connect` turns them into one sentence that says what the file is, what is wrong, and what
to do. DuckDB never writes to a file it refused to open, so nothing stored in it is touched.

:class:`DuckDBService` is the connection lifecycle of the asyncio services stored in one file
(``DuckDBSessionService``, ``DuckDBMemoryService``): the file is opened on the first call and one
connection is kept until :meth:`~DuckDBService.close`; a closed service reopens the file on its
next call; every call runs in a worker thread under a threading lock. A synchronous owner (the
call cache, the embedding cache) holds :attr:`~DuckDBService.lock` around
:meth:`~DuckDBService.connection` instead, so every DuckDB file agentlab keeps open goes through
this one class.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from pathlib import Path
from types import TracebackType
from typing import ClassVar, TypeVar

import duckdb

_T = TypeVar("_T")
_S = TypeVar("_S", bound="DuckDBService")


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """``BEGIN`` ... ``COMMIT`` around the block, or ``ROLLBACK`` when it raises (all or nothing)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


class DatabaseFileError(RuntimeError):
    """A DuckDB file cannot be opened; the message names the file, the cause and the fix."""


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def describe(path: str | Path, exc: BaseException, what: str, fix: str) -> str:
    """One sentence on why ``path`` (a ``what``) could not be opened, ending with ``fix``."""
    text = str(exc)
    if "lock" in text.lower():
        pid = re.search(r"PID (\d+)", text)
        holder = f" (PID {pid.group(1)})" if pid else ""
        return (f"{what} {path} is in use by another process{holder}; close that process "
                f"(a notebook kernel, another run) or {fix}")
    if "not a valid DuckDB database" in text or "database file" in text.lower():
        return f"{what} {path} is not a readable DuckDB file ({_first_line(text)}); move it away or {fix}"
    return f"cannot open {what} {path}: {_first_line(text)}; {fix}"


def connect(path: str | Path | None, *, read_only: bool = False, what: str = "DuckDB file",
            fix: str = "choose another file") -> duckdb.DuckDBPyConnection:
    """``duckdb.connect`` (``None`` = in memory) raising :class:`DatabaseFileError` with a clear message."""
    target = ":memory:" if path is None else str(path)
    try:
        return duckdb.connect(target, read_only=read_only)
    except duckdb.Error as exc:
        raise DatabaseFileError(describe(target, exc, what, fix)) from exc


class DuckDBService:
    """One DuckDB connection to ``path`` (``":memory:"`` also works), for an asyncio service.

    DuckDB lets only one process open a file for writing, so the file is opened on the first call
    (its parent folder created, :attr:`schema` run) and kept open until :meth:`close` or the end of
    an ``async with`` block; a closed service reopens it on its next call. :meth:`_run` runs a
    function of the connection in a worker thread under a threading lock, so calls from several
    tasks (and threads) take turns on the one connection.

    A subclass names the file in errors (:attr:`what`), gives its tables (:attr:`schema`), may set
    connection options (:meth:`_config`) and drops what it caches about the file in
    :meth:`_forget`, which runs under the lock whenever the connection is opened or closed.
    """

    #: What the file is, for the error raised when it cannot be opened (``cannot open <what> <path>: ...``).
    what: ClassVar[str] = "DuckDB file"
    #: The statements run on every open (``CREATE TABLE IF NOT EXISTS ...``).
    schema: ClassVar[Sequence[str]] = ()
    #: What the user can do when the file cannot be opened. When set, the error is a
    #: :class:`DatabaseFileError` worded by :func:`describe` (held by another process, not a DuckDB
    #: file) and ending with this fix; when ``None``, ``cannot open <what> <path>: <DuckDB's message>``.
    fix: ClassVar[str | None] = None

    def __init__(self, path: str | Path) -> None:
        self.path = path if str(path) == ":memory:" else Path(path)
        self._connection: duckdb.DuckDBPyConnection | None = None
        self._db_lock = threading.Lock()

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection and release the file for other processes; the next call reopens it."""
        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:
        """:meth:`close` for code without an event loop (``atexit`` handlers, finalisers, notebooks)."""
        with self._db_lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
                self._forget()

    def _config(self) -> dict[str, str | bool | int | float | list[str]]:
        """DuckDB options of the connection (``duckdb.connect(config=...)``), read at each open."""
        return {}

    def _forget(self) -> None:
        """Drop what the service caches about the file (the connection was opened or closed); under the lock."""

    def _open(self) -> duckdb.DuckDBPyConnection:
        """The connection, opening the file first if needed; call it holding the lock."""
        if self._connection is None:
            if isinstance(self.path, Path):
                self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                con = duckdb.connect(str(self.path), config=self._config())
            except duckdb.Error as exc:
                if self.fix is not None:
                    raise DatabaseFileError(describe(self.path, exc, self.what, self.fix)) from exc
                raise RuntimeError(f"cannot open {self.what} {self.path}: {exc}") from None
            for statement in self.schema:
                con.execute(statement)
            self._forget()
            self._connection = con
        return self._connection

    @property
    def lock(self) -> threading.Lock:
        """The threading lock every use of the connection holds; a synchronous owner takes it around :meth:`connection`."""
        return self._db_lock

    def connection(self) -> duckdb.DuckDBPyConnection:
        """The connection, the file opened first if needed, for a synchronous owner holding :attr:`lock`."""
        return self._open()

    def _locked(self, work: Callable[[duckdb.DuckDBPyConnection], _T]) -> _T:
        with self._db_lock:
            return work(self._open())

    async def _run(self, work: Callable[[duckdb.DuckDBPyConnection], _T], executor: Executor | None = None) -> _T:
        """``work(connection)`` in a worker thread (of ``executor``, else asyncio's default), under the lock."""
        if executor is None:
            return await asyncio.to_thread(self._locked, work)
        return await asyncio.get_running_loop().run_in_executor(executor, self._locked, work)
