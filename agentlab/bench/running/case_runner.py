"""Where a run's cases are answered: one case attempted with its calls captured, and the executors.

:func:`attempt_case` runs and scores one case inside :func:`agentlab.model.base.observe_calls` (so
every model call of the case is recorded) and turns any exception into a failed record; the same
function runs in the driver and in a remote worker. An :class:`Executor` runs a run's cases
somewhere and delivers each finished :class:`CaseOutcome` to the driver, which alone writes it
(:func:`agentlab.bench.running.executor.run_task`); :class:`InProcessExecutor`, the default, runs them as
asyncio tasks here, one concurrency slot per :func:`case_groups` group.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from agentlab.bench.running.identity import RunRequest
from agentlab.bench.scoring.metrics import Score, version_of
from agentlab.bench.store.results import CaseRecord
from agentlab.bench.tasks import Case, CaseResult, RunContext, Task
from agentlab.events import reproducible_ids
from agentlab.model.base import CallRecord, observe_calls
from agentlab.model.cache import CacheEntry, CallCache


def case_groups(todo: Sequence[tuple[int, Case]], task: Task) -> list[list[tuple[int, Case]]]:
    """``todo`` split by :meth:`Task.case_group`, in order of each group's first case.

    Each group runs sequentially in one worker: a meeting's questions follow each other on the
    same server slot (its prompt cache keeps the transcript) and the meeting summary built by the
    first is ready for the rest; groups run concurrently, so one meeting answers while another
    is still being summarised.
    """
    groups: dict[str, list[tuple[int, Case]]] = {}
    out: list[list[tuple[int, Case]]] = []
    for item in todo:
        key = task.case_group(item[1])
        if key is None:
            out.append([item])
        elif key in groups:
            groups[key].append(item)
        else:
            groups[key] = [item]
            out.append(groups[key])
    return out



def _normalise_scores(scores: Sequence[Score] | dict[str, float] | None, task: Task) -> list[Score]:
    """Tasks may return ``Score`` rows or a plain ``{metric: value}`` dict (versions looked up)."""
    if not scores:
        return []
    if isinstance(scores, dict):
        out = []
        for metric, value in scores.items():
            try:
                version = version_of(metric)
            except KeyError:
                version = f"{task.name}-task-v{task.version}"
            out.append(Score(metric, None if value is None else float(value), version))
        return out
    return list(scores)


def _error_code(exc: BaseException) -> str:
    return str(getattr(exc, "code", None) or type(exc).__name__)


def failed_record(run_id: str, ordinal: int, case: Case, exc: BaseException, *, code: str | None = None) -> CaseRecord:
    """The stored row of a case that raised ``exc`` (its message, code and any metadata it carries)."""
    return CaseRecord(run_id=run_id, case_id=case.id, status="failed", ordinal=ordinal, reference=case.reference,
                      metadata={**case.metadata, **getattr(exc, "metadata", {})},
                      error=f"{type(exc).__name__}: {exc}", error_code=code or _error_code(exc))


async def attempt_case(task: Task, mode: str, ctx: RunContext, ordinal: int, case: Case,
                       steps: AbstractContextManager[object] | None = None) -> CaseRecord:
    """Run and score one case with every model call captured; never raises for a case error.

    The same function runs in the driver (in-process executor) and inside a remote worker, so a
    case is answered, scored and recorded identically wherever it runs. ``steps``: a context
    manager that shows the case's long steps (:mod:`agentlab.progress`) while it runs.
    """
    calls: list[CallRecord] = []
    started = time.perf_counter()
    record = CaseRecord(run_id=ctx.run_id, case_id=case.id, status="ok", ordinal=ordinal,
                        reference=case.reference, metadata=dict(case.metadata))
    with observe_calls(calls.append), (steps if steps is not None else contextlib.nullcontext()), \
            reproducible_ids(f"{task.name}/{mode}/{case.id}"):
        try:
            # A mode runs through the task's own code, a generic arm through the generic path.
            if mode in task.modes:
                result: CaseResult = await task.run_case(case, mode, ctx)
            else:
                result = await task.run_generic(case, ctx.arm if ctx.arm is not None else task.arm(mode), ctx)
            record.prediction = result.prediction
            record.reference = result.reference if result.reference is not None else case.reference
            record.metadata = {**case.metadata, **result.metadata}
            record.compactions = list(result.compactions)
            record.scores = _normalise_scores(await task.score(case, result, ctx), task)
        except Exception as exc:  # the case fails, the run goes on; BaseException (Ctrl-C) escapes
            failed = failed_record(ctx.run_id, ordinal, case, exc)
            # What the case produced before it failed (e.g. an answer whose judge call failed) is kept.
            failed.prediction = record.prediction
            failed.metadata = {**record.metadata, **failed.metadata}
            record = failed
    record.latency_ms = (time.perf_counter() - started) * 1000
    record.calls = calls
    return record



@dataclass
class CaseOutcome:
    """A finished case as an executor hands it to the driver, which alone writes it."""

    record: CaseRecord
    #: Call-cache rows of the model calls a remote worker made for the case (merged into the
    #: driver's cache before the case is written); empty in-process, where the cache is shared.
    cache_entries: list[CacheEntry] = field(default_factory=list)


@dataclass
class Job:
    """What an executor needs to run a run's cases."""

    task: Task
    request: RunRequest
    run_id: str
    #: The driver's context (its model, judge, per-run memo); remote workers build their own.
    ctx: RunContext
    #: The driver's call cache: remote workers are seeded from it and their new entries merged into it.
    cache: CallCache | None = None
    #: ``progress(case)``: a context manager showing the case's steps on the driver's progress bar
    #: (in-process only; a remote worker's steps are not seen).
    progress: Callable[[Case], AbstractContextManager[object]] | None = None


