"""One run's complete specification, resolved once from the flags, the benchmark's file and the mode.

``python -m agentlab.bench <benchmark> ...`` used to resolve a run piece by piece as it went (load
the file, apply ``[smoke]``, apply ``--set``, name the variant, choose the judge, the limit, the
compared modes, the window, the id). :func:`resolve_run` does all of it in one place, in one
order, and returns a frozen :class:`RunSpec`; the run command, ``sweep``, ``league`` and the
notebook helpers (which call the CLI) all start from it, and the executor gets its per-mode
:class:`RunRequest` and arm. The task is looked up once per command (``resolve_run(task=...)``
reuses a league's or a sweep's instance) and each arm once per task instance (:meth:`Task.arm`).

Two steps, because two facts are known only once the model and the data are at hand:

* :func:`resolve_run` — flags + ``benchmarks/<name>.toml`` + mode → typed settings (defaults <
  file < ``[smoke]`` on the embedded model < ``--set``), model and judge specs, limit, compared
  modes, variant, context budget. Everything a user can get wrong is refused here, as one line.
* :meth:`RunSpec.bind` — the answer model's resolved window (and where it came from) and the
  dataset fingerprint → the run id of every mode (:meth:`RunSpec.run_ids`). A context budget
  above the model's window is refused here, before the results file is opened.

The context budget (``--context-budget N``, ``context_budget=``) is the window the mechanisms see
— the summary triggers, the 70 % pressure path, the compaction thresholds — set below the model's
real one, so policies are compared at one pressure on a 128k model too. It reaches them as
``RunOptions.context_window`` (:meth:`agentlab.bench.tasks.RunContext.run_options`); the model
still accepts its full window, so a long-context baseline is unchanged. A budget is part of the run
id only when set, so every id made without one is the id it always was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TextIO

from agentlab.bench.config import (
    Settings,
    apply_overrides,
    apply_smoke,
    code_version,
    config_hash,
    load_settings,
    variant_name,
    variant_settings,
)
from agentlab.bench.datasets.base import DatasetError
from agentlab.bench.running.executor import RunRequest, run_config
from agentlab.bench.tasks import Task, discover, get_task
from agentlab.bench.usage import EMBEDDED_DEFAULT_LIMIT, VARIANT_NAME, UsageError, print_banner
from agentlab.model.base import ModelInfo

if TYPE_CHECKING:
    from agentlab.policies.arms import Arm

#: What a resolved run does: answer and score cases, only count prompt tokens, or only measure retrieval.
Action = Literal["run", "dry_run", "retrieval_only"]
#: The ``variant_settings`` key a context budget is listed under (it is not a settings field).
BUDGET_KEY = "context_budget"
#: The setting that chooses how the history reaches a generic arm (``turns`` | ``tool_results``).
DELIVERY_KEY = "dataset.delivery"
#: How the settings file is read: ``loader(benchmark, schema)`` (tests point it at another folder).
Loader = Callable[[str, Any], Settings]


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines a run of one benchmark mode (and the modes it is compared with).

    Built by :func:`resolve_run`; :meth:`bind` adds the model's window and the dataset fingerprint,
    after which :meth:`run_ids` names every run. Frozen (its mappings are read-only views): what
    was resolved is what runs. It carries what it looked up — the task instance, each mode's
    :class:`~agentlab.policies.arms.Arm` and the settings — so the commands that carry it out (run,
    ``--dry-run``, ``league``, ``sweep``) take them from here instead of looking them up again.
    """

    #: The benchmark's registered name.
    benchmark: str
    #: The task it was resolved with (one instance per command: it looks each arm up once).
    task: Task = field(compare=False, repr=False)
    #: Mode -> its arm, for every mode of :attr:`modes`, as looked up when the spec was resolved.
    arms: Mapping[str, Arm] = field(compare=False, repr=False)
    #: The mode asked for.
    mode: str
    #: The modes that run, in order: its baseline [, lossy], then ``mode`` (just ``mode`` without baselines).
    modes: tuple[str, ...]
    #: What the run does.
    action: Action
    #: The typed settings: task defaults < file < ``[smoke]`` (when applied) < ``--set``.
    settings: Settings
    #: Whether the file's ``[smoke]`` settings were applied (the embedded model, no ``--published-settings``).
    smoke_settings: bool
    #: ``{"section.field": (published, smoke)}`` of the ``[smoke]`` values that changed a setting.
    smoke_changes: Mapping[str, tuple[Any, Any]]
    #: The run is a smoke test (answer model = the embedded SmolLM2) and labelled so everywhere.
    smoke_test: bool
    #: Answer model spec (``--model``, else the environment's default).
    model_spec: str
    #: Judge model spec; ``None`` when ``[judge] enabled`` is false.
    judge_spec: str | None
    #: ``--context-window``: the window the model is told it has (``None``: it states its own).
    context_window_flag: int | None
    #: ``--context-budget``: the window the mechanisms see (``None``: the model's window).
    context_budget: int | None
    #: First N selected cases (``None`` = all).
    limit: int | None
    #: Run the demo selection (the cases whose baseline prompt fits the embedded model's window).
    demo_selection: bool
    #: Cases in flight at once.
    concurrency: int
    #: ``--variant NAME`` (part of the id); ``None``: named by :attr:`variant_settings`.
    variant: str | None
    #: The result-changing values that differ from the plain command's (plus the budget when set).
    variant_settings: Mapping[str, Any]
    #: Draw a progress bar.
    progress: bool = True
    #: ``git describe`` of the code (stored with the runs; not part of the id).
    code_version: str = ""
    #: The answer model's resolved window (set by :meth:`bind`; 0 before).
    context_window: int = 0
    #: Where that window came from, e.g. ``server:/v1/models max_model_len`` (set by :meth:`bind`).
    context_window_source: str = ""
    #: Fingerprint of the data the cases come from (set by :meth:`bind`).
    dataset_sha256: str = ""
    #: ``--seeding``: how a generic arm's history reaches its session (``forced``: all at once).
    seeding: str = "forced"

    # ------------------------------------------------------------------------------- derived

    def arm(self, mode: str) -> Arm:
        """The arm of ``mode`` (one of :attr:`modes`), as resolved."""
        return self.arms[mode]

    @property
    def variant_label(self) -> str:
        """The variant's name in tables: ``--variant NAME``, else derived from :attr:`variant_settings`."""
        return self.variant or variant_name(self.variant_settings)

    @property
    def bound(self) -> bool:
        """Whether :meth:`bind` has added the window and the data fingerprint (the ids are known)."""
        return bool(self.context_window and self.dataset_sha256)

    @property
    def mechanism_window(self) -> int:
        """The window the mechanisms see: the budget when set, else the model's window (0 before :meth:`bind`)."""
        return self.context_budget or self.context_window

    def bind(self, info: ModelInfo, dataset_sha256: str) -> RunSpec:
        """This spec with the answer model's window and the data fingerprint; refuses a budget above the window."""
        window = int(info.context_window or 0)
        if self.context_budget is not None and window and self.context_budget > window:
            raise UsageError(f"--context-budget {self.context_budget} is above the model's context window of {window} "
                           f"tokens ({info.context_window_source or 'stated by the model'}); give at most {window}")
        return dataclasses.replace(self, context_window=window, context_window_source=info.context_window_source,
                                   dataset_sha256=dataset_sha256)

    def request(self, mode: str) -> RunRequest:
        """What the executor runs for ``mode`` (one of :attr:`modes`)."""
        if mode not in self.modes:
            raise ValueError(f"{mode!r} is not one of this spec's modes {self.modes}")
        return RunRequest(
            benchmark=self.benchmark, mode=mode, model_spec=self.model_spec, settings=self.settings,
            judge_spec=self.judge_spec, limit=self.limit, concurrency=self.concurrency, smoke_test=self.smoke_test,
            progress=self.progress, code_version=self.code_version,
            # Remote workers build their own models (executor.build_models): the same window for them.
            model_options={} if self.context_window_flag is None else {"context_window": self.context_window_flag},
            variant=self.variant, variant_settings=dict(self.variant_settings), context_budget=self.context_budget,
            seeding=self.seeding)

    def requests(self) -> list[RunRequest]:
        """One :class:`RunRequest` per mode, in run order."""
        return [self.request(mode) for mode in self.modes]

    def run_config(self, mode: str) -> dict[str, Any]:
        """The configuration the run id of ``mode`` hashes (stored as ``runs.config``); needs :meth:`bind`."""
        if not self.bound:
            raise ValueError("the run ids need the model's window and the data: call bind(info, dataset_sha256)")
        info = ModelInfo(self.model_spec, self.context_window, self.context_window_source)
        return run_config(self.task, self.request(mode), self.dataset_sha256, info, arm=self.arm(mode))

    def run_ids(self) -> dict[str, str]:
        """Mode → run id, for every mode of the spec (needs :meth:`bind`)."""
        return {mode: config_hash(self.run_config(mode)) for mode in self.modes}

    def header(self) -> str:
        """The line a run starts with: benchmark, modes, model, window and its source, budget."""
        line = (f"{self.benchmark}/{', '.join(self.modes)}: model {self.model_spec}, context window "
                f"{self.context_window} tokens ({self.context_window_source or 'stated by the model'})")
        if self.context_budget is not None:
            line += f", context budget {self.context_budget} tokens (the window the mechanisms see)"
        if self.seeding != "forced":
            line += f", seeding {self.seeding} (the history replayed event by event)"
        delivery = self.settings.get("dataset", "delivery", "turns")
        if delivery not in (None, "turns"):
            line += f", delivery {delivery} (the history read through a tool, then the question)"
        return line


