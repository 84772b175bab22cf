"""Scope locks: one per (app, user, session, filter key), released and forgotten when unused.

Two updates of one scope must not interleave (each reads the previous summary and writes the
next); updates of different scopes may.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

LockKey = tuple[str, str, str, str]


class _ScopeLocks:
    """Process-local locks with a reference count, so idle scopes cost nothing."""

    def __init__(self) -> None:
        self._locks: dict[LockKey, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: LockKey) -> AsyncIterator[None]:
        lock, refs = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, refs + 1)
        try:
            async with lock:
                yield
        finally:
            lock, refs = self._locks[key]
            if refs <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, refs - 1)

    def __len__(self) -> int:
        return len(self._locks)


#: Shared by every worker in the process: two workers on one session still serialise.
SCOPE_LOCKS = _ScopeLocks()

