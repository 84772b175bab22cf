"""Replaying real agent trajectories under each arm, with no model: which supports each step still sees.

For one recorded trajectory (:mod:`agentlab.bench.datasets.trajectories`) and one arm, every
assistant step is preceded by the request a live agent would have sent under that arm: the
ledger before the step, projected with :func:`agentlab.core.project` at the context budget, its
current input the latest user message before the step, the recording's system prompt as the
instruction. The mechanisms of the arm are built once per trajectory and carried from step to step,
as in a live session. :func:`step_requests` returns those requests (one per step, the messages and
their prompt tokens): the sequence a cost model (prompt caching) can price.

The supports of each step are :func:`agentlab.bench.retention.supports.step_supports`'. Columns of
:class:`TrajectoryRow` (one trajectory, one arm):

* **supported** — the share of the trajectory's supports (over all its steps) that occur in the
  step's projected request, in the content of any message (system text included) or in the
  arguments of any tool call it shows (an id the agent already wrote in an earlier call stays
  visible there). ``None`` when the trajectory has no support.
* **recoverable** — for an arm with ``session_search`` (``<arm>+recall``): the share of supports
  visible *or* held by one of the events among the top ``k`` hits of the recall package's search
  over the events the projection hid or replaced (:func:`agentlab.bench.retention.questions.search_left_out`,
  as ``retention`` runs it), with the latest user message before the step as the query (what the
  agent was answering; it does not use the step's own words, which would contain the support).
  ``None`` without a search tool. For an arm that offers ``artifact_load`` (``artifact_offload``):
  the share visible *or* held by an event the request shows as an offload handle — the handle
  names the artifact, so one ``artifact_load`` pages it back (:mod:`agentlab.bench.retention.offload`).
* **refetch_steps** — steps with at least one hidden support: a live agent would have to call a
  tool again (or ask) before it could act as recorded. **refetch_tokens** — the tokens of the tool
  results to fetch again: per such step, the latest source result of each hidden support, counted
  once per step.
* **peak / total / final prompt tokens** — the largest, the sum and the last of the step requests'
  prompt tokens (agentlab's tokeniser; what a provider's prompt cache serves of them is ``cache``).
* **supported_lo / supported_hi** — a summarising arm replayed with no model
  (:mod:`agentlab.bench.retention.summary_bounds`, ``summary_tokens`` its stated summary length): the share
  when its summaries keep none of what they cover (= ``supported``) and when they keep all of it.
  Both equal ``supported`` for any other arm; ``summary_tokens`` is then ``None``. **summary_calls /
  summary_input_tokens / summary_output_tokens** — its summariser calls and their tokens (the
  input goes through ``cache`` with the step requests, in the order sent).
* **reward** — the recording's own reward for the trajectory (tau-bench: 1.0 = the task was
  solved in that run; SWE-agent: none recorded). It is a column of the data, not a prediction.

What ``supported`` shows and does not: it is a necessary-condition proxy — a support the request
does not hold cannot be copied from it. It does not show that the agent would fail without it
(the user's words, a summary or a guess may restore it), nor that it would succeed with it.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentlab.bench.datasets.trajectories import Trajectory
from agentlab.bench.retention.offload import offers_paging, paged_back
from agentlab.bench.retention.questions import normalise, recall_policy_of, search_left_out, search_service
from agentlab.bench.retention.summary_bounds import (
    PlaceholderSummariser,
    SummaryCosts,
    calls_before,
    covered_by,
)
from agentlab.bench.retention.supports import SUPPORTS_VERSION, Step, occurs, step_supports
from agentlab.core import project
from agentlab.core.project import ProjectionResult, replaced_in_request
from agentlab.events import Event, Message
from agentlab.model.base import Model, ModelInfo
from agentlab.model.prompt_caching import CacheTotals, cache_sequence, totals
from agentlab.policies.arms import Arm
from agentlab.session.base import Session

#: Search depth of ``recoverable``.
DEFAULT_K = 5
#: The version of this measure's definitions (the columns of the module docstring) and of the supports'
#: (:data:`agentlab.bench.retention.supports.SUPPORTS_VERSION`); stored with every ``trajectory_retention`` row.
TRAJECTORY_RETENTION_VERSION = f"trajectory-retention-v2/{SUPPORTS_VERSION}"
APP_NAME = "agentlab-trajectories"
USER_ID = "trajectories"


@dataclass(frozen=True)
class StepRequest:
    """The request projected before one assistant step (and what it showed)."""

    #: Index of the assistant event in the ledger.
    index: int
    messages: tuple[Message, ...]
    prompt_tokens: int
    #: Ids of ledger events before the step that the request left out or replaced.
    left_out: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TrajectoryRow:
    """One trajectory under one arm (definitions in the module docstring)."""

    traj_id: str
    dataset: str
    arm: str
    n_steps: int
    #: Steps with at least one support.
    n_support_steps: int
    n_supports: int
    supported: float | None
    recoverable: float | None
    refetch_steps: int
    refetch_tokens: int
    peak_prompt_tokens: int
    total_prompt_tokens: int
    final_prompt_tokens: int
    #: The recording's reward (not a prediction); ``None`` when the recording has none.
    recorded_reward: float | None
    #: (step index, support text) of every support the step's request hid.
    hidden: tuple[tuple[int, str], ...] = ()
    #: The step requests (and a summarising arm's summariser requests) through a prompt cache, in the
    #: order sent (``None`` without a cache profile).
    cache: CacheTotals | None = None
    #: A summarising arm's bounds (its summaries keep none / all of what they cover); ``supported`` otherwise.
    supported_lo: float | None = None
    supported_hi: float | None = None
    #: The summary length the arm was replayed at (``None``: not a summarising arm replayed with no model).
    summary_tokens: int | None = None
    summary_calls: int = 0
    summary_input_tokens: int = 0
    summary_output_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``hidden`` as lists)."""
        out = asdict(self)
        out["hidden"] = [list(h) for h in self.hidden]
        out["cache"] = None if self.cache is None else self.cache.as_dict()
        return out


