"""LLM-free retention: whether the evidence for the question survives a context policy.

Most of what a context policy loses can be measured without a model: whether the gold evidence
for the question is still in the request the model would be shown. For one history (either
delivery of :mod:`agentlab.bench.retention.delivery`), its questions with their evidence maps, and one arm
(a list of context mechanisms), :func:`measure_retention` projects every request a live agent
would send (:func:`agentlab.core.project`, no Agent, no Runner, no model for the non-summarising
mechanisms) and returns one :class:`RetentionRow` per question; :func:`aggregate` averages them.

Definitions (the columns of :class:`RetentionRow`):

* **present.** An evidence unit is *present* in a request when every one of its pieces' text is a
  substring of the content of some message of that request — its system message (instruction,
  summaries, system text the mechanisms add) or any history message. Before the test both sides
  are normalised by collapsing every run of whitespace to one space and stripping the ends; case
  and punctuation are kept. A tool result cut to head + tail keeps the units wholly inside the
  kept head or tail and loses the rest; a placeholder loses them all.
* **retained** — the share of the case's gold units present in the *final answer request* (the
  request with the question). It shows what the model can read verbatim; it does not show whether
  the model would use it, nor what a summary kept in other words (see ``evidence_rouge_recall``).
* **recoverable@k** — the share of gold units that are present *or* whose every missing piece lies
  in an event among the top ``k`` hits of the recall package's search with the question as the
  query, over the events the projection hid or replaced (the lexical or hybrid index of
  :mod:`agentlab.recall.search` with its query broadening, then its lexical scan fallback, as
  ``session_search`` runs with ``scope=current_hidden``; here the scope is what this projection
  left out, since a clearing policy writes no summary boundary). So ``recoverable@k >= retained``,
  and ``recoverable@k - retained`` is what one search would bring back to a model that then calls
  ``session_load`` on the hit. ``None`` when the arm offers no ``session_search`` tool. The hit is
  counted at event granularity: in tool delivery one result holds a whole chunk or session, so a
  hit recovers every unit in it, and with ~25 reads per history ``k = 10`` hits cover a large share
  of the history — an optimistic figure there, stricter in turn delivery (one turn per event).
  For an arm offering ``artifact_load`` (``artifact_offload``), a piece in an event the request
  shows as an offload handle counts as found at every ``k``: the handle names the artifact.
* **peak_prompt_tokens** — the largest prompt of the case, over every request a live agent sends
  (ACON's peak: each tool round is one request). In tool delivery that is the request before each
  scripted read (the agent decides the next read) and the final answer request; in turn delivery
  the history is already there, so there is one request. Counted as ``project`` counts them
  (agentlab's tokeniser over the messages and the tool declarations).
* **total_prompt_tokens** — the sum of those prompts: what the case sends in all, every token
  counted (with ``cache_profile``, ``cache`` holds what a provider's prompt cache would serve of
  them: :mod:`agentlab.bench.retention.cache`).
* **final_prompt_tokens** — the final answer request alone (the "last call" rule of
  docs/token-accounting.md).
* **evidence_rouge_recall** — for a summarising arm, the ROUGE-L recall of the gold evidence text
  (every unit, joined) against the summary texts the mechanisms put in the final request
  (agentlab's normalisation, :func:`agentlab.bench.scoring.metrics.normalize_tokens`); ``None`` when no
  summary was made. It is a bag-of-words proxy: a paraphrase that keeps the fact scores low, and
  a long summary scores high.

How this relates to the model-judged quality loss: ``1 - retained`` is the share of the
evidence the model *cannot* see verbatim, not a quality loss; a question answerable from several
places, from general knowledge or from a summary loses less than its evidence suggests, and a model
that cannot find what is present loses more. Retention explains a quality loss (which arm dropped
what), it does not replace it.

The arms are the :mod:`agentlab.policies.arms` registry's: :func:`retention_arms` is its view of the
arms that call no model (plus the ``long_context`` baseline), :func:`model_arms` of the ones that
need a summariser, each with the reason ``Arm.needs_model`` gives.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import agentlab.bench.retention.cache as retention_cache
import agentlab.policies.arms as arms_registry
from agentlab.bench.retention.delivery import (
    question_event,
)
from agentlab.bench.retention.offload import offers_paging, paged_back
from agentlab.bench.retention.rows import (
    HistoryGroup,
    Question,
    RetentionRow,
    RetentionSummary,
    aggregate,
    normalise,
    piece_in,
    request_texts,
    units_present,
)
from agentlab.bench.scoring.metrics import normalize_tokens
from agentlab.core import ContextMechanism, project
from agentlab.core.project import ProjectionResult, replaced_in_request
from agentlab.core.tools import Tool
from agentlab.events import Event
from agentlab.model.base import Model, ModelInfo, ModelRequest
from agentlab.policies import POLICIES
from agentlab.policies import mechanism as peer_mechanism
from agentlab.policies.arms import Arm
from agentlab.recall import RecallMechanism, RecallPolicy
from agentlab.session.base import Session

#: Search depths of ``recoverable@k``.
DEFAULT_KS: tuple[int, ...] = (5, 10)
#: The window the retention benchmark uses by default: small enough that clearing bites on every
#: benchmark's tool delivery (a QMSum meeting is ~28k tokens, a LoCoMo conversation ~25k).
DEFAULT_CONTEXT_WINDOW = 8192
RETENTION_VERSION = "retention-v1"
APP_NAME = "agentlab-retention"
USER_ID = "retention"
SEARCH_TOOL = "session_search"


# ----------------------------------------------------------------------------------- arms


@dataclass(frozen=True)
class SkippedArm:
    """An arm a run without a model cannot measure, and why."""

    name: str
    reason: str


#: Share of the window at which the peers whose source trigger is an absolute 100,000 tokens
#: fire here (their ``trigger_fraction`` variant), so that they act inside the retention budget;
#: 0.9 is the share inspect, Codex and Letta use by default.
PEER_TRIGGER_FRACTION = 0.9
#: Those peers (the registry's with a ``trigger_fraction_field``, in its order): retention builds them
#: with that field = :data:`PEER_TRIGGER_FRACTION` unless the settings carry their own section (the
#: command states it in its output).
FRACTION_TRIGGERED_PEERS: tuple[str, ...] = tuple(e.name for e in POLICIES.values() if e.trigger_fraction_field)
#: The baseline's name in the retention table (no mechanism: everything stays).
FULL_HISTORY = "long_context"


def _registry_arms(task: Any = None) -> list[Arm]:
    """The baseline, then every generic arm of the registry (those ``task`` did not declare inapplicable)."""
    names = [n for n in arms_registry.arm_names(task) if n not in task.modes] if task is not None \
        else arms_registry.generic_names()
    return [arms_registry.full_history_arm(FULL_HISTORY), *(arms_registry.get_arm(n) for n in names)]


def retention_arms(task: Any = None) -> dict[str, Arm]:
    """The LLM-free arms: a view over the :mod:`agentlab.policies.arms` registry (name -> arm).

    ``long_context`` (no mechanism), then every registered generic arm whose mechanisms call no
    model (``Arm.needs_model`` empty) — tRPC-Agent-Go's ``compaction`` (``[compaction]``, switched on),
    ``compaction_recall`` (with ``session_search`` / ``session_load``), ``codex_truncation`` and the
    peers' tool clearing — and their ``+recall``; with ``task``, only the arms it runs.
    """
    return split_arms(task)[0]


def model_arms(task: Any = None) -> dict[str, SkippedArm]:
    """The registered arms that need a summariser (a model), with the registry's reason: what a "no model" run skips."""
    return split_arms(task)[1]


