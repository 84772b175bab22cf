"""Replaying real agent trajectories under each arm, with no model: which supports each step still sees.

For one recorded trajectory (:mod:`agentlab.bench.datasets.trajectories`) and one arm, every
assistant step is preceded by the request a live agent would have sent under that arm: the
ledger before the step, projected with :func:`agentlab.core.project` at the context budget, its
current input the latest user message before the step, the recording's system prompt as the
instruction. The mechanisms of the arm are built once per trajectory and carried from step to step,
as in a live session. :func:`step_requests` returns those requests (one per step, the messages and
their prompt tokens): the sequence a cost model (prompt caching) can price.

The supports of each step are :func:`agentlab.bench.supports.step_supports`'. Columns of
:class:`TrajectoryRow` (one trajectory, one arm):

* **supported** — the share of the trajectory's supports (over all its steps) that occur in the
  step's projected request, in the content of any message (system text included) or in the
  arguments of any tool call it shows (an id the agent already wrote in an earlier call stays
  visible there). ``None`` when the trajectory has no support.
* **recoverable** — for an arm with ``session_search`` (``<arm>+recall``): the share of supports
  visible *or* held by one of the events among the top ``k`` hits of the recall package's search
  over the events the projection hid or replaced (:func:`agentlab.bench.retention.search_left_out`,
  as ``retention`` runs it), with the latest user message before the step as the query (what the
  agent was answering; it does not use the step's own words, which would contain the support).
  ``None`` without a search tool.
* **refetch_steps** — steps with at least one hidden support: a live agent would have to call a
  tool again (or ask) before it could act as recorded. **refetch_tokens** — the tokens of the tool
  results to fetch again: per such step, the latest source result of each hidden support, counted
  once per step.
* **peak / total / final prompt tokens** — the largest, the sum and the last of the step requests'
  prompt tokens (agentlab's tokeniser; prompt caching not modelled).
* **reward** — the recording's own reward for the trajectory (tau-bench: 1.0 = the task was
  solved in that run; SWE-agent: none recorded). It is a column of the data, not a prediction.

What ``supported`` shows and does not: it is a necessary-condition proxy — a support the request
does not hold cannot be copied from it. It does not show that the agent would fail without it
(the user's words, a summary or a guess may restore it), nor that it would succeed with it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentlab.bench.arms import Arm
from agentlab.bench.datasets.trajectories import Trajectory
from agentlab.bench.retention import _recall_policy, _search_service, normalise, search_left_out
from agentlab.bench.supports import SUPPORTS_VERSION, Step, occurs, step_supports
from agentlab.core import project
from agentlab.core.project import ProjectionResult, replaced_in_request
from agentlab.events import Event, Message
from agentlab.model.base import Model, ModelInfo
from agentlab.model.prompt_caching import CacheTotals, cache_sequence, totals
from agentlab.session.base import Session

#: Search depth of ``recoverable``.
DEFAULT_K = 5
#: The version of this measure's definitions (the columns of the module docstring) and of the supports'
#: (:data:`agentlab.bench.supports.SUPPORTS_VERSION`); stored with every ``trajectory_retention`` row.
TRAJECTORY_RETENTION_VERSION = f"trajectory-retention-v1/{SUPPORTS_VERSION}"
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
    #: The step requests through a prompt cache, in order (``None`` without a cache profile).
    cache: CacheTotals | None = None

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


def _visible(text: str, kind: str, texts: Sequence[str]) -> bool:
    if kind == "line":
        return any(text in normalise(t) for t in texts)
    return any(occurs(text, t, kind) for t in texts)


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
    out = []
    for step in steps:
        prefix = traj.events[:step.index]
        result = await project(_session(traj, prefix), mechanisms, _current_user(prefix), info, model=model,
                               instruction=traj.instruction, context_window=context_window,
                               app_name=APP_NAME, user_id=USER_ID)
        shown = {e.id for e in result.draft.events if e.id in by_id and not replaced_in_request(e, by_id[e.id])}
        out.append((step, result, frozenset(e.id for e in prefix) - shown))
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
                             cache_profile: str | None = None, steps: Sequence[Step] | None = None) -> TrajectoryRow:
    """One :class:`TrajectoryRow`: ``traj`` replayed under ``arm`` at ``context_window`` tokens.

    ``model`` is only the summariser of a summarising arm (``arm.needs_model``); no step is re-generated.
    ``cache_profile`` (a :data:`agentlab.model.prompt_caching.PROFILES` name) fills ``cache`` with the
    step requests, in order, through that provider's prompt cache. ``steps`` (``step_supports`` of ``traj``,
    the same for every arm) may be passed in to be computed once per trajectory.
    """
    _check(arm, model)
    steps = step_supports(traj.events, traj.instruction) if steps is None else steps
    replayed = await _replay(traj, arm, steps, context_window=context_window, settings=settings, model=model)
    tokens_of = {e.id: e.token_count or 0 for e in traj.events}
    service: Any = None
    n_supports = visible = recovered = refetch_steps = refetch_tokens = 0
    hidden: list[tuple[int, str]] = []
    policy = _recall_policy(arm.mechanisms(settings, model))
    for step, result, left_out in replayed:
        texts = request_texts(result)
        missing = [s for s in step.supports if not _visible(s.text, s.kind, texts)]
        n_supports += len(step.supports)
        visible += len(step.supports) - len(missing)
        if not missing:
            continue
        refetch_steps += 1
        refetch_tokens += sum(tokens_of[i] for i in {s.sources[-1] for s in missing})
        hidden += [(step.index, s.text) for s in missing]
        if policy is None:
            continue
        query = _current_user(traj.events[:step.index])
        if service is None:
            service = await _search_service(_session(traj, traj.events))
        hits = set(await search_left_out(service, _session(traj, ()).id, policy,
                                         query.text if query is not None else "", set(left_out), k))
        recovered += sum(1 for s in missing if hits.intersection(s.sources))
    prompts = [r.prompt_tokens for _, r, _ in replayed] or [0]
    return TrajectoryRow(
        traj_id=traj.traj_id, dataset=traj.dataset, arm=arm.name, n_steps=len(steps),
        n_support_steps=sum(1 for s in steps if s.supports), n_supports=n_supports,
        supported=visible / n_supports if n_supports else None,
        recoverable=(visible + recovered) / n_supports if n_supports and policy is not None else None,
        refetch_steps=refetch_steps, refetch_tokens=refetch_tokens,
        peak_prompt_tokens=max(prompts), total_prompt_tokens=sum(prompts), final_prompt_tokens=prompts[-1],
        recorded_reward=traj.reward, hidden=tuple(hidden),
        cache=None if cache_profile is None else totals(cache_sequence(
            [(r.request.messages, r.request.tools) for _, r, _ in replayed], cache_profile)))


@dataclass(frozen=True)
class Timed:
    """Rows and the wall time they took."""

    rows: list[TrajectoryRow]
    seconds: float


async def measure_trajectories(trajectories: Sequence[Trajectory], arms: Sequence[Arm], *, context_window: int,
                               settings: Any = None, k: int = DEFAULT_K, cache_profile: str | None = None) -> Timed:
    """:func:`measure_trajectory` for every trajectory and arm, timed."""
    started = time.perf_counter()
    rows = []
    for t in trajectories:
        steps = step_supports(t.events, t.instruction)
        rows += [await measure_trajectory(t, a, context_window=context_window, settings=settings, k=k,
                                          cache_profile=cache_profile, steps=steps) for a in arms]
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
    """:func:`agentlab.bench.stats.mean_with_ci` over the defined values."""
    from agentlab.bench.stats import mean_with_ci  # scipy: imported when a table is made, not by `list`

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
            n_over_budget=sum(1 for r in g if r.peak_prompt_tokens > context_window)))
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
        lines.append(f"  {'arm':{w}s} {'supported':>9s} {'95% interval':>13s} {'+recall':>7s} {'refetch':>7s} "
                     f"{'refetch tok':>11s} {'peak':>7s} {'max peak':>8s} {'>budget':>7s} {'total sent':>10s} "
                     f"{'final':>7s}")
        for s in group:
            ci = f"{_fmt(s.supported.low, 2)}-{_fmt(s.supported.high, 2)}"
            lines.append(f"  {s.arm:{w}s} {_fmt(s.supported.mean):>9s} {ci:>13s} {_fmt(s.recoverable.mean):>7s} "
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
