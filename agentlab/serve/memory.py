"""What the proxy does so that memory freed after a large request can go back to the system.

A 60 MB request passes through the proxy as a few copies of its text (the body, its parsed
strings, the ledger's JSON), each freed once the call ends. glibc's ``malloc`` serves blocks of
megabytes from ``mmap`` at first, then (its threshold rising with every such block freed, up to
32 MiB) from its heaps, where freed megabytes can stay in the process. Whether this is what keeps
the proxy's RSS high after many large requests is not established (``docs/serve_durability.md``
says what was measured); it costs nothing to rule out. So, on glibc only:

* :func:`hand_back_large_blocks` fixes the ``mmap`` threshold at :data:`MMAP_THRESHOLD` (a block
  that large is mapped on its own and unmapped when freed) and caps glibc's arenas at
  :data:`ARENA_MAX` (every thread that finds the arenas busy makes one more, up to 8 per core, and
  each keeps the free blocks of its own; the proxy's threads are DuckDB's, the ledger writer's, the
  counting thread's), once at start, before those threads run (``python -m agentlab.serve`` calls
  it first);
* :func:`trim` returns the free pages at the top of the heaps (``malloc_trim(0)``), called after
  a large request (in a worker thread: it can take milliseconds).

And on every system, :class:`ByteBudget` bounds the bytes of large request bodies in flight
(read, parsed, their ledger write not yet done), so that the copies of several large requests do
not pile up (the HTTP server admits each body over ``agentlab.serve.http.ADMIT_OVER`` bytes
against ``LARGE_BODY_BUDGET``).

Elsewhere (musl, macOS) the two glibc calls do nothing and say so by returning ``False``. DuckDB's own buffer
pool keeps its default ``memory_limit``: a limit of 256MB made a checkpoint of 60 MB requests
fail ("failed to pin block") and DuckDB then refused every later write until a restart.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from typing import Any

#: Blocks of at least this many bytes are mapped on their own (returned to the system when freed).
MMAP_THRESHOLD = 1 << 20
#: The most malloc arenas glibc makes (its default: 8 per core).
ARENA_MAX = 2
_M_MMAP_THRESHOLD = -3  # mallopt's parameter numbers in glibc's malloc.h
_M_ARENA_MAX = -8


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 - glibc only
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def hand_back_large_blocks() -> bool:
    """Fix glibc's ``mmap`` threshold at :data:`MMAP_THRESHOLD` and its arenas at :data:`ARENA_MAX`;
    whether both were set (glibc only). Arenas made before the call stay.
    """
    libc = _libc()
    return bool(libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and libc.mallopt(_M_ARENA_MAX, ARENA_MAX))


def trim() -> bool:
    """Give the free pages of the heaps back to the system; whether any were (``False`` off glibc)."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))


class ByteBudget:
    """Admission of large request bodies by their bytes: at most ``limit`` bytes of them in flight.

    A large request passes through the proxy as several copies of its text at once (the body read,
    its parsed strings, their canonical texts, the ledger's event JSON), and its ledger write goes
    on after the answer. Without a bound, the next large request was read and parsed while the
    previous one's copies still lived, and the proxy's memory moved with how many overlapped.
    :meth:`acquire` waits (first come, first served: a large body waiting keeps later ones
    waiting too) until the body's bytes fit beside those held; a body larger than the whole budget
    is admitted alone, once nothing else is held. What it returns is held until every holder has
    let it go (:meth:`Hold.extend` adds one).
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a byte budget must be >= 1, got {limit}")
        self.limit = limit
        #: Bytes of the bodies admitted and not yet let go.
        self.held = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    def _fits(self, size: int) -> bool:
        return self.held == 0 or self.held + size <= self.limit

    async def acquire(self, size: int) -> Hold:
        """Wait until ``size`` bytes fit (see the class docstring); the :class:`Hold` of them."""
        if not self._waiting and self._fits(size):
            self.held += size
            return Hold(self, size)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((size, turn))
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():  # admitted, then cancelled before it could run
                self._give_back(size)
            else:
                turn.cancel()
                self._admit()  # a large one given up may let smaller ones behind it in
            raise
        return Hold(self, size)

    def _give_back(self, size: int) -> None:
        self.held -= size
        self._admit()

    def _admit(self) -> None:
        while self._waiting:
            size, turn = self._waiting[0]
            if turn.done():
                self._waiting.popleft()
                continue
            if not self._fits(size):
                return
            self._waiting.popleft()
            self.held += size
            turn.set_result(None)


class Hold:
    """Bytes admitted by a :class:`ByteBudget`, given back once every holder has let them go."""

    def __init__(self, budget: ByteBudget, size: int) -> None:
        self.size = size
        self._budget = budget
        self._holders = 0
        #: Lets go of the first holder's share (once; later calls do nothing).
        self.release = self.extend()

    def extend(self) -> Callable[[], None]:
        """One more holder: the bytes stay held until the function returned is called (once)."""
        self._holders += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._holders -= 1
            if not self._holders:
                self._budget._give_back(self.size)

        return release