def _session(traj: Trajectory, events: Sequence[Event]) -> Session:
    return Session(APP_NAME, USER_ID, traj.traj_id.replace("/", "-"), events=list(events))


def request_texts(result: ProjectionResult) -> list[str]:
    """What a request shows, per message: its content, then its tool calls' arguments."""
    out = []
    for m in result.request.messages:
        text = "\n".join([m.content, *(c.arguments for c in m.tool_calls)]) if m.tool_calls else m.content
        if text:
            out.append(text)
    return out


class _Shown:
    """The texts one request shows, searched as one string: a unit is tested only in the texts holding it.

    ``visible(unit, kind)`` is ``any`` over the texts of the presence test (a code line in a text's
    normal form, any other unit by :func:`~agentlab.bench.retention.supports.occurs`), found with one
    ``str.find`` over the joined texts instead of a test per text. ``normalised`` remembers each
    text's normal form across the steps of a replay (they show the same texts again).
    """

    def __init__(self, texts: Sequence[str], normalised: dict[str, str]) -> None:
        self.texts = list(texts)
        self._memo = normalised
        self._raw: tuple[str, list[int]] | None = None
        self._lines: tuple[list[str], str, list[int]] | None = None

    @staticmethod
    def _join(texts: Sequence[str]) -> tuple[str, list[int]]:
        starts, at = [], 0
        for t in texts:
            starts.append(at)
            at += len(t) + 1
        return "\n".join(texts), starts

    def visible(self, unit: str, kind: str) -> bool:
        """Whether ``unit`` (a support of ``kind``) is shown by one of the texts."""
        if kind == "line":
            if self._lines is None:
                memo = self._memo
                forms = [memo.get(t) or memo.setdefault(t, normalise(t)) for t in self.texts]
                self._lines = (forms, *self._join(forms))
            texts, joined, starts = self._lines
        else:
            if self._raw is None:
                self._raw = self._join(self.texts)
            texts, (joined, starts) = self.texts, self._raw
        if not unit:
            return any(unit in t if kind == "line" else occurs(unit, t, kind) for t in texts)
        at = joined.find(unit)
        while at >= 0:
            i = bisect.bisect_right(starts, at) - 1
            inside = at + len(unit) <= starts[i] + len(texts[i])
            if inside and (kind == "line" or occurs(unit, texts[i], kind)):
                return True
            # texts[i] is settled (tested whole, or its first occurrence runs past its end): on to the next
            at = joined.find(unit, starts[i + 1]) if i + 1 < len(texts) else -1
        return False


def _current_user(events: Sequence[Event]) -> Event | None:
    return next((e for e in reversed(events) if e.message is not None and e.message.role == "user"), None)


