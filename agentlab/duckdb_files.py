"""Opening a DuckDB file with an error a user can act on.

DuckDB's own messages for the two common mistakes — the file is held by another process (a
notebook kernel, a second run), or it is not a DuckDB file at all — are long and name no fix.
:func:`connect` turns them into one sentence that says what the file is, what is wrong, and what
to do. DuckDB never writes to a file it refused to open, so nothing stored in it is touched.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb


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