# ------------------------------------------------------------------------------- resolution


def is_embedded(model_spec: str) -> bool:
    """Whether the spec names the embedded SmolLM2 model (the smoke-test model)."""
    return model_spec.strip() == "embedded"


def load_run_settings(task: Task, overrides: Sequence[str], *, smoke: bool = False, embedded: bool = False,
                      loader: Loader = load_settings) -> tuple[Settings, Settings, dict[str, tuple[Any, Any]]]:
    """The run's settings, the reference its variant is named against, and the ``[smoke]`` changes applied.

    The reference is what the plain command uses with this model: the file, plus its ``[smoke]``
    settings on the embedded model. So an embedded smoke run is the ``default`` variant, while
    ``--published-settings`` on the embedded model is a variant named by the published values.
    ``loader(name, schema)`` reads the file (tests point it at another folder).
    """
    file_settings = loader(task.name, task.default_settings())
    settings = reference = file_settings
    changes: dict[str, tuple[Any, Any]] = {}
    if (smoke or embedded) and file_settings.smoke:
        smoked, changed = apply_smoke(file_settings)
        if embedded:
            reference = smoked
        if smoke:
            settings, changes = smoked, changed
    return apply_overrides(settings, overrides), reference, changes


def comparison_modes(task: Task, mode: str) -> list[str]:
    """The modes a run of ``mode`` is compared with, then ``mode``: baseline [, lossy], mode.

    A recovered arm needs its baseline and its lossy partner (recovery); any other non-baseline
    arm needs the baseline (token savings, quality loss); the baseline needs nothing.
    """
    roles = task.roles()
    if roles is None or mode == roles.baseline or roles.baseline not in task.modes:
        return [mode]
    modes = [roles.baseline]
    arm = task.arm(mode)
    if arm.role == "recovered" and arm.partner and task.has_arm(arm.partner):
        modes.append(arm.partner)
    return [*modes, mode]


