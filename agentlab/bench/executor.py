"""Runs a task's cases: bounded concurrency, call capture, one-transaction writes, resume, Ctrl-C.

* **Identity and resume.** A run is identified by :func:`run_config`'s hash (benchmark, mode, model
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
  runs them as asyncio tasks here; :class:`agentlab.bench.distributed.RayExecutor` spreads them over
  a Ray cluster. Either way the executor only delivers finished :class:`CaseOutcome` objects and this
  process (the driver) alone writes them, one transaction per case, so the executor is not part of
  the run id and a run can be resumed with a different one.
* **Ctrl-C.** ``KeyboardInterrupt`` / cancellation stops the run: cases still in flight are
  abandoned (nothing of them is written), every finished case stays stored, and the run is marked
  ``interrupted``. Rerunning completes only the missing cases.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from tqdm.auto import tqdm

from agentlab.bench.config import Settings, config_hash, variant_name
from agentlab.bench.judge import Judge, judge_versions
from agentlab.bench.metrics import Score, version_of
from agentlab.bench.store import CaseRecord, ResultStore, RunInfo, check_record
from agentlab.bench.tasks import Case, CaseResult, CaseSelection, RunContext, Task
from agentlab.events import reproducible_ids
from agentlab.model import tokens
from agentlab.model.base import CallRecord, Model, ModelInfo, observe_calls
from agentlab.model.cache import CacheEntry, CallCache
from agentlab.progress import Progress, observe_progress


@dataclass(frozen=True)
class RunRequest:
    """Everything that defines one run (plus how to execute it)."""

    benchmark: str
    mode: str
    model_spec: str
    settings: Settings
    judge_spec: str | None = None
    #: Run only the first ``limit`` selected cases; 0 or None = all.
    limit: int | None = None
    concurrency: int = 4
    smoke_test: bool = False
    progress: bool = True
    code_version: str = ""
    #: Keyword arguments of :func:`agentlab.model.registry.get_model` for the answer model (e.g.
    #: ``context_window``); :func:`build_models` applies them, in the driver and in every worker.
    model_options: Mapping[str, Any] = field(default_factory=dict)
    #: ``--variant NAME``; None = derived from ``variant_settings`` (see :mod:`agentlab.bench.config`).
    variant: str | None = None
    #: The ``section.field`` settings that differ from the benchmark's file (``variant_settings()``).
    variant_settings: Mapping[str, Any] = field(default_factory=dict)
    #: ``--context-budget``: the window the mechanisms see, below the model's (``None``: the model's).
    #: Part of the run id only when set; the tasks pass it on as ``RunOptions.context_window``.
    context_budget: int | None = None
    #: ``--seeding``: how a generic arm's history reaches its session (:mod:`agentlab.bench.replay`).
    #: Part of the run id only when not the default ``forced``.
    seeding: str = "forced"

    @property
    def variant_label(self) -> str:
        """The variant's name in tables: ``--variant NAME`` when given, else derived from the settings that
        differ from the benchmark's file.
        """
        return self.variant or variant_name(self.variant_settings)


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


def build_models(request: RunRequest, cache: CallCache | bool = True) -> tuple[Model, Judge | None]:
    """The run's answer model and judge (None when judging is off) from its specs.

    The one place a remote worker builds them, so its models are the driver's. The judge shares
    the answer model when the specs are equal.
    """
    from agentlab.model.registry import get_model

    model = get_model(request.model_spec, cache=cache, **request.model_options)
    if request.judge_spec is None:
        return model, None
    judge_model = model if request.judge_spec == request.model_spec else get_model(request.judge_spec, cache=cache)
    return model, Judge(judge_model, request.judge_spec)


def run_config(task: Task, request: RunRequest, dataset_sha256: str, info: ModelInfo | None = None) -> dict[str, Any]:
    """The config a run id is the hash of (stored in ``runs.config``).

    ``info``: the answer model's resolved info; its context window and where it came from are part
    of the run (a window decides which prompts fit and how a summary is split).
    """
    config: dict[str, Any] = {
        "benchmark": request.benchmark,
        "mode": request.mode,
        "model": request.model_spec,
        "judge_model": request.judge_spec,
        "settings": request.settings.identity(),  # [run] (concurrency...) does not change results
        "dataset_sha256": dataset_sha256,
        "task_version": task.version,
    }
    # Only for an arm that declares an identity (``<lossy>+recall``'s hidden scope): every other
    # arm's id is as it was.
    arm_identity = _arm_identity(task, request.mode)
    if arm_identity:
        config["arm"] = arm_identity
    if request.judge_spec is not None and task.judge_templates:
        config["judge_prompts"] = judge_versions(task.judge_templates)
    if info is not None:
        config["context_window"] = info.context_window
        config["context_window_source"] = info.context_window_source
    # Only when set: every run made without a budget keeps the id it had before budgets existed.
    if request.context_budget is not None:
        config["context_budget"] = request.context_budget
    if request.seeding != "forced":  # only when not the default: every earlier id stays as it was
        config["seeding"] = request.seeding
    # A derived variant name is a function of the settings, already hashed; only an explicit
    # --variant NAME adds to the identity (so runs made before variants existed keep their ids).
    if request.variant:
        config["variant"] = request.variant
    return config


def _arm_identity(task: Task, mode: str) -> dict[str, str]:
    """``Arm.identity`` of ``mode`` as a dict (empty when the task has no such arm)."""
    try:
        arm = task.arm(mode)
    except LookupError:
        return {}
    return dict(arm.identity)


def select(selection: CaseSelection, limit: int | None) -> list[Case]:
    """The first ``limit`` selected cases (all of them when ``limit`` is 0 or ``None``)."""
    cases = list(selection.cases)
    return cases[:limit] if limit else cases


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


# ---------------------------------------------------------------------------------- executors


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
                   executor: Executor | None = None) -> RunSummary:
    """Run (or resume) one benchmark mode and store every case. See the module docstring."""
    arm = task.arm(request.mode)  # an unknown arm is a LookupError naming the known ones
    executor = executor or InProcessExecutor()
    # Resolved before anything is stored: a model whose window nobody states stops the run here.
    info = model.info
    selection = selection or task.load_cases(request.settings)
    cases = select(selection, request.limit)
    config = run_config(task, request, selection.dataset_sha256, info)
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


# ---------------------------------------------------------------------------------- dry run


def dry_run(task: Task, mode: str, settings: Settings, *, limit: int | None = None,
            selection: CaseSelection | None = None, encoding: str | None = None,
            context_budget: int | None = None) -> dict[str, Any]:
    """Select cases and count the tokens of every prompt the mode would send; no model is called.

    ``avg_prompt_tokens`` is the mean over cases of the summed prompt tokens of the case's prompts
    (for a single-call mode: the answer prompt); chat-format overheads are included. A generic
    arm's mechanisms see ``context_budget`` as their window (``--context-budget``; ``None``: 128k).
    """
    task.arm(mode)  # an unknown arm is a LookupError naming the known ones
    selection = selection or task.load_cases(settings)
    cases = select(selection, limit)
    per_case: list[int] = []
    per_call: list[int] = []
    for case in cases:
        counts = [tokens.count_messages(messages, encoding=encoding) for messages in task.dry_run_arm(case, mode, settings, context_budget)]
        per_call.extend(counts)
        per_case.append(sum(counts))
    from agentlab.bench.metrics import percentiles

    out: dict[str, Any] = {
        "benchmark": task.name,
        "mode": mode,
        "cases": len(cases),
        "loaded": selection.loaded,
        "dataset_sha256": selection.dataset_sha256,
        "prompts": len(per_call),
        "avg_prompt_tokens": (sum(per_case) / len(per_case)) if per_case else 0.0,
        "max_prompt_tokens": max(per_case, default=0),
        "min_prompt_tokens": min(per_case, default=0),
        "total_prompt_tokens": sum(per_case),
        "avg_prompt_tokens_per_call": (sum(per_call) / len(per_call)) if per_call else 0.0,
        "encoding": encoding or tokens.DEFAULT_ENCODING,
    }
    if per_case:
        out.update({f"{k}_prompt_tokens": v for k, v in percentiles([float(x) for x in per_case]).items()})
    if context_budget is not None:
        out["context_budget"] = context_budget
        if not task.arm(mode).generic:
            out["context_budget_note"] = (f"not applied to the dry run of the task mode {mode!r}: it plans its "
                                          "prompts with the benchmark's published window; a run uses the budget")
    return out