async def _replay(traj: Trajectory, arm: Arm, steps: Sequence[Step], *, context_window: int, settings: Any,
                  model: Model | None = None) -> list[tuple[Step, ProjectionResult, frozenset[str]]]:
    """Project the request before every step under ``arm`` (mechanisms carried from step to step)."""
    mechanisms = arm.mechanisms(settings, model)
    # With a model (a summarising arm's summariser) its own info stands, so the chain calls it; the budget
    # is the window either way (``context_window`` overrides the model's, as ``--context-budget`` does).
    info = model.info if model is not None else ModelInfo("trajectories", context_window)
    by_id = {e.id: e for e in traj.events}
    ids = [e.id for e in traj.events]
    out = []
    for step in steps:
        if isinstance(model, PlaceholderSummariser):
            model.at_step = step.index
        prefix = traj.events[:step.index]
        result = await project(_session(traj, prefix), mechanisms, _current_user(prefix), info, model=model,
                               instruction=traj.instruction, context_window=context_window,
                               app_name=APP_NAME, user_id=USER_ID, report_steps=False)
        shown = {e.id for e in result.draft.events if e.id in by_id and not replaced_in_request(e, by_id[e.id])}
        out.append((step, result, frozenset(ids[:step.index]) - shown))
    return out


async def step_requests(traj: Trajectory, arm: Arm, *, context_window: int, settings: Any = None,
                        model: Model | None = None) -> list[StepRequest]:
    """The request a live agent would have sent before each assistant step of ``traj`` under ``arm``.

    ``model`` is only the summariser of a summarising arm (no step is re-generated).
    """
    _check(arm, model)
    steps = step_supports(traj.events, traj.instruction)
    replayed = await _replay(traj, arm, steps, context_window=context_window, settings=settings, model=model)
    return [StepRequest(step.index, tuple(r.request.messages), r.prompt_tokens, left)
            for step, r, left in replayed]


def _check(arm: Arm, model: Model | None) -> None:
    if arm.needs_model and model is None:
        raise ValueError(f"arm {arm.name!r} needs a model as its summariser ({arm.needs_model})")


async def measure_trajectory(traj: Trajectory, arm: Arm, *, context_window: int, settings: Any = None,
                             k: int = DEFAULT_K, model: Model | None = None,
                             cache_profile: str | None = None, summary_tokens: int | None = None,
                             steps: Sequence[Step] | None = None, hidden_prefix: Any = None) -> TrajectoryRow:
    """One :class:`TrajectoryRow`: ``traj`` replayed under ``arm`` at ``context_window`` tokens.

    ``model`` is only the summariser of a summarising arm (``arm.needs_model``); no step is re-generated.
    Without one, ``summary_tokens`` replays such an arm with a placeholder summariser of that length
    and fills its bounds (:mod:`agentlab.bench.retention.summary_bounds`). ``cache_profile`` (a
    :data:`agentlab.model.prompt_caching.PROFILES` name) fills ``cache`` with the requests, in the
    order sent, through that provider's prompt cache. ``steps`` (``step_supports`` of ``traj``, the
    same for every arm) may be passed in to be computed once per trajectory. ``hidden_prefix`` (a
    :class:`~agentlab.model.prompt_caching.HiddenPrefix`, for a recording with the provider's usage:
    :func:`agentlab.bench.retention.cache_check.replay_prefixes`) puts the agent's unlogged system prompt and
    tools in front of every step request, its warm part already cached, and sends each request at its
    recorded time (a summariser's at its step's), so entries expire as the provider's do.
    """
    placeholder = None
    if arm.needs_model and model is None and summary_tokens is not None:
        model = placeholder = PlaceholderSummariser(summary_tokens, context_window)
    _check(arm, model)
    steps = step_supports(traj.events, traj.instruction) if steps is None else steps
    replayed = await _replay(traj, arm, steps, context_window=context_window, settings=settings, model=model)
    tokens_of = {e.id: e.token_count or 0 for e in traj.events}
    service: Any = None
    n_supports = visible = upper = recovered = refetch_steps = refetch_tokens = 0
    hidden: list[tuple[int, str]] = []
    policy = recall_policy_of(arm.mechanisms(settings, model))
    pages = offers_paging(r.draft for _, r, _ in replayed)
    normalised: dict[str, str] = {}
    for step, result, left_out in replayed:
        texts = request_texts(result)
        shown_texts = _Shown(texts, normalised)
        missing = [s for s in step.supports if not shown_texts.visible(s.text, s.kind)]
        n_supports += len(step.supports)
        visible += len(step.supports) - len(missing)
        covered = covered_by(placeholder, texts) if placeholder is not None and missing else []
        upper += len(step.supports) - sum(1 for s in missing if not any(occurs(s.text, c, s.kind) for c in covered))
        if not missing:
            continue
        refetch_steps += 1
        refetch_tokens += sum(tokens_of[i] for i in {s.sources[-1] for s in missing})
        hidden += [(step.index, s.text) for s in missing]
        if pages:  # an offload handle names its artifact: artifact_load pages it back, no search needed
            paged = paged_back(result.draft)
            recovered += sum(1 for s in missing if paged.intersection(s.sources))
        if policy is None:
            continue
        query = _current_user(traj.events[:step.index])
        if service is None:
            service = await search_service(_session(traj, traj.events))
        hits = set(await search_left_out(service, _session(traj, ()).id, policy,
                                         query.text if query is not None else "", set(left_out), k))
        recovered += sum(1 for s in missing if hits.intersection(s.sources))
    prompts = [r.prompt_tokens for _, r, _ in replayed] or [0]
    sent: list[tuple[Any, Any]] = []
    times: list[float | None] = []
    for step, r, _ in replayed:
        summaries = [(c.messages, c.tools) for c in calls_before(placeholder, step.index)]
        sent += [*summaries, (r.request.messages, r.request.tools)]
        times += [traj.events[step.index].metadata.get("time")] * (len(summaries) + 1)
    costs = SummaryCosts.of(placeholder)
    supported = visible / n_supports if n_supports else None
    return TrajectoryRow(
        traj_id=traj.traj_id, dataset=traj.dataset, arm=arm.name, n_steps=len(steps),
        n_support_steps=sum(1 for s in steps if s.supports), n_supports=n_supports, supported=supported,
        recoverable=(visible + recovered) / n_supports if n_supports and (policy is not None or pages) else None,
        refetch_steps=refetch_steps, refetch_tokens=refetch_tokens,
        peak_prompt_tokens=max(prompts), total_prompt_tokens=sum(prompts), final_prompt_tokens=prompts[-1],
        recorded_reward=traj.reward, hidden=tuple(hidden),
        cache=None if cache_profile is None else totals(cache_sequence(
            sent, cache_profile, hidden_prefix, times if hidden_prefix is not None else None)),
        supported_lo=supported, supported_hi=upper / n_supports if n_supports else None,
        summary_tokens=None if placeholder is None else summary_tokens, summary_calls=costs.calls,
        summary_input_tokens=costs.input_tokens, summary_output_tokens=costs.output_tokens)


