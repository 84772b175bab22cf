"""Running a coroutine to completion from synchronous code, also where an event loop already runs.

A task's synchronous entry points (``retrieval_only``, ``dry_run_prompts``) drive async services
(session seeding, search). ``asyncio.run`` refuses to start inside a running loop, and a Jupyter
kernel runs one in the thread that executes the cells, so there the coroutine gets a fresh loop in
a worker thread instead; the caller's context variables (call observers, progress listeners,
reproducible ids) go with it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, or inside a running event loop the same in a worker thread; its result."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentlab-run-sync") as pool:
        return pool.submit(context.run, asyncio.run, coro).result()
