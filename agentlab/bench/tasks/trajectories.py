"""Real agent trajectories replayed without a model: which supports each arm hid from the agent's next action.

Data: tau-bench's 200 gpt-4o airline trajectories (Yao et al., "tau-bench", 2024;
``sierra-research/tau-bench`` @ ``59a200c6``) and SWE-agent's 22 recorded trajectories (Yang et
al., "SWE-agent", 2024; ``SWE-agent/SWE-agent`` @ ``3ea751c0``), loaded by
:mod:`agentlab.bench.datasets.trajectories`. A case is one trajectory. ``[dataset] datasets``
chooses ``tau_bench``, ``swe_agent`` or ``both`` (the default).

The measure is :mod:`agentlab.bench.retention.trajectories`'s: at every assistant step the history
before it is projected under the arm at the context budget, and the step's supports
(:mod:`agentlab.bench.retention.supports`) still visible in that request are counted. ``python -m
agentlab.bench retention trajectories --arms all`` runs it for every arm that needs no model;
:meth:`TrajectoriesTask.run_case` runs it for one arm with the run's model as the summariser of a
summarising arm (the model writes summaries only; no step is re-generated) and the score is the
trajectory's ``supported`` share.

``claude_code`` (``--set 'dataset.datasets=["claude_code"]'``) adds 300 Claude Code sessions on
SWE-bench Lite tasks (SWE Context Bench, arXiv 2602.08316; ``jiayuanz3/SWEContextBench`` @
``31bb0415``; no license stated, read from the user's copy), loaded by
:mod:`agentlab.bench.datasets.claude_code`; ``[dataset] sessions_dir`` (the ``--sessions-dir``
flag) replays a folder of the user's own Claude Code logs instead, with no sha256 asked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agentlab.policies.arms as arms_registry
from agentlab.bench.config import Settings
from agentlab.bench.datasets.claude_code import pinned_fingerprint
from agentlab.bench.datasets.trajectories import DATASETS, Trajectory
from agentlab.bench.facts import ModeRoles
from agentlab.bench.retention.sources import CLAUDE_CODE, load_selected
from agentlab.bench.retention.supports import step_supports
from agentlab.bench.retention.trajectories import measure_trajectory
from agentlab.bench.scoring.metrics import Score
from agentlab.bench.tasks import Case, CaseResult, CaseSelection, RunContext, Task, register
from agentlab.events import Message
from agentlab.policy_json import PolicyJSON

CHOICES = (*DATASETS, CLAUDE_CODE, "both")
METRIC = "supported"
#: The budget a case runs at when the run gives none and the model states no window.
FALLBACK_BUDGET = 8192


@dataclass(frozen=True)
class TrajectoryDataset(PolicyJSON):
    """``[dataset]``: which recordings are replayed."""

    #: Any of ``tau_bench``, ``swe_agent``, ``claude_code``; ``both`` is tau_bench and swe_agent.
    datasets: tuple[str, ...] = ("both",)
    #: A folder of the user's own Claude Code logs (``--sessions-dir``): replayed instead of ``claude_code``'s
    #: pinned copies, with no sha256 asked ("" = the pinned copies). Alone (``datasets`` left at its default) it
    #: replays those logs only.
    sessions_dir: str = ""
    #: Refuse a malformed log line instead of skipping it (the skipped lines are always named in the output).
    strict: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.datasets, str):  # an older settings file: datasets = "both"
            object.__setattr__(self, "datasets", (self.datasets,))
        bad = [d for d in self.datasets if d not in CHOICES]
        if bad or not self.datasets:
            raise ValueError(f"datasets must be a list of {', '.join(CHOICES)}, got {list(self.datasets)!r}")
        if self.sessions_dir and self.datasets == ("both",):  # --sessions-dir alone: the user's logs only
            object.__setattr__(self, "datasets", (CLAUDE_CODE,))
        elif self.sessions_dir and CLAUDE_CODE not in self.chosen():
            object.__setattr__(self, "datasets", (*self.datasets, CLAUDE_CODE))

    def chosen(self) -> tuple[str, ...]:
        """The dataset names to load, in a fixed order."""
        names = {n for d in self.datasets for n in (DATASETS if d == "both" else (d,))}
        return tuple(n for n in (*DATASETS, CLAUDE_CODE) if n in names)

    def label(self) -> str:
        """The chosen datasets as the output names them."""
        return ",".join(self.chosen())


@register
class TrajectoriesTask(Task):
    """Recorded tau-bench and SWE-agent trajectories; the score is the share of supports each arm kept visible."""

    name = "trajectories"
    version = "1"
    modes = ("long_context",)
    default_mode = "long_context"
    mode_roles = ModeRoles(baseline="long_context")
    summary_bounds = True
    model_answers = False
    description = ("real agent trajectories (200 tau-bench airline, 22 SWE-agent, 300 Claude Code), replayed under an arm with "
                   "no model: share of each step's supports still visible")

    def default_settings(self) -> dict[str, type[Any]]:
        """One section: ``[dataset]``."""
        return {"dataset": TrajectoryDataset}

    def load_cases(self, settings: Settings) -> CaseSelection:
        """Every trajectory of the chosen datasets."""
        return self.load_first_cases(settings, None)

    def load_first_cases(self, settings: Settings, limit: int | None) -> CaseSelection:
        """The first ``limit`` trajectories (``None``: all), reading no more files than they need.

        Only ``claude_code``'s pinned sessions alone are read in part (one file holds one thread): the
        first ``limit`` files, the selection's fingerprint and ``loaded`` still those of all of them
        (from the manifest), so a run's identity does not depend on ``--limit``. Any other choice is
        loaded whole and cut.
        """
        choice = settings.of("dataset", TrajectoryDataset)
        in_part = bool(limit) and choice.chosen() == (CLAUDE_CODE,) and not choice.sessions_dir
        data = load_selected(choice.chosen(), choice.sessions_dir, strict=choice.strict,
                             limit=limit if in_part else None)
        cases = [Case(id=t.traj_id, question="", reference="", data=t,
                      metadata={"dataset": t.dataset, "recorded_reward": t.reward, "events": len(t.events)})
                 for t in data.trajectories]
        sha, loaded = (pinned_fingerprint() if in_part else (data.sha256, len(cases)))
        return CaseSelection(cases[:limit] if limit else cases, dataset_sha256=sha, loaded=loaded,
                             note=f"{choice.label()}: every recorded trajectory ({loaded})"
                                  + (f", the first {len(cases)} files read" if in_part else "") + data.note)

    def _arm(self, mode: str, ctx: RunContext) -> Any:
        if ctx.arm is not None:
            return ctx.arm
        if mode == "long_context":
            return arms_registry.full_history_arm(mode)
        return arms_registry.get_arm(mode, self)

    async def _replay(self, case: Case, arm: Any, ctx: RunContext) -> CaseResult:
        budget = ctx.context_budget or ctx.model.info.context_window or FALLBACK_BUDGET
        row = await measure_trajectory(case.data, arm, context_window=budget, settings=ctx.settings, model=ctx.model)
        return CaseResult(prediction=json.dumps(row.as_dict()), metadata={"context_budget": budget, **row.as_dict()})

    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        """Replay the trajectory under the baseline (or the run's arm); the prediction is the row as JSON."""
        return await self._replay(case, self._arm(mode, ctx), ctx)

    async def run_generic(self, case: Case, arm: Any, ctx: RunContext) -> CaseResult:
        """Replay the trajectory under a generic arm (the run's model only writes a summarising arm's summaries)."""
        return await self._replay(case, arm, ctx)

    def dry_run_prompts(self, case: Case, mode: str, settings: Settings) -> list[list[Message]]:
        """The baseline's step requests (system prompt, then the ledger before each assistant step); no model."""
        if mode != "long_context":
            raise NotImplementedError(f"trajectories: --dry-run lists the long_context prompts only, not {mode!r}")
        traj: Trajectory = case.data
        system = [Message.system(traj.instruction)] if traj.instruction else []
        return [[*system, *(e.message for e in traj.events[:s.index] if e.message is not None)]
                for s in step_supports(traj.events, traj.instruction)]

    def retention_report(self, arms: Mapping[str, Any], skipped: Mapping[str, str], settings: Settings, *,
                         context_budget: int, budget_source: str, limit: int, as_json: bool, out: Any,
                         cache_profile: str = "none", price_model: str | None = None,
                         db: Path | None = None, summary_tokens: int | None = None) -> int:
        """``retention trajectories``: the per-step support table (:mod:`agentlab.bench.retention.trajectory_report`), stored in ``db``."""
        from agentlab.bench.retention.trajectory_report import run_trajectory_retention

        choice = settings.of("dataset", TrajectoryDataset)
        # claude_code alone: read only the first `limit` pinned files (one main thread each) instead of all 300
        only_files = limit if limit and choice.chosen() == (CLAUDE_CODE,) and not choice.sessions_dir else None
        data = load_selected(choice.chosen(), choice.sessions_dir, strict=choice.strict, limit=only_files)
        trajectories = list(data.trajectories)
        return run_trajectory_retention(trajectories[:limit] if limit else trajectories,
                                        choice.label(), dict(arms), dict(skipped),
                                        settings, context_budget, budget_source, as_json, out,
                                        cache_profile=cache_profile, price_model=price_model, db=db,
                                        summary_tokens=summary_tokens,
                                        data_note=data.note.removeprefix("; ") or None)

    async def score(self, case: Case, result: CaseResult, ctx: RunContext) -> list[Score]:
        """The trajectory's ``supported`` share (``None`` when it has no support)."""
        value = result.metadata.get(METRIC)
        return [Score(METRIC, value, self.version, None if value is not None else "no support in this trajectory")]


__all__ = ["TrajectoriesTask", "TrajectoryDataset"]