@dataclass(frozen=True)
class Timed:
    """Rows and the wall time they took."""

    rows: list[TrajectoryRow]
    seconds: float


async def measure_trajectories(trajectories: Sequence[Trajectory], arms: Sequence[Arm], *, context_window: int,
                               settings: Any = None, k: int = DEFAULT_K, cache_profile: str | None = None,
                               summary_tokens: int | None = None, hidden: dict[str, Any] | None = None) -> Timed:
    """:func:`measure_trajectory` for every trajectory and arm, timed (``hidden``: per trajectory id)."""
    started = time.perf_counter()
    rows = []
    for t in trajectories:
        steps = step_supports(t.events, t.instruction)
        rows += [await measure_trajectory(t, a, context_window=context_window, settings=settings, k=k,
                                          cache_profile=cache_profile, summary_tokens=summary_tokens,
                                          steps=steps, hidden_prefix=(hidden or {}).get(t.traj_id))
                  for a in arms]
    return Timed(rows, time.perf_counter() - started)


# ------------------------------------------------------------------------------ summaries


@dataclass(frozen=True)
class Interval:
    """A mean over trajectories with its 95 % bootstrap interval (percentile, fixed seed)."""

    mean: float | None
    low: float | None
    high: float | None
    n: int


def interval(values: Sequence[float | None]) -> Interval:
    """:func:`agentlab.bench.scoring.stats.mean_with_ci` over the defined values."""
    from agentlab.bench.scoring.stats import (
        mean_with_ci,  # scipy: imported when a table is made, not by `list`
    )

    kept = [v for v in values if v is not None]
    if not kept:
        return Interval(None, None, None, 0)
    r = mean_with_ci(kept)
    return Interval(r.estimate, r.ci_low, r.ci_high, len(kept))