def has_retrieval(task: Task) -> bool:
    """Whether the task measures its retrieval without a model (``--retrieval-only``)."""
    return type(task).retrieval_only is not Task.retrieval_only


def check_policies(task: Task, mode: str, settings: Settings) -> None:
    """Build the arm's policies now, so a value one rejects stops the run before any case."""
    try:
        task.arm_policies(mode, settings)
    except (ValueError, TypeError, KeyError) as exc:
        detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise UsageError(f"{task.name}/{mode} settings rejected: {detail} (fix the --set value or "
                       f"benchmarks/{task.name}.toml)") from exc


def load_selection(task: Task, settings: Settings, limit: int | None = None) -> Any:
    """The task's published case selection; a settings value it rejects is one line.

    With ``limit``, a task that can read only its first cases (``load_first_cases(settings, limit)``)
    is asked for those alone; any other loads them all (``--limit`` is applied after).
    """
    first = getattr(task, "load_first_cases", None)
    try:
        if limit and first is not None:
            return first(settings, limit)
        return task.load_cases(settings)
    except (ValueError, KeyError) as exc:
        if isinstance(exc, DatasetError):
            raise
        detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise UsageError(f"{task.name}: {detail} (fix the --set value or benchmarks/{task.name}.toml)") from exc


def _check_numbers(limit: int | None, concurrency: int | None, context_window: int | None,
                   context_budget: int | None) -> None:
    if limit is not None and limit < 0:
        raise UsageError(f"--limit must be >= 0 (0 = all cases), got {limit}")
    if concurrency is not None and concurrency < 1:
        raise UsageError(f"--concurrency must be >= 1, got {concurrency}")
    if context_window is not None and context_window < 1:
        raise UsageError(f"--context-window must be a positive number of tokens, got {context_window}")
    if context_budget is not None and context_budget < 1:
        raise UsageError(f"--context-budget must be a positive number of tokens, got {context_budget}")
    if context_budget is not None and context_window is not None and context_budget > context_window:
        raise UsageError(f"--context-budget {context_budget} is above --context-window {context_window}; "
                       f"give at most {context_window}")


