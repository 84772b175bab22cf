"""What a run is: its request, the models it names, and the config its id is the hash of.

A run is identified by :func:`run_config`'s hash (benchmark, mode, model spec, judge spec, settings,
dataset sha256, task version, the model's context window and its source, a ``--context-budget``
when set, an explicit ``--variant`` name; not ``--limit``, ``--concurrency`` or the ``[run]``
settings section), so ``--limit 3`` and ``--limit 0`` of the same command are one run:
:func:`select` takes the first cases of the selection. :mod:`agentlab.bench.running.executor` runs one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlab.bench.config import Settings, variant_name
from agentlab.bench.scoring.judge import Judge, judge_versions
from agentlab.bench.tasks import Case, CaseSelection, Task
from agentlab.model.base import Model, ModelInfo
from agentlab.model.cache import CallCache

if TYPE_CHECKING:
    from agentlab.policies.arms import Arm


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
    #: ``--seeding``: how a generic arm's history reaches its session (:mod:`agentlab.bench.running.replay`).
    #: Part of the run id only when not the default ``forced``.
    seeding: str = "forced"

    @property
    def variant_label(self) -> str:
        """The variant's name in tables: ``--variant NAME`` when given, else derived from the settings that
        differ from the benchmark's file.
        """
        return self.variant or variant_name(self.variant_settings)



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


def run_config(task: Task, request: RunRequest, dataset_sha256: str, info: ModelInfo | None = None, *,
               arm: Arm | None = None) -> dict[str, Any]:
    """The config a run id is the hash of (stored in ``runs.config``).

    ``info``: the answer model's resolved info; its context window and where it came from are part
    of the run (a window decides which prompts fit and how a summary is split). ``arm``: the
    mode's arm as the caller resolved it (default: the task's).
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
    arm_identity = dict(arm.identity) if arm is not None else _arm_identity(task, request.mode)
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



__all__ = ["RunRequest", "build_models", "run_config", "select"]