def split_arms(task: Any = None) -> tuple[dict[str, Arm], dict[str, SkippedArm]]:
    """(:func:`retention_arms`, :func:`model_arms`) from one pass over the registry: each arm looked up once."""
    free: dict[str, Arm] = {}
    needing: dict[str, SkippedArm] = {}
    for arm in _registry_arms(task):
        if arm.needs_model:
            needing[arm.name] = SkippedArm(arm.name, arm.needs_model)
        else:
            free[arm.name] = arm
    return free, needing


def summarising_arm(name: str, **fields: Any) -> Arm:
    """A peer summarising policy as an arm with ``fields`` set (its summariser is the model given to :func:`measure_retention`)."""
    peers = list(arms_registry.PEER_SUMMARISERS)
    if name not in peers:
        raise ValueError(f"{name!r} is not a summarising peer policy; known: {', '.join(peers)}")
    return Arm(name, "lossy", lambda settings, model: [peer_mechanism(name, **fields)],
               description=arms_registry.PEER_SUMMARISERS[name], needs_model=arms_registry.PEER_SUMMARISERS[name])


def retention_settings(settings: Any) -> Any:
    """``settings`` with the :data:`FRACTION_TRIGGERED_PEERS` sections' fraction field at :data:`PEER_TRIGGER_FRACTION`.

    Only where the run left the section at the source's defaults (or has none): a section the user set is kept.
    """
    from agentlab.bench.config import Settings

    if settings is None:
        settings = Settings()
    sections = {name: settings.section(name) for name in settings.sections()}
    for name in FRACTION_TRIGGERED_PEERS:
        entry = POLICIES[name]
        if sections.get(name, entry.policy_class()) == entry.policy_class():
            sections[name] = entry.policy_class(**{entry.trigger_fraction_field: PEER_TRIGGER_FRACTION})
    return Settings(sections, settings.published, settings.source, settings.smoke, settings.benchmark)