def resolve_run(benchmark: str, *, mode: str | None = None, model: str | None = None, judge_model: str | None = None,
                limit: int | None = None, context_window: int | None = None, context_budget: int | None = None,
                overrides: Sequence[str] = (), published_settings: bool = False, variant: str | None = None,
                baselines: bool = True, concurrency: int | None = None, action: Action = "run",
                progress: bool = True, loader: Loader = load_settings,
                version: Callable[[], str] = code_version, seeding: str | None = None,
                task: Task | None = None) -> RunSpec:
    """Flags + the benchmark's settings file + the mode → the run's :class:`RunSpec` (not yet bound).

    The keyword arguments are the run command's flags (``limit=0`` = all cases, ``None`` = the
    default: all, or :data:`~agentlab.bench.usage.EMBEDDED_DEFAULT_LIMIT` on the embedded model).
    Every user error is a :class:`~agentlab.bench.usage.UsageError` (or a settings / dataset
    error) with one line; nothing is stored and no model is called. ``loader`` reads the settings
    file and ``version`` names the code (tests replace them). ``task``: the command's instance of the
    benchmark's task, when it has one already (a league's arms, a sweep's points): the spec reuses
    it and the arms it looked up instead of looking the benchmark up again.
    """
    from agentlab.model.registry import default_spec

    _check_numbers(limit, concurrency, context_window, context_budget)
    if task is None:
        task = get_task(benchmark)
    elif task.name != benchmark:
        raise ValueError(f"resolve_run({benchmark!r}, task=...): the task given is {task.name!r}")
    if task.tool_delivery_inapplicable and any(o.partition("=")[0].strip() == DELIVERY_KEY for o in overrides):
        raise UsageError(f"{task.name}: --set {DELIVERY_KEY} does not apply: {task.tool_delivery_inapplicable}")
    model_spec = model or default_spec()
    calls_model = action == "run"
    embedded = calls_model and is_embedded(model_spec)
    settings, reference, changes = load_run_settings(task, overrides, smoke=embedded and not published_settings,
                                                     embedded=embedded, loader=loader)
    if variant is not None and not VARIANT_NAME.fullmatch(variant):
        raise UsageError(f"--variant {variant!r}: use letters, digits and . _ - = ; : + , (no spaces)")
    mode = mode or task.default_mode
    try:
        arm = task.arm(mode)
    except LookupError as exc:
        raise UsageError(str(exc.args[0])) from exc
    if seeding is not None and seeding not in ("forced", "lived"):
        raise UsageError(f"--seeding {seeding!r}: use forced or lived")
    if seeding == "lived" and not arm.generic:
        raise UsageError(f"--seeding lived is for generic arms; {task.name}'s {mode} mode seeds its own way "
                       f"(try --arm rolling_summary)")
    if action == "retrieval_only" and not has_retrieval(task):
        with_retrieval = ", ".join(name for name, cls in sorted(discover().items()) if has_retrieval(cls()))
        raise UsageError(f"{task.name} has no retrieval to measure, so --retrieval-only does not apply; "
                       f"benchmarks with it: {with_retrieval}")
    check_policies(task, mode, settings)
    modes = [mode] if (not calls_model or not baselines) else comparison_modes(task, mode)
    for name in modes:  # a task mode other than the baseline has no tool-result delivery
        try:
            task.delivered_arm(name, settings)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    for compared in modes[:-1]:  # the baseline and lossy runs use the same settings
        check_policies(task, compared, settings)
    judge_enabled = bool(settings.get("judge", "enabled", True))
    judge_spec = (judge_model or settings.get("judge", "model") or model_spec) if judge_enabled else None
    diff = variant_settings(settings, reference)
    if context_budget is not None:
        diff[BUDGET_KEY] = context_budget
    smoke_test = calls_model and is_embedded(model_spec)
    if not calls_model:
        run_limit = limit or None
    elif limit == 0:
        run_limit = None
    elif limit is None and smoke_test:
        run_limit = EMBEDDED_DEFAULT_LIMIT
    else:
        run_limit = limit
    return RunSpec(
        benchmark=task.name, mode=mode, modes=tuple(modes), action=action, settings=settings,
        smoke_settings=embedded and not published_settings,
        smoke_changes=MappingProxyType(changes), smoke_test=smoke_test, model_spec=model_spec, judge_spec=judge_spec,
        context_window_flag=context_window, context_budget=context_budget, limit=run_limit,
        demo_selection=smoke_test and limit is None,
        concurrency=concurrency or int(settings.get("run", "concurrency", 4)), variant=variant,
        variant_settings=MappingProxyType(diff), progress=progress, code_version=version() if calls_model else "",
        seeding=seeding or "forced", task=task, arms=MappingProxyType({name: task.arm(name) for name in modes}))


