"""The summary worker: the rolling update with its boundary, and the machinery around it.

That is the cascade to the full-session key, the background pool, and the runner hook that
enqueues a job after a qualifying event.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlab import progress
from agentlab.core.mechanism import in_filter, is_history_event
from agentlab.events import Event
from agentlab.model import tokens
from agentlab.model.base import Model, ModelRequest
from agentlab.session.base import FULL_SESSION_KEY, Session, SessionService, Summary, SummaryBoundary
from agentlab.summary.locks import SCOPE_LOCKS, LockKey
from agentlab.summary.policy import SummaryPolicy, TriggerCheck, TriggerObservation, checks_pass
from agentlab.summary.render import count_event_tokens, delta_after_boundary, open_branches
from agentlab.summary.summarizer import Summarizer

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

log = logging.getLogger(__name__)


@dataclass
class _Job:
    session: Session
    filter_key: str
    context_window: int | None
    idle_seconds: float | None
    context: contextvars.Context


@dataclass
class WorkerStats:
    """Counters of what the worker did (jobs, advances, failures, model calls), for analysis and tests."""

    enqueued: int = 0
    ran_in_caller: int = 0
    completed: int = 0
    advanced: int = 0
    failed: int = 0
    timed_out: int = 0
    model_calls: int = 0
    skipped_no_delta: int = 0
    skipped_by_trigger: int = 0
    #: One record per summariser run (input tokens, covered events, ...), for analysis.
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: The latest summariser error (a failed update is logged and swallowed; callers that must
    #: explain why a summary stopped advancing read it here).
    last_error: Exception | None = None


class SummaryWorker:
    """Runs rolling summary updates: on demand (:meth:`summarize`) and in the background.

    The background pool has ``policy.workers`` workers, each with a bounded queue; a job goes to
    the worker chosen by its session, so one session's jobs stay in order. A full queue runs the
    job in the caller. Each job is limited to ``policy.job_timeout`` seconds.
    """

    def __init__(self, session_service: SessionService, summarizer: Summarizer,
                 policy: SummaryPolicy | None = None, *, checks: Sequence[TriggerCheck] | None = None) -> None:
        self.session_service = session_service
        self.summarizer = summarizer
        self.policy = policy or summarizer.policy
        self.checks = list(checks) if checks is not None else self.policy.trigger_checks()
        self.stats = WorkerStats()
        #: Summariser runs per scope, for progress reports ("summary step k").
        self._steps: dict[LockKey, int] = {}
        self._queues: list[asyncio.Queue[_Job]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._pending = 0

    # -- the rolling update ----------------------------------------------------------------------

    async def summarize(self, session: Session, filter_key: str = FULL_SESSION_KEY, force: bool = False, *,
                        context_window: int | None = None, parent_request: ModelRequest | None = None,
                        idle_seconds: float | None = None) -> bool:
        """Update the summary of ``filter_key`` (and cascade targets); True iff a boundary advanced.

        ``force`` skips the trigger checks; with no new events there is still nothing to summarise
        and no model call. A partial (safe-prefix) advance returns True; call again to continue.
        """
        targets: list[str] = []
        if self.policy.allows_key(filter_key):
            targets.append(filter_key)
        if filter_key and self.policy.cascade_full_session:
            targets.append(FULL_SESSION_KEY)
        if not targets:
            return False
        update = functools.partial(self._summarize_key, session, force=force, context_window=context_window,
                                   parent_request=parent_request, idle_seconds=idle_seconds)
        if len(targets) == 2 and filter_key in targets:
            history = [e for e in session.events if is_history_event(e)]
            if all(in_filter(e.filter_key, filter_key) for e in history) and not open_branches(session):
                # The branch sees every event: summarise once and copy to the full-session key.
                return await update(filter_key, copy_to_full=True)
        results = await asyncio.gather(*(update(key) for key in targets))
        return any(results)

    async def _current_summary(self, session: Session, filter_key: str) -> Summary | None:
        stored = await self.session_service.get_summary(session, filter_key)
        in_memory = session.summaries.get(filter_key)
        if stored is None:
            return in_memory
        if in_memory is not None and in_memory.updated_at > stored.updated_at:
            # an in-memory advance whose persistence failed is still the newest state we know
            return in_memory
        return stored

    async def _summarize_key(self, session: Session, filter_key: str, *, force: bool,
                             context_window: int | None, parent_request: ModelRequest | None,
                             idle_seconds: float | None, copy_to_full: bool = False) -> bool:
        key = (session.app_name, session.user_id, session.id, filter_key)
        async with SCOPE_LOCKS.hold(key):
            previous = await self._current_summary(session, filter_key)
            previous_text = previous.text if previous else ""
            previous_boundary = previous.boundary if previous else None
            delta = delta_after_boundary(session, previous_boundary, filter_key)
            if not delta and not force:
                self.stats.skipped_no_delta += 1
                return False
            if not force:
                obs = self.observe(delta, previous_text, context_window, idle_seconds)
                if not checks_pass(self.checks, self.policy.checks_mode, obs):
                    self.stats.skipped_by_trigger += 1
                    return False
            started = time.perf_counter()
            try:
                outcome = await self.summarizer.summarize(delta, previous_text, parent_request=parent_request)
            except Exception as exc:  # the old summary stays; a failed update is not fatal to a run
                self.stats.failed += 1
                self.stats.last_error = exc
                log.warning("summary update failed for %s (old summary kept): %s: %s",
                            _describe(key), type(exc).__name__, exc)
                return False
            self.stats.model_calls += outcome.model_calls
            self.stats.runs.append({
                "filter_key": filter_key, "delta_events": len(delta),
                "delta_tokens": sum(count_event_tokens(e) for e in delta),
                "previous_summary_tokens": tokens.count_text(previous_text),
                "input_tokens": outcome.input_tokens, "budget": outcome.budget, "covered": outcome.covered,
                "mode": outcome.mode, "retried": outcome.retried, "truncated_events": outcome.truncated_events,
                "summary_tokens": tokens.count_text(outcome.text), "prompt_version": outcome.prompt_version,
                "latency_ms": round((time.perf_counter() - started) * 1000, 3),
            })
            self._report_step(session, key, delta, outcome.covered if outcome.text else 0)
            if not outcome.text:
                return False
            boundary = previous_boundary
            if delta and outcome.covered > 0:
                last = delta[min(outcome.covered, len(delta)) - 1]
                boundary = SummaryBoundary(filter_key=filter_key, cutoff_at=last.timestamp, last_event_id=last.id)
            summary = Summary(text=outcome.text, updated_at=time.time(), boundary=boundary)
            advanced = boundary is not None and boundary != previous_boundary
            await self._write(session, filter_key, summary)
            if copy_to_full:
                full_key = (session.app_name, session.user_id, session.id, FULL_SESSION_KEY)
                async with SCOPE_LOCKS.hold(full_key):
                    copied = Summary(text=summary.text, updated_at=summary.updated_at,
                                     boundary=SummaryBoundary(FULL_SESSION_KEY, boundary.cutoff_at,
                                                              boundary.last_event_id) if boundary else None)
                    await self._write(session, FULL_SESSION_KEY, copied)
            if advanced:
                self.stats.advanced += 1
            return advanced

    def _report_step(self, session: Session, key: LockKey, delta: Sequence[Event], covered: int) -> None:
        """Progress of a (rolling) summary of this scope: step k, history tokens covered so far.

        The number of steps is not known in advance (it depends on how much of the remaining
        history each safe prefix holds), so the step has no total; the tokens do.
        """
        self._steps[key] = step = self._steps.get(key, 0) + 1
        if not progress.listening():
            return
        history = delta_after_boundary(session, None, key[3])
        total = sum(count_event_tokens(e) for e in history)
        remaining = sum(count_event_tokens(e) for e in delta[covered:])
        progress.report_progress("summary", step, tokens=total - remaining, tokens_total=total)

    async def _write(self, session: Session, filter_key: str, summary: Summary) -> None:
        try:
            await self.session_service.write_summary(session, filter_key, summary)
        except Exception as exc:
            # Keep the advance in memory so this run's next request still benefits.
            session.summaries[filter_key] = summary
            log.warning("summary for %s advanced in memory but could not be persisted: %s: %s",
                        _describe((session.app_name, session.user_id, session.id, filter_key)),
                        type(exc).__name__, exc)

    def resolve_window(self, context_window: int | None) -> int:
        """The window the triggers use: the run/agent window given, else the summary model's."""
        from agentlab.model.window import resolve_context_window

        # The summary model's window only when needed: asking an HTTP model may probe its server.
        return resolve_context_window(context_window) or self.summarizer.window

    def observe(self, delta: Sequence[Event], previous_text: str, context_window: int | None,
                idle_seconds: float | None) -> TriggerObservation:
        """What the trigger checks see for this delta (idle time since its last event if not given)."""
        if idle_seconds is None and delta:
            idle_seconds = time.time() - delta[-1].timestamp
        return TriggerObservation(
            delta_events=len(delta),
            delta_tokens=sum(count_event_tokens(e) for e in delta),
            previous_summary_tokens=tokens.count_text(previous_text),
            context_window=self.resolve_window(context_window),
            idle_seconds=idle_seconds,
        )

    # -- the runner hook -------------------------------------------------------------------------

    @staticmethod
    def qualifies(session: Session, event: Event) -> bool:
        """Whether a persisted event may trigger a summary job (trpc-agent-go's runner rules).

        Yes for a tool result that completes its tool round, and for a final assistant answer.
        Never for user input, a bare tool call, an error, an invalid or partial event, or an event
        marked ``metadata["skip_summarization"]``.
        """
        if event.error or event.partial or not event.done or not event.has_valid_content():
            return False
        if event.metadata.get("skip_summarization"):
            return False
        if event.is_final_response():
            return True
        if not event.is_tool_result():
            return False
        return _tool_round_complete(session, event)

    async def on_event_appended(self, inv: Invocation, event: Event) -> None:
        """The runner hook: enqueue an update after a qualifying event."""
        if not self.qualifies(inv.session, event):
            return
        # A branch's event updates its branch's summary (a composition's events carry their own keys).
        await self.enqueue(inv.session, event.filter_key or inv.filter_key, context_window=_invocation_window(inv, self),
                           idle_seconds=_idle_before_request(inv))

    # -- the background pool ---------------------------------------------------------------------

    def _ensure_started(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._tasks:
            return
        self._loop = loop
        self._pending = 0
        self._queues = [asyncio.Queue(maxsize=self.policy.queue_size) for _ in range(self.policy.workers)]
        self._tasks = [loop.create_task(self._work(q), name=f"summary-worker-{i}")
                       for i, q in enumerate(self._queues)]

    async def enqueue(self, session: Session, filter_key: str = FULL_SESSION_KEY, *,
                      context_window: int | None = None, idle_seconds: float | None = None) -> None:
        """Queue a non-forced update; a full queue (or a closed worker) runs it in the caller."""
        job = _Job(session, filter_key, context_window, idle_seconds, contextvars.copy_context())
        if self._closed:
            self.stats.ran_in_caller += 1
            await self._run_job(job)
            return
        self._ensure_started()
        queue = self._queues[hash((session.app_name, session.user_id, session.id)) % len(self._queues)]
        try:
            queue.put_nowait(job)
            self._pending += 1
            self.stats.enqueued += 1
        except asyncio.QueueFull:
            self.stats.ran_in_caller += 1
            await self._run_job(job)

    async def _work(self, queue: asyncio.Queue[_Job]) -> None:
        while True:
            job = await queue.get()
            try:
                # Run in the enqueuer's context so call observers attribute summary calls correctly.
                task = job.context.run(asyncio.ensure_future, self._run_job(job))
                await task
            except asyncio.CancelledError:
                raise
            except Exception:  # _run_job already logs; never let one job kill the worker
                pass
            finally:
                self._pending -= 1
                queue.task_done()

    async def _run_job(self, job: _Job) -> None:
        try:
            await asyncio.wait_for(
                self.summarize(job.session, job.filter_key, False, context_window=job.context_window,
                               idle_seconds=job.idle_seconds),
                timeout=self.policy.job_timeout,
            )
            self.stats.completed += 1
        except asyncio.TimeoutError:
            self.stats.timed_out += 1
            log.warning("summary job for session %s timed out after %.1fs", job.session.id,
                        self.policy.job_timeout)
        except Exception as exc:
            self.stats.failed += 1
            log.warning("summary job for session %s failed: %s: %s", job.session.id, type(exc).__name__, exc)

    async def drain(self) -> None:
        """Wait until every queued job has finished."""
        while self._pending:
            for q in self._queues:
                await q.join()

    async def close(self) -> None:
        """Finish queued work, then stop the workers; later jobs run in the caller."""
        try:
            if self._loop is not None and self._loop is asyncio.get_running_loop():
                await self.drain()
        finally:
            self._closed = True
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                    await task
            self._tasks = []


@dataclass(frozen=True)
class SummarisedAll:
    """What :func:`summarise_all` did: the summary, its forced steps, and what it left out."""

    summary: Summary | None
    #: Forced updates made.
    steps: int
    #: History events after the boundary before the first step (what there was to summarise).
    total: int
    #: History events still after the boundary at the end (0: the summary covers everything).
    remaining: int
    #: Whether ``max_steps`` was the reason to stop.
    hit_max_steps: bool = False

    @property
    def complete(self) -> bool:
        """A summary with text covers every history event."""
        return self.summary is not None and bool(self.summary.text) and self.remaining == 0


async def summarise_all(worker: SummaryWorker, session: Session, filter_key: str = FULL_SESSION_KEY, *,
                        max_steps: int | None = None) -> SummarisedAll:
    """Summarise everything now: forced rolling updates of ``filter_key`` until no history event is left.

    One stop rule: stop when nothing is left after the boundary, when an update does not advance
    (the summariser failed or wrote nothing; ``worker.stats.last_error`` says why), or after
    ``max_steps`` updates (``None``: as many as there are events, which an advancing update never
    reaches since each covers at least one). Each update summarises the longest prefix of what is
    left that fits the summary model's input (the safe prefix), so a small window takes several.
    """
    service = worker.session_service

    async def current() -> tuple[Session, Summary | None]:
        fresh = await service.get_session(session.app_name, session.user_id, session.id) or session
        return fresh, await service.get_summary(fresh, filter_key)

    fresh, summary = await current()
    total = len(delta_after_boundary(fresh, summary.boundary if summary else None, filter_key))
    limit = total + 1 if max_steps is None else max_steps
    steps, left = 0, total
    while left and steps < limit:
        steps += 1
        advanced = await worker.summarize(fresh, filter_key, force=True)
        fresh, summary = await current()
        left = len(delta_after_boundary(fresh, summary.boundary if summary else None, filter_key))
        if not advanced:
            break
    return SummarisedAll(summary, steps, total, left, hit_max_steps=bool(left) and steps >= limit)


def _describe(key: LockKey) -> str:
    app, user, session, filter_key = key
    return f"app={app!r} user={user!r} session={session!r} filter_key={filter_key!r}"


def _tool_round_complete(session: Session, result: Event) -> bool:
    """A tool result completes its round when every call of its assistant message has a result."""
    call_id = result.message.tool_call_id if result.message else None
    answered: set[str] = set()
    for e in reversed(session.events):
        m = e.message
        if m is None:
            continue
        if m.role == "tool" and m.tool_call_id:
            answered.add(m.tool_call_id)
        elif m.role == "assistant" and m.tool_calls and any(c.id == call_id for c in m.tool_calls):
            return all(c.id in answered for c in m.tool_calls)
    return True  # the call is not in view; treat the result as complete


def _invocation_window(inv: Invocation, worker: SummaryWorker | None = None) -> int | None:
    """Run override -> agent model's window -> (None: the worker falls back to the summary model)."""
    from agentlab.model.window import resolve_context_window

    return resolve_context_window(inv.options.context_window, getattr(inv.agent, "model", None)) or None


def _idle_before_request(inv: Invocation) -> float | None:
    """The gap between the current user input and the event before it (the runner's observation)."""
    current = inv.user_event
    if current is None:
        return None
    previous: Event | None = None
    for e in reversed(inv.session.events):
        if e.id == current.id:
            continue
        if e.timestamp <= current.timestamp:
            previous = e
            break
    return None if previous is None else max(0.0, current.timestamp - previous.timestamp)


def summary_worker_for(agent: Any, session_service: SessionService) -> SummaryWorker:
    """The worker an agent's policies ask for: its ``summary`` policy and ``summary_model``."""
    policy: SummaryPolicy = agent.summary
    model: Model = getattr(agent, "summary_model", None) or agent.model
    return SummaryWorker(session_service, Summarizer(model, policy), policy)