# ---------------------------------------------------------------------------- requests


def request_points(history: Sequence[Event]) -> list[tuple[int, Event]]:
    """Where a live agent sends a request while the history is delivered: (prefix length, its user input).

    Before every assistant tool call the agent asked the model what to do next: that request held
    the ledger up to the call, in the unit the call belongs to (its current input is that unit's
    user message). A history without tool calls (turn delivery) has no such point.
    """
    points: list[tuple[int, Event]] = []
    opening: dict[str, Event] = {}
    for i, e in enumerate(history):
        if e.message is not None and e.message.role == "user" and e.request_id:
            opening.setdefault(e.request_id, e)
        if e.is_tool_call():
            user = opening.get(e.request_id)
            if user is not None:
                points.append((i, user))
    return points


def _session(session_id: str, events: Sequence[Event]) -> Session:
    return Session(APP_NAME, USER_ID, session_id, events=list(events))


def _with_counts(events: Sequence[Event]) -> list[Event]:
    from agentlab.model import tokens

    return [e if e.token_count is not None else e.copy_with(token_count=tokens.count_event(e)) for e in events]


@dataclass
class _Prefix:
    """What the reading requests of one history under one arm came to (shared by its questions)."""

    prompt_tokens: list[int]
    mechanisms: list[ContextMechanism]
    requests: list[ModelRequest] = field(default_factory=list)


async def _project(session: Session, mechanisms: Sequence[ContextMechanism], current: Event, *,
                   model_info: ModelInfo, model: Model | None, tools: Sequence[Tool], instruction: str,
                   context_window: int | None) -> ProjectionResult:
    return await project(session, mechanisms, current, model_info, model=model, tools=tools,
                         instruction=instruction, context_window=context_window)


# ----------------------------------------------------------------------------- recovery


async def search_service(session: Session) -> Any:
    """An in-memory session service holding ``session``: what a recall arm's search reads while measuring."""
    from agentlab.session.inmemory import InMemorySessionService

    service = InMemorySessionService()
    stored = await service.create_session(APP_NAME, USER_ID, session.id)
    for event in session.events:
        await service.append_event(stored, event)
    return service


async def search_left_out(service: Any, session_id: str, policy: RecallPolicy, query: str, left_out: set[str],
                          top_k: int) -> list[str]:
    """Event ids of the top ``top_k`` recall hits for ``query`` among the events ``left_out``, best first.

    The recall package's event index (the policy's mode and embedder) with its query broadening,
    then its in-session lexical scan when the index finds nothing — ``session_search``'s
    ``current_hidden`` path with "hidden" meaning what the projection left out.
    """
    from agentlab.recall.embed import shared_embedder
    from agentlab.recall.search import index_for, resolve_search_mode, scan_session, search_with_fallback

    index = index_for(service, APP_NAME, USER_ID, shared_embedder(policy.embedder))
    await index.refresh()
    mode = resolve_search_mode(None, policy, index)

    async def run(q: str) -> list[Any]:
        return await index.search(q, top_k, mode=mode, include=lambda ref: ref.session_id == session_id
                                  and ref.event_id in left_out, refresh=False)

    hits = await search_with_fallback(query, top_k, run)
    if not hits:
        session = index.session(session_id)
        if session is not None:
            hits = scan_session(session, query, top_k, lambda e: e.id in left_out, policy.max_scan_events,
                                index.scan_texts)
    return [h.ref.event_id for h in hits[:top_k]]


