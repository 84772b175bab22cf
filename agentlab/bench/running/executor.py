"""Runs a task's cases: bounded concurrency, call capture, one-transaction writes, resume, Ctrl-C.

* **Identity and resume.** A run is identified by :func:`~agentlab.bench.running.identity.run_config`'s hash (benchmark, mode, model
  spec, judge spec, settings, dataset sha256, task version, the model's context window and its
  source, a ``--context-budget`` when set, an explicit ``--variant`` name; not ``--limit``, ``--concurrency`` or the ``[run]``
  settings section). So ``--limit 3`` and ``--limit 0`` of the same command are ONE run: the larger
  limit extends it, the smaller reuses its first cases.
  Rerunning the same command skips cases already stored with status ``ok``; cases stored as
  ``failed`` are attempted again (and replace their old rows), so a transient error heals on rerun.
* **Per case.** ``run_case`` and ``score`` run inside :func:`agentlab.model.base.observe_calls`, so
  every model call of the case is recorded (purpose, tokens, latency, cache hit, error). Any
  exception — a :class:`~agentlab.model.base.ModelError` such as a context-length error included —
  is stored as a failed case with its message and code. Then the case, its calls, scores and
  compaction stats are written in one transaction, together with the other cases that finished
  while the previous write was committing (:class:`CaseWriter`, a background thread; the run's
  end, Ctrl-C and an error wait until every finished case is stored).
* **Progress.** The bar counts finished cases; inside a case, long steps (rolling summary steps,
  memory-extraction chunks and sessions, embedding batches) report through
  :mod:`agentlab.progress` and show as the bar's postfix (``case: summary step 3, 12,400/20,512
  tokens``), so a long case is seen moving. ``progress=False`` (``--no-progress``) installs no
  listener and draws nothing.
* **Concurrency.** At most ``concurrency`` cases run at once (an ``asyncio.Semaphore``); model-call
  retries with backoff happen inside the model layer.
* **Executors.** Where cases run is an :class:`Executor`: :class:`InProcessExecutor` (the default)
  runs them as asyncio tasks here; :class:`agentlab.bench.running.distributed.RayExecutor` spreads them over
  a Ray cluster. Either way the executor only delivers finished :class:`CaseOutcome` objects and this
  process (the driver) alone writes them, one transaction per case, so the executor is not part of
  the run id and a run can be resumed with a different one.
* **Where the parts are.** The request and the run id: :mod:`agentlab.bench.running.identity`; one
  case and the executors: :mod:`agentlab.bench.running.case_runner`; the dry run:
  :mod:`agentlab.bench.running.dry_runs`. Here: :func:`run_task`, its :class:`RunSummary` and the
  :class:`CaseWriter`. Every name stays importable from this module.
* **Ctrl-C.** ``KeyboardInterrupt`` / cancellation stops the run: cases still in flight are
  abandoned (nothing of them is written), every finished case stays stored, and the run is marked
  ``interrupted``. Rerunning completes only the missing cases.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from agentlab.bench.config import config_hash
from agentlab.bench.running.case_runner import (
    CaseOutcome,
    Deliver,
    Executor,
    InProcessExecutor,
    Job,
    attempt_case,
    case_groups,
    failed_record,
)
from agentlab.bench.running.dry_runs import dry_run
from agentlab.bench.running.identity import RunRequest, build_models, run_config, select
from agentlab.bench.scoring.judge import Judge
from agentlab.bench.store.results import CaseRecord, ResultStore, RunInfo, check_record
from agentlab.bench.tasks import Case, CaseSelection, RunContext, Task
from agentlab.model.base import CallRecord, Model
from agentlab.model.cache import CallCache
from agentlab.progress import Progress, observe_progress

if TYPE_CHECKING:
    from agentlab.policies.arms import Arm


@dataclass
class RunSummary:
    """What a run did, printed at its end and returned by the CLI: case counts, token totals split by where
    the prompt tokens were processed, and errors by kind.
    """

    run_id: str
    status: str  # finished | interrupted
    selected: int
    already_done: int
    attempted: int = 0
    ok: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Prompt tokens of calls answered from the call cache (no server saw them this time).
    replayed_prompt_tokens: int = 0
    #: Prompt tokens of calls sent this time that the server took from its prompt cache
    #: (``usage.prompt_tokens_details.cached_tokens``; 0 when a server does not report it).
    server_cached_prompt_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def total_cases_ok(self) -> int:
        """Cases of this run that are stored as done, from earlier attempts and this one."""
        return self.already_done + self.ok

    @property
    def processed_prompt_tokens(self) -> int:
        """Prompt tokens a server actually processed this time (neither replayed nor prefix-cached)."""
        return self.prompt_tokens - self.replayed_prompt_tokens - self.server_cached_prompt_tokens

    def add_calls(self, calls: Sequence[CallRecord]) -> None:
        """Add the token usage of these model calls, telling cache replays and server prefix-cache hits
        apart from tokens a server processed.
        """
        for call in calls:
            self.prompt_tokens += call.usage.prompt_tokens
            self.completion_tokens += call.usage.completion_tokens
            if call.cache_hit:
                self.replayed_prompt_tokens += call.usage.prompt_tokens
            else:
                self.server_cached_prompt_tokens += call.usage.cached_tokens

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every count, the derived ``processed_prompt_tokens`` included."""
        return {
            "run_id": self.run_id, "status": self.status, "selected": self.selected,
            "already_done": self.already_done, "attempted": self.attempted, "ok": self.ok,
            "failed": self.failed, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "replayed_prompt_tokens": self.replayed_prompt_tokens,
            "server_cached_prompt_tokens": self.server_cached_prompt_tokens,
            "processed_prompt_tokens": self.processed_prompt_tokens, "errors": dict(self.errors),
        }



