"""Skill evolution: after a run, review the session delta and publish a skill revision.

The reference is described in docs/sources.md#skills-and-evolution.

The path of one pass (:meth:`EvolutionService.review_session`):

1. **Queue.** The Runner calls :meth:`EvolutionMechanism.on_run_completed` after a completed run
   (the same hook the memory worker uses); the service queues the session and a background task
   reviews it, so the user has the answer first. A full queue runs the pass in the caller.
2. **Delta.** The events after the session's cursor (state key :data:`CURSOR_KEY`, the id of the
   last event reviewed). The cursor moves only after a publish or a skip; an error (the model
   call failed, the reply did not parse) leaves it, so the delta is reviewed again next time.
3. **Evidence gate** (:mod:`agentlab.skills.evidence`, no model): a delta with no signal is
   skipped without a model call.
4. **Review** (:mod:`agentlab.skills.review`): one model call proposes create / update / none;
   ``none`` is a skip.
5. **Reconciliation** with the library: same name, or a near-duplicate description, becomes an update.
6. **Gates** (:mod:`agentlab.skills.gates`): spec, safety and effectiveness run only when the
   policy switches them on; a failed gate is a skip with the reason. With ``human_approval`` the
   candidate is parked in the approval queue (:meth:`EvolutionService.approve` /
   :meth:`EvolutionService.reject` decide it). With no gate configured the proposal is published
   directly, and the result says so.
7. **Publish** (:class:`~agentlab.skills.publish.SkillPublisher`): a new revision, history kept,
   repository refreshed — the next run lists and loads it.

**Crash safety.** Before publishing, the proposal is written to session state
(:data:`PENDING_KEY`, with the delta's last event id); the cursor and the pending record are
cleared together after the publish. A pass that finds a pending record publishes it first — the
publisher is idempotent per proposal id, so a crash after the revision was written does not
publish it twice, and a crash before it does not lose it. A crash before the pending record is
written leaves the cursor, so the delta is reviewed again.

Evolution writes skill revisions and session state only; it never writes memory (this package
does not import :mod:`agentlab.memory`).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlab.core.mechanism import ContextMechanism
from agentlab.events import Event
from agentlab.model.base import Model, ModelError
from agentlab.policy_json import PolicyJSON
from agentlab.session.base import Session, SessionService
from agentlab.skills.evidence import DEFAULT_CORRECTION_CUES, Evidence, find_evidence
from agentlab.skills.gates import GateResult, effectiveness_check, safety_check, spec_check
from agentlab.skills.publish import ApprovalQueue, Candidate, Revision, SkillPublisher
from agentlab.skills.repository import SkillRepository
from agentlab.skills.review import Proposal, ReviewParseError, reconcile, review

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.core.services import ServiceRegistry

log = logging.getLogger(__name__)

#: Session state key of the evolution cursor: the id of the last event reviewed.
CURSOR_KEY = "evolution:cursor"
#: Session state key of a proposal accepted for publication but not yet recorded as published.
PENDING_KEY = "evolution:pending"
#: The registry label of the service.
SERVICE_NAME = "evolution_service"


@dataclass(frozen=True)
class EvolutionPolicy(PolicyJSON):
    """Every knob of skill evolution. With no gate switched on, proposals are published directly."""

    #: Review completed runs at all.
    enabled: bool = True
    #: Repeated tool coordination: an ordered pair of different tools called back to back this many times.
    coordination_repeats: int = 2
    #: Phrases that make a user message a correction (matched case-insensitively).
    correction_cues: tuple[str, ...] = DEFAULT_CORRECTION_CUES
    #: Reconciliation: word-set Jaccard similarity of descriptions at or above which two skills are one.
    similarity_threshold: float = 0.5
    #: The reviewer prompt; ``skill-review/1`` is the only version so far.
    review_prompt_version: str = "skill-review/1"
    #: Run the spec check (name, description, instruction length).
    spec_check: bool = False
    #: Run the safety check (no secrets, no user-private facts).
    safety_check: bool = False
    #: Run the effectiveness check (the run answered and its last tool call succeeded).
    effectiveness_check: bool = False
    #: Park candidates for a human decision instead of publishing them.
    human_approval: bool = False
    #: Longest instructions the spec check accepts.
    max_instructions_chars: int = 4000
    #: Queued sessions before a pass runs in the caller instead.
    queue_size: int = 10
    #: Seconds one pass may take.
    job_timeout_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.coordination_repeats < 2:
            raise ValueError("coordination_repeats must be at least 2 (a pattern seen once is not repeated)")
        if not 0.0 < self.similarity_threshold <= 1.0:
            raise ValueError("similarity_threshold must be in (0, 1]")
        if self.queue_size < 1 or self.job_timeout_seconds <= 0:
            raise ValueError("queue_size and job_timeout_seconds must be positive")

    @property
    def gates(self) -> tuple[str, ...]:
        """The gates this policy runs, in order."""
        flags = (("spec", self.spec_check), ("safety", self.safety_check),
                 ("effectiveness", self.effectiveness_check), ("human", self.human_approval))
        return tuple(name for name, on in flags if on)


@dataclass
class EvolutionResult:
    """What one pass did. ``status``: skipped, published, awaiting_approval, rejected or error."""

    session_id: str
    status: str
    reason: str = ""
    evidence: Evidence = field(default_factory=Evidence)
    proposal: Proposal | None = None
    gates: list[GateResult] = field(default_factory=list)
    revision: Revision | None = None
    candidate: Candidate | None = None
    model_calls: int = 0
    events_read: int = 0

    def describe(self) -> str:
        """One line for logs and examples."""
        return f"{self.status}: {self.reason}"


def proposal_id(session: Session, since: str, through: str) -> str:
    """A stable id of the proposal made from one delta (the publisher's idempotency key)."""
    key = f"{session.app_name}\x00{session.user_id}\x00{session.id}\x00{since}\x00{through}"
    return "prop-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def delta_after(session: Session, cursor: str | None) -> tuple[list[Event], list[Event]]:
    """``(events before the cursor, events after it)``; an unknown cursor means the whole ledger."""
    events = [e for e in session.events if not e.partial]
    if cursor:
        for i in range(len(events) - 1, -1, -1):
            if events[i].id == cursor:
                return events[: i + 1], events[i + 1:]
    return [], events


class EvolutionService:
    """Post-run skill review with a queue, a cursor per session and the configured gates (module docstring)."""

    def __init__(self, model: Model, policy: EvolutionPolicy, repository: SkillRepository,
                 session_service: SessionService) -> None:
        self.model = model
        self.policy = policy
        self.repository = repository
        self.session_service = session_service
        self.publisher = SkillPublisher(repository)
        self.approvals = ApprovalQueue(repository.root)
        self.results: collections.deque[EvolutionResult] = collections.deque(maxlen=1000)
        self._queue: asyncio.Queue[tuple[str, str, str]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None

    # ---------------------------------------------------------------------------------- queue

    async def on_run_completed(self, inv: Invocation) -> None:
        """Queue the run's session for review (reviewed in the caller when the queue is full)."""
        if not self.policy.enabled or inv.cancelled.is_set():
            return
        key = (inv.app_name, inv.user_id, inv.session.id)
        queue = self._ensure_queue()
        try:
            queue.put_nowait(key)
        except asyncio.QueueFull:
            await self._run(*key)

    async def drain(self) -> None:
        """Wait until every queued review has finished."""
        if self._queue is not None and self._loop is asyncio.get_running_loop():
            await self._queue.join()

    async def close(self) -> None:
        """Finish queued reviews, then stop the background task."""
        await self.drain()
        if self._task is not None:
            self._task.cancel()
            if self._loop is asyncio.get_running_loop():
                await asyncio.gather(self._task, return_exceptions=True)
        self._task = self._queue = None

    def _ensure_queue(self) -> asyncio.Queue[tuple[str, str, str]]:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:
            self._loop = loop
            self._lock = asyncio.Lock()
            self._queue = asyncio.Queue(maxsize=self.policy.queue_size)
            self._task = loop.create_task(self._work(self._queue), name="skill-evolution")
        return self._queue

    async def _work(self, queue: asyncio.Queue[tuple[str, str, str]]) -> None:
        while True:
            key = await queue.get()
            try:
                await self._run(*key)
            except Exception:  # a pass must never kill the worker
                log.exception("skill evolution: unexpected failure for %s", "/".join(key))
            finally:
                queue.task_done()

    async def _run(self, app_name: str, user_id: str, session_id: str) -> EvolutionResult:
        lock = self._lock or asyncio.Lock()
        async with lock:
            try:
                result = await asyncio.wait_for(self.review_session(app_name, user_id, session_id),
                                                self.policy.job_timeout_seconds)
            except asyncio.TimeoutError:
                result = EvolutionResult(session_id, "error",
                                         f"review timed out after {self.policy.job_timeout_seconds:g} s")
        self.results.append(result)
        if result.status == "error":
            log.warning("skill evolution for session %r: %s", session_id, result.reason)
        return result

    # ----------------------------------------------------------------------------------- pass

    async def review_session(self, app_name: str, user_id: str, session_id: str) -> EvolutionResult:
        """One pass over the session's delta since its cursor (see the module docstring)."""
        svc = self.session_service
        session = await svc.get_session(app_name, user_id, session_id)
        if session is None:
            return EvolutionResult(session_id, "error", "the session does not exist")
        pending = session.state.get(PENDING_KEY)
        if isinstance(pending, dict):
            return await self._publish_pending(session, pending, resumed=True)
        cursor = session.state.get(CURSOR_KEY)
        before, delta = delta_after(session, cursor if isinstance(cursor, str) else None)
        result = EvolutionResult(session_id, "skipped", events_read=len(delta))
        if not delta:
            result.reason = "no new events since the last review"
            return result
        through = delta[-1].id
        result.evidence = find_evidence(delta, before, coordination_repeats=self.policy.coordination_repeats,
                                        correction_cues=self.policy.correction_cues)
        if not result.evidence.strong:
            result.reason = f"weak evidence in {len(delta)} events: no model call"
            await svc.update_state(session, {CURSOR_KEY: through})
            return result
        self.repository.refresh()
        library = self.repository.list()
        result.model_calls = 1
        try:
            proposal, _raw = await review(self.model, delta, result.evidence, library,
                                          self.policy.review_prompt_version)
        except (ModelError, ReviewParseError) as exc:
            result.status = "error"
            result.reason = f"review failed, the cursor stays for a retry: {exc}"
            return result
        if proposal.action == "none":
            result.proposal = proposal
            result.reason = f"the reviewer proposed nothing: {proposal.reason or 'no reason given'}"
            await svc.update_state(session, {CURSOR_KEY: through})
            return result
        proposal = reconcile(proposal, library, self.policy.similarity_threshold)
        result.proposal = proposal
        for gate in self.policy.gates:
            verdict = self._check(gate, proposal, delta, user_id)
            if verdict is None:
                continue
            result.gates.append(verdict)
            if not verdict.passed:
                result.status = "rejected"
                result.reason = f"the {verdict.gate} gate refused {proposal.name!r}: {verdict.reason}"
                await svc.update_state(session, {CURSOR_KEY: through})
                return result
        pid = proposal_id(session, cursor if isinstance(cursor, str) else "", through)
        source = f"{app_name}/{user_id}/{session_id}#{through}"
        if self.policy.human_approval:
            result.candidate = self.approvals.submit(pid, proposal, source)
            result.status = "awaiting_approval"
            result.reason = (f"{proposal.action} of {proposal.name!r} waits for approval as {pid} "
                             f"(checks passed: {', '.join(g.gate for g in result.gates) or 'none configured'})")
            await svc.update_state(session, {CURSOR_KEY: through})
            return result
        record = {"proposal": proposal.to_dict(), "id": pid, "through": through, "source": source,
                  "gates": [g.gate for g in result.gates]}
        await svc.update_state(session, {PENDING_KEY: record})
        published = await self._publish_pending(session, record, resumed=False)
        published.evidence, published.gates, published.model_calls = result.evidence, result.gates, 1
        published.events_read = len(delta)
        return published

    def _check(self, gate: str, proposal: Proposal, delta: Sequence[Event], user_id: str) -> GateResult | None:
        if gate == "spec":
            return spec_check(proposal, self.policy.max_instructions_chars)
        if gate == "safety":
            return safety_check(proposal, delta, user_id)
        if gate == "effectiveness":
            return effectiveness_check(delta)
        return None  # the human gate parks the candidate instead of checking it

    async def _publish_pending(self, session: Session, record: dict[str, Any], *, resumed: bool) -> EvolutionResult:
        proposal = Proposal.from_dict(record["proposal"])
        revision = self.publisher.publish(proposal, str(record["id"]), source=str(record.get("source", "")))
        await self.session_service.update_state(session, {CURSOR_KEY: record["through"], PENDING_KEY: None})
        checked = list(record.get("gates") or [])
        how = f"after the checks {', '.join(checked)}" if checked else "directly (no gate is configured)"
        verb = "was already published as" if revision.already_published else "published as"
        reason = f"{proposal.action} of {proposal.name!r} {verb} revision {revision.number}, {how}"
        if resumed:
            reason = f"resumed a pending publication: {reason}"
        return EvolutionResult(session.id, "published", reason, proposal=proposal, revision=revision)

    # ------------------------------------------------------------------------------- approval

    def approve(self, candidate_id: str) -> Revision:
        """Publish a parked candidate (idempotent: approving after a crash does not publish twice)."""
        candidate = self.approvals.get(candidate_id)
        if candidate.status != "pending":
            raise ValueError(f"candidate {candidate_id!r} was already {candidate.status}")
        revision = self.publisher.publish(candidate.proposal, candidate.id, source=candidate.source)
        self.approvals.decide(candidate_id, "approved")
        return revision

    def reject(self, candidate_id: str, reason: str = "") -> Candidate:
        """Drop a parked candidate, keeping the decision and its reason."""
        return self.approvals.decide(candidate_id, "rejected", reason)


class EvolutionMechanism(ContextMechanism):
    """Hands completed runs to an :class:`EvolutionService` (contributes nothing to requests).

    ``model`` reviews (else the agent's model, through :meth:`for_model`); the repository is the
    one the skills mechanism lists, so a published revision is visible to the next run.
    """

    def __init__(self, repository: SkillRepository, policy: EvolutionPolicy | None = None,
                 model: Model | None = None) -> None:
        self.repository = repository
        self.policy = policy or EvolutionPolicy()
        self.model = model

    def describe(self) -> str:
        """``"evolution"`` and the gates it runs."""
        return f"evolution (gates: {', '.join(self.policy.gates) or 'none: direct publication'})"

    def for_model(self, model: Model) -> ContextMechanism:
        """Bound to the agent's model when no reviewer model was given."""
        return self if self.model is not None else EvolutionMechanism(self.repository, self.policy, model)

    def open(self, services: ServiceRegistry) -> None:
        """Register the service (owned: ``Runner.close`` drains it) when there is a model and a session service."""
        sessions = services.get(SessionService)  # type: ignore[type-abstract]
        if self.model is None or sessions is None or services.named(SERVICE_NAME) is not None:
            return
        services.add(EvolutionService(self.model, self.policy, self.repository, sessions), owned=True,
                     name=SERVICE_NAME)

    async def on_run_completed(self, inv: Invocation) -> None:
        """Queue the completed run's session for review."""
        service = inv.services.named(SERVICE_NAME)
        if service is not None:
            await service.on_run_completed(inv)


def evolution_service(services: ServiceRegistry) -> EvolutionService | None:
    """The evolution service a Runner's registry holds (``runner.services``), or ``None``."""
    found = services.named(SERVICE_NAME)
    return found if isinstance(found, EvolutionService) else None


__all__ = ["CURSOR_KEY", "PENDING_KEY", "SERVICE_NAME", "EvolutionMechanism", "EvolutionPolicy", "EvolutionResult",
           "EvolutionService", "delta_after", "evolution_service", "proposal_id"]