def recall_policy_of(mechanisms: Sequence[Any]) -> RecallPolicy | None:
    """The recall policy among an arm's mechanisms (given as settings or as its mechanism); ``None``: no recall."""
    for m in mechanisms:
        # A policy given as settings or as its mechanism (project() accepts both).
        policy = m.policy if isinstance(m, RecallMechanism) else m if isinstance(m, RecallPolicy) else None
        if policy is not None and policy.tools_enabled and policy.search_tool:
            return policy
    return None


# ----------------------------------------------------------------------------- summaries


class _Tokens:
    def tokenize(self, text: str) -> list[str]:
        return normalize_tokens(text)


@lru_cache(maxsize=1)
def _rouge_l() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=_Tokens())


def rouge_l_recall(reference: str, summary: str) -> float:
    """ROUGE-L recall of ``reference`` against ``summary`` (agentlab's normalisation, no stemming)."""
    if not normalize_tokens(reference):
        return 0.0
    return float(_rouge_l().score(reference, summary)["rougeL"].recall)


def summary_texts(result: ProjectionResult) -> list[str]:
    """The summary texts the mechanisms put into the request (a summary, or a message a policy made)."""
    texts = [r.summary.text for r in result.reports if r.summary is not None and r.summary.text]
    texts += [e.text for e in result.draft.events if e.metadata.get("made_by_policy") and e.text]
    return texts


# ------------------------------------------------------------------------------- measure