#: The writer thread writes at most once per this many seconds (see :class:`CaseWriter`) ...
GROUP_COMMIT_SECONDS = 0.25
#: ... unless this many cases are queued.
GROUP_COMMIT_CASES = 64


class CaseWriter:
    """Finished cases on their way to the store: written by one background thread, each batch in
    one transaction (group commit).

    A DuckDB commit per case and per model call, on the event loop, cost more than the case's own
    HTTP calls: a commit is an fsync, tens of milliseconds on a busy disk, and every case in
    flight waited for it. Here :meth:`add` only queues the record; the writer thread takes
    everything queued since its last commit, flushes the call caches (so a stored case's calls
    replay), and writes the cases in one transaction (DuckDB releases the GIL meanwhile). It writes
    at most once per :data:`GROUP_COMMIT_SECONDS`: a case finishing after a quiet spell is written
    at once, the cases finishing soon after it wait for the next write together (a run of short
    cases otherwise paid two commits for every one or two cases: more CPU than its HTTP calls).
    :meth:`flush` (the run's end, Ctrl-C, an error) writes at once and returns once every queued
    case is stored; a process killed outright loses only the cases still queued, which a rerun
    attempts again. A write that fails is raised by
    the next :meth:`add` or :meth:`flush`.
    """

    def __init__(self, store: ResultStore, caches: Sequence[object]) -> None:
        self.store = store
        self.caches: list[CallCache] = []
        for cache in caches:
            if isinstance(cache, CallCache) and all(cache is not c for c in self.caches):
                self.caches.append(cache)
        self._queued: list[CaseRecord] = []
        self._error: BaseException | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        #: When the writer thread last took a batch (``time.monotonic()``; long ago at first).
        self._last_write = float("-inf")

    def add(self, record: CaseRecord) -> None:
        """Queue a finished case (a record the store would refuse raises here, as writing it would)."""
        check_record(record)
        with self._cond:
            self._raise_error()
            self._queued.append(record)
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_loop, name="agentlab-case-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self) -> None:
        """Return once every queued case is stored (and stop the thread); raise a failed write."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
            self._thread = None
        with self._cond:
            self._closed = False
            if self._queued and self._error is None:  # queued after the thread had stopped
                self._write(self._take())
            self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _take(self) -> list[CaseRecord]:
        batch, self._queued = self._queued, []
        return batch

    def _write(self, batch: list[CaseRecord]) -> None:
        for cache in self.caches:
            cache.flush()
        self.store.write_cases(batch)

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queued and not self._closed:
                    self._cond.wait()
                if not self._queued:
                    return
                # Group commit: at most one write per GROUP_COMMIT_SECONDS (each costs two commits, the
                # call cache's and the store's, milliseconds of CPU apiece); the cases finishing
                # meanwhile join the batch. The first case after a quiet spell is written at once,
                # and the run's end (flush) never waits.
                deadline = self._last_write + GROUP_COMMIT_SECONDS
                while not self._closed and len(self._queued) < GROUP_COMMIT_CASES:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch = self._take()
                self._last_write = time.monotonic()
            try:
                self._write(batch)
            except BaseException as exc:  # handed to the event loop's next add/flush
                with self._cond:
                    self._error = exc
                return



async def run_task(task: Task, request: RunRequest, *, model: Model, store: ResultStore,
                   judge: Judge | None = None, selection: CaseSelection | None = None,
                   session_service_factory: Callable[[], Any] | None = None,
                   executor: Executor | None = None, arm: Arm | None = None) -> RunSummary:
    """Run (or resume) one benchmark mode and store every case. See the module docstring.

    ``arm``: the mode's arm as the caller resolved it (a :class:`~agentlab.bench.spec.RunSpec`'s);
    default: the task's.
    """
    if arm is None:
        arm = task.arm(request.mode)  # an unknown arm is a LookupError naming the known ones
    executor = executor or InProcessExecutor()
    # Resolved before anything is stored: a model whose window nobody states stops the run here.
    info = model.info
    selection = selection or task.load_cases(request.settings)
    cases = select(selection, request.limit)
    config = run_config(task, request, selection.dataset_sha256, info, arm=arm)
    run_id = config_hash(config)
    store.start_run(RunInfo(
        run_id=run_id, benchmark=request.benchmark, mode=request.mode, config=config, model=request.model_spec,
        judge_model=request.judge_spec, dataset_sha256=selection.dataset_sha256, code_version=request.code_version,
        task_version=task.version, smoke_test=request.smoke_test, cases_selected=len(cases),
        variant=request.variant_label, variant_settings=dict(request.variant_settings),
    ))
    done = store.completed_case_ids(run_id)
    todo = [(i, c) for i, c in enumerate(cases) if c.id not in done]
    summary = RunSummary(run_id, "running", len(cases), len(cases) - len(todo))
    ctx = RunContext(benchmark=request.benchmark, mode=request.mode, model=model, settings=request.settings,
                     model_spec=request.model_spec, judge=judge, run_id=run_id,
                     session_service_factory=session_service_factory, store=store,
                     context_budget=request.context_budget, seeding=request.seeding)
    ctx.arm = arm
    cache = getattr(model, "cache", None)
    job = Job(task, request, run_id, ctx, cache if isinstance(cache, CallCache) else None)
    bar = tqdm(total=len(cases), initial=summary.already_done, desc=f"{request.benchmark}/{request.mode}",
               unit="case", disable=not request.progress, dynamic_ncols=True)

    def show_step(case: Case) -> AbstractContextManager[object]:
        """The context in which a case's long steps show as the bar's postfix (none without a bar)."""
        if not request.progress:
            return contextlib.nullcontext()

        def show(step: Progress) -> None:
            bar.set_postfix_str(f"{case.id}: {step.describe()}", refresh=True)

        return observe_progress(show)

    job.progress = show_step
    writes = CaseWriter(store, [job.cache, getattr(getattr(judge, "model", None), "cache", None)])

    def store_outcome(outcome: CaseOutcome) -> None:
        record = outcome.record
        if outcome.cache_entries and job.cache is not None:
            # Cache first: a driver killed between the two replays the case for free.
            job.cache.merge(outcome.cache_entries)
        writes.add(record)  # synchronous: a cancellation cannot split it
        summary.attempted += 1
        if record.status == "ok":
            summary.ok += 1
        else:
            summary.failed += 1
            summary.errors[record.error_code or "error"] = summary.errors.get(record.error_code or "error", 0) + 1
        summary.add_calls(record.calls)
        bar.set_postfix(failed=summary.failed, tokens=summary.prompt_tokens + summary.completion_tokens,
                        refresh=False)
        bar.update(1)

    try:
        if todo:
            await executor.run(job, todo, store_outcome)
        writes.flush()
    except (asyncio.CancelledError, KeyboardInterrupt):
        with contextlib.suppress(Exception):  # every finished case stays stored (a failed write: raised above)
            writes.flush()
        summary.status = "interrupted"
        store.finish_run(run_id, "interrupted")
        bar.close()
        raise
    except BaseException:
        with contextlib.suppress(Exception):
            writes.flush()
        summary.status = "failed"
        store.finish_run(run_id, "failed")
        bar.close()
        raise
    bar.close()
    summary.status = "finished"
    store.finish_run(run_id, "finished")
    return summary



__all__ = [
    "CaseOutcome",
    "CaseWriter",
    "Deliver",
    "Executor",
    "GROUP_COMMIT_CASES",
    "GROUP_COMMIT_SECONDS",
    "InProcessExecutor",
    "Job",
    "RunRequest",
    "RunSummary",
    "attempt_case",
    "build_models",
    "case_groups",
    "dry_run",
    "failed_record",
    "run_config",
    "run_task",
    "select",
]