#: Receives each finished case; called synchronously, so a case is queued for the store (and written
#: in its batch, see :class:`CaseWriter`) before the next is taken.
Deliver = Callable[[CaseOutcome], None]



class Executor(Protocol):
    """Runs cases somewhere and delivers each as it finishes; the driver's ``deliver`` writes it.

    An executor is not part of a run's identity: a run started with one can be finished with another.
    """

    name: str

    async def run(self, job: Job, todo: Sequence[tuple[int, Case]], deliver: Deliver) -> None:
        """Run every case of ``todo`` (``(ordinal, case)`` pairs) and ``deliver`` each outcome.

        On cancellation (Ctrl-C, SIGTERM) cases in flight are abandoned: nothing of them is delivered.
        """
        ...


class InProcessExecutor:
    """The default: cases as asyncio tasks in this process, at most ``request.concurrency`` at once."""

    name = "in-process"

    async def run(self, job: Job, todo: Sequence[tuple[int, Case]], deliver: Deliver) -> None:
        """Run ``todo`` as asyncio tasks, one concurrency slot per case group, delivering each outcome as
        it finishes.
        """
        semaphore = asyncio.Semaphore(max(1, job.request.concurrency))

        async def group(members: list[tuple[int, Case]]) -> None:
            # A group (Task.case_group) holds one concurrency slot for all its cases, so they run
            # back to back: a meeting's questions reuse the server's cached transcript prefix and
            # the summary its first case built; other groups run meanwhile.
            async with semaphore:
                for ordinal, case in members:
                    steps = job.progress(case) if job.progress is not None else None
                    deliver(CaseOutcome(await attempt_case(job.task, job.request.mode, job.ctx, ordinal, case,
                                                           steps)))

        workers = [asyncio.create_task(group(members), name=f"cases:{members[0][1].id}")
                   for members in case_groups(todo, job.task)]
        try:
            if workers:
                await asyncio.gather(*workers)
        finally:
            # Reached on cancellation (Ctrl-C) and on an error: cases still in flight are abandoned.
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)



__all__ = ["CaseOutcome", "Deliver", "Executor", "InProcessExecutor", "Job", "attempt_case", "case_groups", "failed_record"]