def spec_from_args(args: Any, *, loader: Loader = load_settings, version: Callable[[], str] = code_version,
                   task: Task | None = None) -> RunSpec:
    """:func:`resolve_run` of the run command's parsed flags (``argparse.Namespace``); ``task`` as there."""
    action: Action = "dry_run" if args.dry_run else "retrieval_only" if args.retrieval_only else "run"
    return resolve_run(
        args.benchmark, mode=args.mode, model=args.model, judge_model=args.judge_model, limit=args.limit,
        context_window=args.context_window, context_budget=getattr(args, "context_budget", None),
        overrides=args.overrides, published_settings=args.published_settings, variant=args.variant,
        baselines=not args.no_baselines, concurrency=args.concurrency, action=action,
        progress=not args.no_progress, loader=loader, version=version, seeding=getattr(args, "seeding", None),
        task=task)


def smoke_banner(benchmark: str, changes: Mapping[str, tuple[Any, Any]]) -> str:
    """The line saying which ``[smoke]`` values replaced published ones."""
    shown = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())
    return (f"smoke settings for the embedded model (benchmarks/{benchmark}.toml [smoke]; "
            f"--published-settings keeps the published values): {shown}")


def write_smoke_banner(spec: RunSpec, out: TextIO) -> None:
    """Print :func:`smoke_banner` as a banner when ``[smoke]`` values changed the spec's settings."""
    if spec.smoke_changes:
        print_banner(smoke_banner(spec.benchmark, spec.smoke_changes), out)


__all__ = [
    "RunSpec",
    "comparison_modes",
    "load_run_settings",
    "resolve_run",
    "spec_from_args",
]