async def measure_retention(history: Sequence[Event], questions: Sequence[Question], arm: Arm, *,
                            session_id: str, delivery: str, model_info: ModelInfo | None = None,
                            model: Model | None = None, tools: Sequence[Tool] = (), instruction: str = "",
                            context_window: int | None = DEFAULT_CONTEXT_WINDOW,
                            ks: Sequence[int] = DEFAULT_KS, settings: Any = None,
                            cache_profile: str | None = None) -> list[RetentionRow]:
    """Retention of every question over one ``history`` under ``arm`` (see the module docstring).

    ``history`` is the seeded ledger (turns, or a reading trajectory of :mod:`agentlab.bench.retention.delivery`);
    ``tools`` are declared in every request (the delivery's tools); ``context_window`` is the
    run's window (``RunOptions.context_window``). The reading requests do not depend on the
    question, so they are projected once and shared; the mechanisms' carried-over state after
    them is copied for each question. ``arm`` is an :class:`agentlab.policies.arms.Arm`; its mechanisms
    are built from ``settings`` (the benchmark's typed settings, ``None``: the defaults) and
    ``model``. A summarising arm (``arm.needs_model``) needs ``model`` (its summariser). ``cache_profile``
    (a :data:`agentlab.model.prompt_caching.PROFILES` name) fills each row's ``cache``.
    """
    if arm.needs_model and model is None:
        raise ValueError(f"arm {arm.name!r} needs a model: {arm.needs_model}")
    info = model_info or (model.info if model is not None else ModelInfo("retention", context_window or 0))
    events = _with_counts(history)
    prefix = _Prefix([], arm.mechanisms(settings, model))
    for length, current in request_points(events):
        result = await _project(_session(session_id, events[:length]), prefix.mechanisms, current,
                                model_info=info, model=model, tools=tools, instruction=instruction,
                                context_window=context_window)
        prefix.prompt_tokens.append(result.prompt_tokens)
        prefix.requests.append(result.request)
    reading = None if cache_profile is None else retention_cache.reading_replay(cache_profile, prefix.requests)
    session = _session(session_id, events)
    service = None
    rows: list[RetentionRow] = []
    history_ids = {e.id for e in events}
    by_id = {e.id: e for e in session.events}
    for q in questions:
        mechanisms = copy.deepcopy(prefix.mechanisms) if len(questions) > 1 else prefix.mechanisms
        current = question_event(session_id, q.text, events)
        result = await _project(session, mechanisms, current, model_info=info, model=model, tools=tools,
                                instruction=instruction, context_window=context_window)
        texts = request_texts(result)
        present = units_present(q.evidence, texts)
        n = len(present)
        shown = {e.id for e in result.draft.events
                 if e.id in by_id and not replaced_in_request(e, by_id[e.id])}
        left_out = history_ids - shown
        recall = recall_policy_of(mechanisms)
        paged = paged_back(result.draft) if offers_paging([result.draft]) else None  # offload handles
        recoverable: dict[int, float | None] = {}
        for k in ks:
            if (recall is None and paged is None) or n == 0:
                recoverable[k] = None
                continue
            if all(present):
                recoverable[k] = 1.0
                continue
            hits = set(paged or ())
            if recall is not None:
                if service is None:
                    service = await search_service(session)
                hits |= set(await search_left_out(service, session_id, recall, q.text, left_out, k))
            found = [ok or all(piece_in(p.text, texts) or p.event_id in hits for p in unit.pieces)
                     for ok, unit in zip(present, q.evidence.units, strict=True)]
            recoverable[k] = sum(found) / n
        summaries = summary_texts(result)
        rouge = rouge_l_recall("\n".join(u.text for u in q.evidence.units), "\n".join(summaries)) \
            if summaries and n else None
        prompts = [*prefix.prompt_tokens, result.prompt_tokens]
        rows.append(RetentionRow(
            case_id=q.case_id, arm=arm.name, delivery=delivery, n_units=n, n_missing=len(q.evidence.missing),
            retained=sum(present) / n if n else None, recoverable=recoverable,
            peak_prompt_tokens=max(prompts), total_prompt_tokens=sum(prompts),
            final_prompt_tokens=result.prompt_tokens, n_requests=len(prompts), evidence_rouge_recall=rouge,
            lost_units=tuple(u.unit_id for ok, u in zip(present, q.evidence.units, strict=True) if not ok),
            n_hidden_events=len(left_out),
            cache=None if reading is None else retention_cache.case_cache(reading, result.request)))
    return rows


@dataclass(frozen=True)
class Timed:
    """Rows and the wall time they took."""

    rows: list[RetentionRow]
    seconds: float


async def measure_arms(history: Sequence[Event], questions: Sequence[Question], arms: Sequence[Arm],
                       **kwargs: Any) -> Timed:
    """:func:`measure_retention` for every arm in turn, with the wall time."""
    started = time.perf_counter()
    rows: list[RetentionRow] = []
    for arm in arms:
        rows += await measure_retention(history, questions, arm, **kwargs)
    return Timed(rows, time.perf_counter() - started)


# ------------------------------------------------------------------------- whole benchmarks


async def measure_groups(groups: Sequence[HistoryGroup], arms: Sequence[Arm], **kwargs: Any) -> Timed:
    """:func:`measure_retention` over every group and arm (``kwargs``: its keyword settings), timed."""
    started = time.perf_counter()
    rows: list[RetentionRow] = []
    for group in groups:
        for arm in arms:
            rows += await measure_retention(group.events, group.questions, arm, session_id=group.session_id,
                                            delivery=group.delivery, tools=group.tools, **kwargs)
    return Timed(rows, time.perf_counter() - started)


__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_KS",
    "RETENTION_VERSION",
    "FULL_HISTORY",
    "Question",
    "RetentionRow",
    "RetentionSummary",
    "SkippedArm",
    "Timed",
    "aggregate",
    "measure_arms",
    "measure_groups",
    "measure_retention",
    "model_arms",
    "normalise",
    "request_points",
    "request_texts",
    "retention_arms",
    "retention_settings",
    "split_arms",
    "rouge_l_recall",
    "search_left_out",
    "summarising_arm",
    "summary_texts",
    "units_present",
]
