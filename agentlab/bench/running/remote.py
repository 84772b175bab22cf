"""Running a run's cases on remote workers, with this process as the only writer: the scheduler and the worker.

:class:`RemoteExecutor` is the scheduling half and knows nothing of Ray; a :class:`Backend` starts
workers, sends them cases and reports finished ones; a :class:`CaseWorker` is what runs on each
worker. The Ray backend is :class:`agentlab.bench.running.distributed.RayBackend`; the unit tests drive
the scheduler with a fake backend.

* **Workers.** Each worker holds its own model (the embedded llama.cpp server started once per
  worker, or a client of a remote endpoint), its own judge, its own :class:`RunContext` (so
  :meth:`RunContext.once` work is per worker; the run's arm is looked up once in it) and its own in-memory call cache, seeded at start
  with the answers the driver's cache already holds for the run's models: a replay is free on the
  cluster too, and a task reading earlier answers from the cache (MT-Bench-101's summary mode
  reading its baseline) finds them. A worker runs a whole case (the embedded server listens on
  127.0.0.1 only) and sends back one record plus the cache rows of the calls it made.
* **Slots.** A worker runs up to ``slots`` cases at once (an async actor), so ``--workers N
  --concurrency K`` keeps up to N x K cases in flight. Results come back as they finish.
* **Affinity.** Cases with the same :meth:`Task.case_group` go, one after another, to the worker
  that took the first of them, so work they share (a meeting summary) is done, and its tokens
  counted, once per run; different groups run at once.
* **The driver writes.** Every outcome goes to the driver's ``deliver``: worker cache rows are
  merged into the driver's call cache, then the case is written in one transaction, as
  in-process. Identity and resume are the executor's (:mod:`agentlab.bench.running.executor`).
* **Failures.** A case that raises is a failed case with its error code (caught in the worker).
  A case whose worker died (process or node lost) is re-queued, at most ``max_requeues`` times,
  then stored failed with code ``worker_lost``; each lost worker is replaced, at most
  ``max_replacements`` times in a run. With no worker left the run stops with
  :class:`ExecutorError` (stored cases stay; a rerun does the rest).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentlab.bench.running.executor import (
    CaseOutcome,
    Deliver,
    Job,
    RunRequest,
    attempt_case,
    build_models,
    failed_record,
)
from agentlab.bench.tasks import Case, RunContext, Task
from agentlab.model.cache import CacheEntry, CallCache

#: Times a case whose worker died is sent again before it is stored failed (``worker_lost``).
MAX_REQUEUES = 2


class ExecutorError(RuntimeError):
    """The executor itself cannot go on (no Ray, no cluster, no worker left); printed as one line."""


class WorkerLost(Exception):
    """The worker running a case died; the case did not fail by itself."""

    code = "worker_lost"


class Backend(Protocol):
    """Where remote workers live. Handles and pending results are opaque to the scheduler."""

    async def open(self, job: Job, seed: list[CacheEntry], slots: int) -> None:
        """Connect and get ready to start workers for ``job`` (each seeded with ``seed``)."""

    def default_workers(self) -> int:
        """Workers to start when the user gave no number."""

    def spawn(self) -> Any:
        """Start one worker (asynchronously) and return its handle."""

    async def ready(self, workers: Sequence[Any]) -> list[str]:
        """Wait until ``workers`` are up; one description each. Raises :class:`ExecutorError`."""

    def submit(self, worker: Any, ordinal: int, case: Case) -> Any:
        """Send a case to a worker; returns its pending result."""

    async def wait(self, pending: Sequence[Any]) -> list[Any]:
        """Some finished results among ``pending`` (possibly none, after a short timeout)."""

    def result(self, pending: Any) -> CaseOutcome:
        """The outcome; raises :class:`WorkerLost` if the worker died, else the error that escaped."""

    def discard(self, worker: Any) -> None:
        """Stop using (and stop) a worker."""

    async def close(self) -> None:
        """Stop every worker and disconnect."""


@dataclass
class _Item:
    ordinal: int
    case: Case
    group: str | None
    lost: int = 0


@dataclass
class _Worker:
    id: int
    handle: Any
    busy: int = 0
    groups: set[str] = field(default_factory=set)


def seed_entries(job: Job) -> list[CacheEntry]:
    """The driver's cached answers for the run's models (no request JSON), to seed every worker."""
    if job.cache is None:
        return []
    models = [job.ctx.model] + ([job.ctx.judge.model] if job.ctx.judge is not None else [])
    # The name the cache files a call under (a cached model may say it; else its info's name).
    names = {str(getattr(m, "model_name", None) or m.info.name) for m in models}
    return job.cache.entries(models=names, with_requests=False)


class RemoteExecutor:
    """Schedules a run's cases over remote workers; see the module docstring."""

    def __init__(self, backend: Backend, *, workers: int | None = None, slots: int | None = None,
                 max_requeues: int = MAX_REQUEUES, max_replacements: int | None = None,
                 name: str = "remote") -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.backend = backend
        self.workers = workers
        self.slots = slots
        self.max_requeues = max_requeues
        self.max_replacements = max_replacements
        self.name = name
        #: One line per worker that reported ready (host:pid), for the run's output.
        self.started: list[str] = []

    async def run(self, job: Job, todo: Sequence[tuple[int, Case]], deliver: Deliver) -> None:
        """Open the backend, schedule ``todo`` over its workers (requeueing the cases of lost workers), and
        close the backend whatever happens.
        """
        slots = max(1, self.slots or job.request.concurrency)
        await self.backend.open(job, seed_entries(job), slots)
        try:
            await self._schedule(job, todo, deliver, slots)
        finally:
            await self.backend.close()

    async def _schedule(self, job: Job, todo: Sequence[tuple[int, Case]], deliver: Deliver, slots: int) -> None:
        n_workers = self.workers or self.backend.default_workers()
        replacements_left = n_workers * 2 if self.max_replacements is None else self.max_replacements
        live: dict[int, _Worker] = {i: _Worker(i, self.backend.spawn()) for i in range(n_workers)}
        next_id = n_workers
        self.started = await self.backend.ready([w.handle for w in live.values()])
        queue: deque[_Item] = deque(_Item(i, c, job.task.case_group(c)) for i, c in todo)
        owner: dict[str, int] = {}
        pending: dict[Any, tuple[_Worker, _Item]] = {}

        running: dict[str, int] = {}  # group -> its cases in flight (0 or 1)

        def take(worker: _Worker) -> _Item | None:
            """The first queued case of a group this worker owns, else the first one nobody owns.

            A group's cases run one after another (one slot), as in-process: the work they share is
            built by the first, and a server's prompt cache keeps their common prefix.
            """
            own: _Item | None = None
            free: _Item | None = None
            for item in queue:
                if item.group is not None and running.get(item.group):
                    continue
                if item.group is not None and owner.get(item.group) == worker.id:
                    own = item
                    break
                if free is None and (item.group is None or item.group not in owner):
                    free = item
                    if not worker.groups:
                        break  # owning no group, nothing can come before the first free case
            chosen = own or free
            if chosen is not None:
                queue.remove(chosen)
                if chosen.group is not None:
                    owner[chosen.group] = worker.id
                    worker.groups.add(chosen.group)
                    running[chosen.group] = 1
            return chosen

        def lose(worker: _Worker) -> None:
            nonlocal next_id, replacements_left
            if live.pop(worker.id, None) is None:
                return  # already handled through another of its cases
            self.backend.discard(worker.handle)
            for group in worker.groups:
                if owner.get(group) == worker.id:
                    del owner[group]
            if replacements_left > 0:
                replacements_left -= 1
                live[next_id] = _Worker(next_id, self.backend.spawn())
                next_id += 1

        while queue or pending:
            for worker in sorted(live.values(), key=lambda w: w.busy):
                while worker.busy < slots and (item := take(worker)) is not None:
                    pending[self.backend.submit(worker.handle, item.ordinal, item.case)] = (worker, item)
                    worker.busy += 1
            if not pending:
                if not live:
                    raise ExecutorError(f"every worker was lost ({len(queue)} cases not run); the finished cases "
                                        "are stored: rerun the same command to run the rest")
                raise ExecutorError("no worker can take the queued cases")  # unreachable: nothing in flight blocks a group
            for ref in await self.backend.wait(list(pending)):
                worker, item = pending.pop(ref)
                worker.busy -= 1
                if item.group is not None:
                    running.pop(item.group, None)
                try:
                    outcome = self.backend.result(ref)
                except WorkerLost as exc:
                    lose(worker)
                    item.lost += 1
                    if item.lost > self.max_requeues:
                        lost = WorkerLost(f"the worker running this case died {item.lost} times; last: {exc}")
                        deliver(CaseOutcome(failed_record(job.run_id, item.ordinal, item.case, lost)))
                    else:
                        queue.appendleft(item)
                    continue
                except Exception as exc:  # escaped the worker's own handling (e.g. a record that cannot travel)
                    deliver(CaseOutcome(failed_record(job.run_id, item.ordinal, item.case, exc)))
                    continue
                deliver(outcome)


