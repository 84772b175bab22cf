"""The background memory worker: extraction passes after runs, off the answer path.

The Runner calls :meth:`MemoryWorker.on_run_completed` after a run completes. The job is routed
to one of ``policy.workers`` queues by an FNV-1a hash of (app, user), so one user's passes run in
order on one worker. When that queue is full the pass runs in the caller instead (slower for the
caller, but no work is dropped); a cancelled run enqueues nothing. Every pass has a timeout
(``policy.job_timeout_seconds``); passes of the same (app, user) never overlap, even when one runs
in the caller and another in the background. Results (including errors) are kept in
:attr:`MemoryWorker.results` for inspection; failures are also logged.

Reference defaults: 1 worker, queue 10, 30 s per job.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentlab.memory.extractor import ExtractionResult, MemoryExtractor

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.memory.policies import MemoryPolicy
    from agentlab.memory.service import MemoryService
    from agentlab.model.base import Model
    from agentlab.session.base import Session, SessionService

log = logging.getLogger(__name__)

#: How many recent results a worker keeps for inspection.
RESULTS_KEPT = 1000


def fnv1a_32(text: str) -> int:
    """FNV-1a, 32 bit: a stable hash (Python's ``hash`` of a str changes per process)."""
    value = 0x811C9DC5
    for byte in text.encode("utf-8"):
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value


@dataclass(frozen=True)
class _Job:
    app_name: str
    user_id: str
    session: Session
    session_service: SessionService | None
    enqueued_at: float


class MemoryWorker:
    """Queues, worker tasks, timeouts and per-user ordering around a :class:`MemoryExtractor`."""

    def __init__(self, model: Model, policy: MemoryPolicy, memory_service: MemoryService,
                 session_service: SessionService | None = None) -> None:
        self.policy = policy
        self.memory_service = memory_service
        self.session_service = session_service
        self.extractor = MemoryExtractor(model, policy)
        if policy.needs_embedder:
            memory_service.ensure_embedder(policy.embedder)
        self.results: collections.deque[ExtractionResult] = collections.deque(maxlen=RESULTS_KEPT)
        #: Counters: enqueued, ran_in_caller, completed, errors, timeouts.
        self.stats: dict[str, int] = collections.Counter()
        self._queues: list[asyncio.Queue[_Job]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._user_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._closed = False

    # ------------------------------------------------------------------------------ public

    async def on_run_completed(self, inv: Invocation) -> None:
        """Enqueue an extraction pass for the run's session (runs in the caller if the queue is full)."""
        if not self.policy.auto_extract or inv.cancelled.is_set():
            return
        job = _Job(inv.app_name, inv.user_id, inv.session, inv.session_service or self.session_service,
                   time.time())
        if self._closed:
            log.warning("memory worker is closed; extracting app=%r user=%r in the caller", job.app_name, job.user_id)
            await self._run_job(job)
            return
        queue = self._queue_for(job.app_name, job.user_id)
        try:
            queue.put_nowait(job)
            self.stats["enqueued"] += 1
        except asyncio.QueueFull:
            self.stats["ran_in_caller"] += 1
            await self._run_job(job)

    async def extract_now(self, app_name: str, user_id: str, session: Session,
                          session_service: SessionService | None = None, *, force: bool = False) -> ExtractionResult:
        """Run one pass right now in the caller (still ordered with background passes)."""
        job = _Job(app_name, user_id, session, session_service or self.session_service, time.time())
        return await self._run_job(job, force=force)

    async def drain(self) -> None:
        """Wait until every queued pass has finished."""
        for queue in list(self._queues):
            await queue.join()

    async def close(self) -> None:
        """Finish queued work, then stop the worker tasks. Later jobs run in the caller."""
        same_loop = self._loop is asyncio.get_running_loop()
        if same_loop:
            await self.drain()
        self._closed = True
        for task in self._tasks:
            task.cancel()
        if same_loop:  # tasks of an earlier event loop are gone with it and cannot be awaited
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._queues.clear()

    @property
    def errors(self) -> list[ExtractionResult]:
        """The failed passes among the recent :attr:`results` (the worker logs them too, but never raises)."""
        return [r for r in self.results if r.status == "error"]

    # ---------------------------------------------------------------------------- internals

    def _queue_for(self, app_name: str, user_id: str) -> asyncio.Queue[_Job]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # First use, or a new event loop (scripts and notebooks call asyncio.run repeatedly):
            # tasks of an old loop are dead, so start fresh ones on this loop.
            self._loop = loop
            self._user_locks.clear()
            self._queues = [asyncio.Queue(maxsize=self.policy.queue_size) for _ in range(self.policy.workers)]
            self._tasks = [loop.create_task(self._work(q), name=f"memory-worker-{i}")
                           for i, q in enumerate(self._queues)]
        return self._queues[fnv1a_32(f"{app_name}\x00{user_id}") % len(self._queues)]

    async def _work(self, queue: asyncio.Queue[_Job]) -> None:
        while True:
            job = await queue.get()
            try:
                await self._run_job(job)
            except Exception:  # a pass must never kill the worker
                log.exception("memory worker: unexpected failure for app=%r user=%r", job.app_name, job.user_id)
            finally:
                queue.task_done()

    def _lock_for(self, app_name: str, user_id: str) -> asyncio.Lock:
        return self._user_locks.setdefault((app_name, user_id), asyncio.Lock())

    async def _run_job(self, job: _Job, *, force: bool = False) -> ExtractionResult:
        async with self._lock_for(job.app_name, job.user_id):
            try:
                result = await asyncio.wait_for(
                    self.extractor.extract(job.session, self.memory_service, job.session_service, force=force),
                    timeout=self.policy.job_timeout_seconds,
                )
            except asyncio.TimeoutError:
                self.stats["timeouts"] += 1
                result = ExtractionResult(job.app_name, job.user_id, job.session.id, status="error",
                                          error=f"extraction timed out after {self.policy.job_timeout_seconds:g} s",
                                          prompt_version=self.policy.extraction_prompt_version)
                log.warning("memory extraction for app=%r user=%r session=%r: %s",
                            job.app_name, job.user_id, job.session.id, result.error)
            except Exception as exc:
                result = ExtractionResult(job.app_name, job.user_id, job.session.id, status="error",
                                          error=f"{type(exc).__name__}: {exc}",
                                          prompt_version=self.policy.extraction_prompt_version)
                log.warning("memory extraction for app=%r user=%r session=%r failed: %s",
                            job.app_name, job.user_id, job.session.id, result.error)
        self.stats["completed"] += 1
        if result.status == "error":
            self.stats["errors"] += 1
        self.results.append(result)
        return result


def memory_worker_for(agent: object, memory_service: MemoryService, *, model: Model | None = None,
                      session_service: SessionService | None = None) -> MemoryWorker:
    """The worker a Runner uses for an agent with a ``memory`` policy.

    The extraction model is ``model``, else the agent's ``memory_model`` if it has one, else the
    agent's own model.
    """
    policy = getattr(agent, "memory", None)
    if policy is None:
        raise ValueError(f"agent {getattr(agent, 'name', agent)!r} has no memory policy")
    chosen = model or getattr(agent, "memory_model", None) or getattr(agent, "model", None)
    if chosen is None:
        raise ValueError(f"agent {getattr(agent, 'name', agent)!r} has no model to extract memories with")
    return MemoryWorker(chosen, policy, memory_service, session_service)