@dataclass(frozen=True)
class TrajectorySummary:
    """One (dataset, arm): macro means over its trajectories."""

    dataset: str
    arm: str
    n_trajectories: int
    supported: Interval
    recoverable: Interval
    mean_refetch_steps: float
    mean_refetch_tokens: float
    mean_peak_prompt_tokens: float
    max_peak_prompt_tokens: int
    mean_total_prompt_tokens: float
    mean_final_prompt_tokens: float
    #: Mean recorded reward of the trajectories (the recording's, the same for every arm).
    recorded_reward: float | None
    n_over_budget: int
    extra: dict[str, Any] = field(default_factory=dict)
    #: The upper bound of a summarising arm replayed with no model (its ``supported`` is the lower one);
    #: ``supported`` again for any other arm.
    supported_hi: Interval | None = None
    #: The stated summary length of such an arm (``None`` otherwise) and its summariser calls per trajectory.
    summary_tokens: int | None = None
    mean_summary_calls: float = 0.0


def aggregate_trajectories(rows: Sequence[TrajectoryRow], context_window: int) -> list[TrajectorySummary]:
    """One summary per (dataset, arm), in first-seen order."""
    groups: dict[tuple[str, str], list[TrajectoryRow]] = {}
    for row in rows:
        groups.setdefault((row.dataset, row.arm), []).append(row)
    out = []
    for (dataset, arm), g in groups.items():
        n = len(g)
        rewards = [r.recorded_reward for r in g if r.recorded_reward is not None]
        out.append(TrajectorySummary(
            dataset=dataset, arm=arm, n_trajectories=n, supported=interval([r.supported for r in g]),
            recoverable=interval([r.recoverable for r in g]),
            mean_refetch_steps=sum(r.refetch_steps for r in g) / n,
            mean_refetch_tokens=sum(r.refetch_tokens for r in g) / n,
            mean_peak_prompt_tokens=sum(r.peak_prompt_tokens for r in g) / n,
            max_peak_prompt_tokens=max(r.peak_prompt_tokens for r in g),
            mean_total_prompt_tokens=sum(r.total_prompt_tokens for r in g) / n,
            mean_final_prompt_tokens=sum(r.final_prompt_tokens for r in g) / n,
            recorded_reward=sum(rewards) / len(rewards) if rewards else None,
            n_over_budget=sum(1 for r in g if r.peak_prompt_tokens > context_window),
            supported_hi=interval([r.supported if r.supported_hi is None else r.supported_hi for r in g]),
            summary_tokens=g[0].summary_tokens, mean_summary_calls=sum(r.summary_calls for r in g) / n))
    return out


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_trajectory_table(summaries: Sequence[TrajectorySummary]) -> str:
    """The printed table: per dataset a header line, then one line per arm."""
    w = max([28, *(len(s.arm) for s in summaries)])
    lines: list[str] = []
    for dataset in dict.fromkeys(s.dataset for s in summaries):
        group = [s for s in summaries if s.dataset == dataset]
        reward = group[0].recorded_reward
        lines.append(f"{dataset}: {group[0].n_trajectories} trajectories, "
                     f"{group[0].supported.n} with supports; recorded reward (the recording's, not predicted): "
                     f"{_fmt(reward)}")
        lines.append(f"  {'arm':{w}s} {'supported':>9s} {'95% interval':>13s} {'sup hi':>6s} {'summ':>5s} "
                     f"{'+recall':>7s} {'refetch':>7s} {'refetch tok':>11s} {'peak':>7s} {'max peak':>8s} {'>budget':>7s} {'total sent':>10s} "
                     f"{'final':>7s}")
        for s in group:
            ci = f"{_fmt(s.supported.low, 2)}-{_fmt(s.supported.high, 2)}"
            hi = s.supported_hi.mean if s.supported_hi is not None else s.supported.mean
            summ = f"{s.mean_summary_calls:5.1f}" if s.summary_tokens is not None else f"{'-':>5s}"
            lines.append(f"  {s.arm:{w}s} {_fmt(s.supported.mean):>9s} {ci:>13s} {_fmt(hi):>6s} {summ} "
                         f"{_fmt(s.recoverable.mean):>7s} "
                         f"{s.mean_refetch_steps:7.2f} {s.mean_refetch_tokens:11.0f} {s.mean_peak_prompt_tokens:7.0f} "
                         f"{s.max_peak_prompt_tokens:8d} {s.n_over_budget:7d} {s.mean_total_prompt_tokens:10.0f} "
                         f"{s.mean_final_prompt_tokens:7.0f}")
    return "\n".join(lines) + "\n"


__all__ = [
    "DEFAULT_K",
    "TRAJECTORY_RETENTION_VERSION",
    "Interval",
    "StepRequest",
    "Timed",
    "TrajectoryRow",
    "TrajectorySummary",
    "aggregate_trajectories",
    "format_trajectory_table",
    "interval",
    "measure_trajectories",
    "measure_trajectory",
    "request_texts",
    "step_requests",
]