# ------------------------------------------------------------------------------------ worker


class CaseWorker:
    """One remote worker: its own models, judge, run context (with the run's arm, looked up once) and
    in-memory call cache.
    """

    def __init__(self, task: Task, request: RunRequest, run_id: str, seed: list[CacheEntry]) -> None:
        self.task = task
        self.mode = request.mode
        self.cache = CallCache(None)
        self.cache.merge(seed)
        model, judge = build_models(request, cache=self.cache)
        self.ctx = RunContext(benchmark=request.benchmark, mode=request.mode, model=model, settings=request.settings,
                              model_spec=request.model_spec, judge=judge, run_id=run_id,
                              context_budget=request.context_budget, seeding=request.seeding)
        if self.mode not in task.modes:  # a generic arm: looked up once here, shared by every case
            # Not found here (an arm the driver registered itself): left unset, so each case fails
            # with the lookup's error, as before.
            with contextlib.suppress(LookupError):
                self.ctx.arm = task.arm(self.mode)

    async def ready(self) -> str:
        """``host:pid`` of this worker, reported once it has built its models."""
        return f"{socket.gethostname()}:{os.getpid()}"

    async def run(self, ordinal: int, case: Case) -> CaseOutcome:
        """Attempt one case and return its record with the call-cache entries it made, so the driver can
        merge them into its own cache.
        """
        record = await attempt_case(self.task, self.mode, self.ctx, ordinal, case)
        made = [c.cache_key for c in record.calls if c.cache_key and not c.cache_hit and c.error is None]
        return CaseOutcome(record, self.cache.entries(made))
