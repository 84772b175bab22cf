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

Elsewhere (musl, macOS) both do nothing and say so by returning ``False``. DuckDB's own buffer
pool keeps its default ``memory_limit``: a limit of 256MB made a checkpoint of 60 MB requests
fail ("failed to pin block") and DuckDB then refused every later write until a restart.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
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
