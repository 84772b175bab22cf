"""Benchmark tasks: the interface every ``agentlab/bench/tasks/<name>.py`` implements, and the registry.

A task module reads top to bottom like simple-evals: a docstring citing the paper, its prompts as
visible constants (or, when long, in ``<name>_prompts.py`` beside it, as the judge's are in
``<name>_judge.py``), then one :class:`Task` subclass registered by name::

    from agentlab.bench.tasks import Case, CaseResult, CaseSelection, RunContext, Task, register

    @register
    class QMSumTask(Task):
        name = "qmsum"                      # the CLI name: python -m agentlab.bench qmsum
        version = "1"                       # bump when prompts / logic change (part of the run id)
        modes = ("long_context", "summary", "recall")
        default_mode = "recall"

        def default_settings(self): ...     # {"section": dataclass}; benchmarks/qmsum.toml overrides the defaults
        def load_cases(self, settings) -> CaseSelection: ...
        async def run_case(self, case, mode, ctx) -> CaseResult: ...
        async def score(self, case, result, ctx) -> list[Score]: ...
        def dry_run_prompts(self, case, mode, settings) -> list[list[Message]]: ...

``load_cases`` and ``run_case`` are required (``score`` too, to be scored). Every other method is an
optional capability with a default, asked for only by the command that needs it; one a task lacks
raises :class:`Unsupported`, which the CLI prints as one ``error:`` line:

* ``history(case, settings)`` — the events a generic arm's session is seeded with (every arm);
* ``dry_run_prompts(case, mode, settings)`` — ``--dry-run`` of a task mode, and the league's check
  that the baseline fits the window (skipped, and said so, without it);
* ``tool_delivery(case, settings, session_id)`` — ``[dataset] delivery = "tool_results"``;
* ``retention_groups(cases, settings, delivery)`` — the histories and gold evidence the LLM-free
  ``retention`` command and the league's "evidence kept" measure; or, for a measure of its own (per
  step of a trajectory rather than per question), ``async retention(cases, arms, settings, *,
  delivery, context_window) -> list[RetentionRow]``, the entry point both call;
* ``retrieval_only``, ``report_tables``, ``case_group``, ``settings_file`` (a benchmark kept outside
  the package names its TOML).

The harness (:mod:`agentlab.bench.running.executor`) owns everything around a case:

* it calls :meth:`Task.load_cases` once, applies ``--limit`` as a prefix of the selection, and
  identifies the run by a hash of (benchmark, mode, model spec, judge spec, settings, dataset
  sha256, task version) — a rerun of the same command skips cases already stored as ``ok``;
* for each case it runs :meth:`Task.run_case` then :meth:`Task.score` inside
  :func:`agentlab.model.base.observe_calls`, so every model call (answer, summary, judge, memory,
  tool) made by the task, the runtime or the judge is recorded with its tokens — the task does not
  count tokens itself;
* any exception from ``run_case`` or ``score`` makes the case ``failed`` with its error (a
  :class:`CaseError` or :class:`~agentlab.model.base.ModelError` contributes its ``code``, e.g.
  ``context_length``); failed cases stay in every denominator and are retried on the next run;
* it writes the case, its calls, scores and compaction stats in one transaction.

What a task may use from the runtime (and nothing more)::

    from agentlab.runtime import Runner, LLMAgent, RunOptions
    agent = LLMAgent(name, ctx.model, instruction=..., tools=[...], summary=..., compaction=...,
                     recall=..., generation=GenerationConfig(...), max_tool_iterations=6)
    runner = Runner(app_name, agent, ctx.new_session_service())
    outcome = await collect_run(runner.run(user_id, session_id, question,
                                           options=ctx.run_options()))   # helpers below

``ctx.run_options()`` carries the run's ``--context-budget`` (the window the mechanisms see) into
the run; a task that builds its own ``RunOptions`` loses it.

``collect_run`` returns the final answer and the compaction stats and raises :class:`CaseError`
(with the event's ``error_code``) when the run ended in an error instead of an answer.

``RunContext.once(key, factory)`` memoises per run (e.g. a meeting summary built once and shared by
every question on that meeting); the calls it makes are attributed to the case that ran it first.

Dry runs (``--dry-run``) call no model: :meth:`Task.dry_run_prompts` returns every prompt the mode
would send *before any model output exists* (e.g. the single long-context answer prompt, or the
summariser's input), and the harness counts their tokens with
:func:`agentlab.model.tokens.count_messages`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import agentlab.bench.facts as facts
from agentlab.bench.config import Settings
from agentlab.bench.facts import ModeRoles
from agentlab.bench.scoring.judge import JudgeTemplate
from agentlab.bench.scoring.metrics import Score
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks._harness import (
    DRY_RUN_WINDOW,
    PRECHECK_SLACK,
    Case,
    CaseError,
    CaseResult,
    CaseSelection,
    RunContext,
    RunOutcome,
    UnknownBenchmark,
    Unsupported,
    check_window,
    collect_run,
    compaction_row,
    context_length_need,
    project_prompt,
)
from agentlab.events import Event, Message
from agentlab.extensions import load_extensions

if TYPE_CHECKING:
    from agentlab.bench.retention.delivery import DeliveryMode
    from agentlab.bench.retention.rows import HistoryGroup, RetentionRow
    from agentlab.policies.arms import Arm


#: App, user and agent names of a generic arm's runs.
GENERIC_APP, GENERIC_USER, GENERIC_AGENT = "agentlab-bench", "user", "assistant"

# ------------------------------------------------------------------------------------- task


class Task(ABC):
    """One benchmark harness. Subclass, set the class attributes, implement the methods."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    modes: ClassVar[tuple[str, ...]]
    default_mode: ClassVar[str]
    #: Baseline / lossy / recovered modes of the comparison tables; ``None``: no comparisons.
    mode_roles: ClassVar[ModeRoles | None] = None
    #: Which answer calls the published report counts as one case's tokens
    #: (:data:`~agentlab.bench.facts.LAST_ANSWER_CALL` or :data:`~agentlab.bench.facts.SUM_ANSWER_CALLS`),
    #: so the token columns compared with it use the same rule; ``None``: no published tokens.
    published_token_rule: ClassVar[str | None] = None
    #: Generic arms that do not apply to this benchmark: arm name → the reason (``--arm`` says it).
    inapplicable_arms: ClassVar[Mapping[str, str]] = {}
    #: Why ``[dataset] delivery`` does not apply to this benchmark (``None``: its ``[dataset]`` has the
    #: field when it delivers its history as tool results too; see :meth:`tool_delivery`).
    tool_delivery_inapplicable: ClassVar[str | None] = None
    #: The settings file (``None``: ``benchmarks/<name>.toml``); a benchmark kept outside the package
    #: names the TOML beside its module, e.g. ``str(Path(__file__).with_suffix(".toml"))``.
    settings_file: ClassVar[str | None] = None
    #: One line for ``python -m agentlab.bench list``.
    description: ClassVar[str] = ""
    #: Whether :meth:`retention_report` measures the summarising arms with no model, as bounds at a
    #: stated summary length (``retention --summary-tokens``, :mod:`agentlab.bench.retention.summary_bounds`);
    #: ``False``: the LLM-free ``retention`` skips them.
    summary_bounds: ClassVar[bool] = False
    #: Whether the run's model answers the cases' prompts. ``False``: a replay of recorded steps (the model
    #: writes a summarising arm's summaries at most), so no baseline prompt is checked against its window.
    model_answers: ClassVar[bool] = True
    #: The judge prompts :meth:`score` grades with; their versions are part of a judged run's config,
    #: so a new prompt version starts a new run instead of mixing verdicts in a resumed one.
    judge_templates: ClassVar[tuple[JudgeTemplate, ...]] = ()

    def default_settings(self) -> Mapping[str, type[Any]]:
        """The settings schema: section name → the frozen dataclass it is parsed into.

        A policy section names its policy class (or a subclass adding the task's own knobs, each
        a field with its doc comment and check); the field defaults are the defaults, and
        ``benchmarks/<name>.toml`` overrides them. A new field therefore reaches the TOML file,
        ``--set``, the run id and ``analysis.runs_df()`` with no other edit. (A task may still
        return ``{"section": {"field": default}}``: each field is then typed by its default.)
        """
        return {}

    @abstractmethod
    def load_cases(self, settings: Settings) -> CaseSelection:
        """Load the data and apply the published selection rule (``--limit`` is applied after)."""

    @abstractmethod
    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        """Answer one case in one mode. Raise on failure (see the module docstring)."""

    async def score(self, case: Case, result: CaseResult, ctx: RunContext) -> list[Score]:
        """Scores of one answered case (``ctx.judge`` is None when judging is off)."""
        return []

    def policies(self, mode: str, settings: Settings) -> list[Any]:
        """The policy objects ``mode`` runs with, taken from ``settings``' typed sections.

        Every value was checked when the settings were loaded; the CLI still builds these before
        any case runs, so a combination a task rejects stops the run with one line.
        """
        return []

    def dry_run_prompts(self, case: Case, mode: str, settings: Settings) -> list[list[Message]]:
        """Every prompt the mode would send before any model output exists (no model is called)."""
        raise Unsupported(f"{self.name} has no dry run: its task does not implement Task.dry_run_prompts "
                          "(run it on a model, or use a generic arm: --arm compaction)")

    def retrieval_only(self, cases: Sequence[Case], mode: str, settings: Settings) -> dict[str, Any]:
        """LLM-free evidence recall@k of the retrieval for ``cases`` (``--retrieval-only``)."""
        raise Unsupported(f"{self.name} has no --retrieval-only measure (its task does not implement "
                          "Task.retrieval_only)")

    # ------------------------------------------------------------------ retention (optional)

    def retention_groups(self, cases: Sequence[Case], settings: Settings, delivery: DeliveryMode) -> list[HistoryGroup]:
        """The histories the LLM-free retention measures over ``cases``, each with the questions asked over it.

        One :class:`~agentlab.bench.retention.rows.HistoryGroup` per shared history (a meeting, a
        conversation), holding only the selected cases' questions, each with its gold evidence map
        (:class:`~agentlab.bench.retention.delivery.EvidenceMap`). ``delivery``: ``turns`` (the events the task
        seeds, as :meth:`history`) or ``tool_results`` (:meth:`tool_delivery`'s reading trajectory).
        A task that marks no gold evidence keeps this default, which raises :class:`Unsupported`.
        """
        raise Unsupported(f"{self.name} marks no gold evidence in its history, so retention does not apply to it "
                          "(a task implements Task.retention_groups, or Task.retention for a measure of its own)")

    async def retention(self, cases: Sequence[Case], arms: Sequence[Arm], settings: Settings, *, delivery: DeliveryMode,
                        context_window: int, cache_profile: str | None = None) -> list[RetentionRow]:
        """The LLM-free retention of every arm over ``cases``: the entry point ``retention`` and ``league`` call.

        One :class:`~agentlab.bench.retention.questions.RetentionRow` per measured unit and arm; ``retention``
        averages, prints and stores them. The default measures :meth:`retention_groups` with
        :func:`agentlab.bench.retention.questions.measure_groups` (per question: is its evidence in the request).
        A benchmark whose measure is its own (e.g. per step of an agent trajectory) overrides this and
        returns rows of the same shape, one per step (``case_id`` naming the step).
        ``context_window``: the window the mechanisms see; ``settings``: the ones to build them from;
        ``cache_profile`` (a :data:`agentlab.model.prompt_caching.PROFILES` name, ``None``: none) fills
        each row's ``cache`` with its requests through that provider's prompt cache.
        """
        from agentlab.bench.retention.questions import measure_groups

        groups = self.retention_groups(cases, settings, delivery)
        timed = await measure_groups(groups, list(arms), context_window=context_window, settings=settings,
                                     cache_profile=cache_profile)
        return timed.rows

    def retention_report(self, arms: Mapping[str, Arm], skipped: Mapping[str, str], settings: Settings, *,
                         context_budget: int, budget_source: str, limit: int, as_json: bool, out: Any,
                         cache_profile: str = "none", price_model: str | None = None,
                         db: Path | None = None, summary_tokens: int | None = None) -> int | None:
        """A retention measure with a table of its own (not one row per question): measure, print, return the exit status.

        ``None`` (the default): the task's rows are :meth:`retention`'s, and the ``retention`` command
        averages, prints and stores them. A task whose unit is not a question (e.g. every step of a
        recorded agent trajectory) overrides this and prints its own table to ``out``; ``cache_profile``
        and ``price_model`` are ``--cache-profile`` and ``--price-model`` as given, ``db`` the results
        file to store its rows in (``None``: ``--no-store``, store nothing), ``summary_tokens`` the
        summary length the summarising arms are measured at (a task with :attr:`summary_bounds`).
        """
        return None

    def has_evidence_rows(self) -> bool:
        """Whether :meth:`retention` gives rows (it or :meth:`retention_groups` is implemented): what ``league``'s ``kept`` reads."""
        cls = type(self)
        return cls.retention_groups is not Task.retention_groups or cls.retention is not Task.retention

    def has_retention(self) -> bool:
        """Whether the task implements retention (:meth:`retention_groups`, :meth:`retention` or :meth:`retention_report`)."""
        return self.has_evidence_rows() or type(self).retention_report is not Task.retention_report

    # ------------------------------------------------------------------------------- arms

    def arm(self, name: str) -> Arm:
        """The arm ``name`` of this task: one of its modes, or a generic arm that applies to it.

        ``LookupError`` naming the known arms (or the task's reason an arm does not apply). Looked
        up once per instance (:func:`get_task` makes a fresh one per command), so the checks, the
        run id and every case of a command see the same :class:`~agentlab.policies.arms.Arm`; an
        unknown name is not remembered.
        """
        from agentlab.policies.arms import get_arm

        known: dict[str, Arm] = self.__dict__.setdefault("_looked_up_arms", {})
        if name not in known:
            known[name] = get_arm(name, self)
        return known[name]

    def arm_names(self) -> list[str]:
        """Every arm this task runs: its modes, then the generic arms it did not declare inapplicable."""
        from agentlab.policies.arms import arm_names

        return arm_names(self)

    def has_arm(self, name: str) -> bool:
        """Whether :meth:`arm` knows ``name``."""
        try:
            self.arm(name)
        except LookupError:
            return False
        return True

    def arm_policies(self, name: str, settings: Settings) -> list[Any]:
        """What arm ``name`` runs with: a mode's :meth:`policies`, a generic arm's mechanisms (no model)."""
        arm = self.arm(name)
        return arm.mechanisms(settings, None) if arm.generic else self.policies(name, settings)

    def run_arm(self, case: Case, name: str, ctx: RunContext) -> Awaitable[CaseResult]:
        """Answer one case in arm ``name``: a mode through :meth:`run_case`, a generic arm through :meth:`run_generic`.

        With ``[dataset] delivery = "tool_results"`` the baseline mode runs as a generic arm with no
        mechanism (the whole reading, then the question) and any other mode is refused
        (:meth:`delivered_arm`). Returns the coroutine of the one it dispatches to.
        """
        arm = self.delivered_arm(name, ctx.settings)
        if not arm.generic:
            return self.run_case(case, name, ctx)
        return self.run_generic(case, arm, ctx)

    def delivery(self, settings: Settings) -> str:
        """``[dataset] delivery``: ``turns`` (also for a benchmark without the field) or ``tool_results``."""
        return str(settings.get("dataset", "delivery", "turns") or "turns")

    def delivered_arm(self, name: str, settings: Settings) -> Arm:
        """The arm ``name`` runs as under the settings' delivery.

        Turns: :meth:`arm`. Tool results: a generic arm as it is; the baseline mode as the generic
        arm of that name with no mechanism (everything read stays visible); any other task mode is
        a ``ValueError`` — it seeds its own history as turns (QMSum's shared meeting summary,
        LoCoMo's memory), so it has no tool-result form.
        """
        arm = self.arm(name)
        if arm.generic or self.delivery(settings) == "turns":
            return arm
        from agentlab.policies.arms import full_history_arm

        roles = self.roles()
        if roles is not None and name == roles.baseline:
            return full_history_arm(name)
        raise ValueError(f"{self.name}'s {name} mode seeds its own history as turns, so dataset.delivery="
                         f"{self.delivery(settings)} does not apply to it; run a generic arm instead (e.g. "
                         f"--arm compaction, --arm rolling_summary, --arm inspect_edit; list shows them all)")

    def tool_delivery(self, case: Case, settings: Settings, session_id: str) -> Any:
        """The case's history as a scripted tool-reading trajectory and its tools (a :class:`~agentlab.bench.retention.delivery.ToolDelivery`)."""
        raise Unsupported(self.tool_delivery_inapplicable or f"{self.name} has no tool-result delivery (its task does "
                          "not implement Task.tool_delivery); use dataset.delivery=turns")

    def delivered_history(self, case: Case, settings: Settings, session_id: str) -> tuple[list[Event], list[Any]]:
        """(the events a generic arm's session is seeded with, the tools its agent offers) under the delivery.

        ``turns``: :meth:`history`, no tool; ``tool_results``: :meth:`tool_delivery`'s reading
        trajectory (ids from ``session_id``) and its reading tool, which the agent may call again.
        """
        if self.delivery(settings) == "turns":
            return self.history(case, settings), []
        delivered = self.tool_delivery(case, settings, session_id)
        return list(delivered.events), list(delivered.tools)

    def history(self, case: Case, settings: Settings) -> list[Event]:
        """The events a generic arm's session is seeded with, oldest first (the case's conversation)."""
        raise Unsupported(f"{self.name} does not seed a history for generic arms (its task does not implement "
                          "Task.history); run one of its own modes")

    def arm_instruction(self, case: Case, settings: Settings) -> str:
        """The answer instruction of a generic arm's agent (default: none)."""
        return ""

    def arm_generation(self, settings: Settings) -> Any:
        """The ``GenerationConfig`` of a generic arm's answer (default: the model's)."""
        return None

    async def run_generic(self, case: Case, arm: Arm, ctx: RunContext) -> CaseResult:
        """Seed the history, ask once with the arm's mechanisms, return the answer (scored by :meth:`score`).

        ``[run] seeding`` (``--seeding``) decides how the history reaches the session
        (:func:`agentlab.bench.running.replay.seed`): all at once (``forced``), or event by event with the
        mechanisms' triggers firing as in a live agent (``lived``).
        """
        from agentlab.bench.running.replay import seed
        from agentlab.runtime import LLMAgent, Runner

        service = ctx.new_session_service()
        session_id = f"{arm.name}-{case.id}"
        mechanisms = arm.mechanisms(ctx.settings, ctx.model)
        history, tools = self.delivered_history(case, ctx.settings, session_id)
        agent = LLMAgent(GENERIC_AGENT, ctx.model, instruction=self.arm_instruction(case, ctx.settings),
                         tools=tools, generation=self.arm_generation(ctx.settings), mechanisms=mechanisms,
                         max_tool_iterations=6)
        runner = Runner(GENERIC_APP, agent, service)
        try:
            seeded = await seed(runner, GENERIC_USER, session_id, history, ctx.seeding, options=ctx.run_options())
            outcome = await collect_run(runner.run(GENERIC_USER, session_id, case.question, options=ctx.run_options()))
        finally:
            await runner.close()
        return CaseResult(prediction=outcome.answer, compactions=outcome.compactions,
                          metadata={"arm": arm.name, "seeding": ctx.seeding, "delivery": self.delivery(ctx.settings),
                                    **seeded,
                                    "tool_calls": outcome.tool_calls})

    def dry_run_arm(self, case: Case, name: str, settings: Settings,
                    window: int | None = None) -> list[list[Message]]:
        """The dry-run prompts of arm ``name``: a mode's :meth:`dry_run_prompts`, a generic arm's projection.

        ``window``: the window a generic arm's mechanisms see (the run's ``--context-budget``);
        ``None``: :data:`DRY_RUN_WINDOW`.
        """
        arm = self.delivered_arm(name, settings)
        if not arm.generic:
            return self.dry_run_prompts(case, name, settings)
        return self.generic_dry_run(case, arm, settings, window)

    def generic_dry_run(self, case: Case, arm: Arm, settings: Settings,
                        window: int | None = None) -> list[list[Message]]:
        """The one answer prompt: the seeded history and the question, projected by the arm's mechanisms."""
        history, tools = self.delivered_history(case, settings, f"{arm.name}-{case.id}")
        return [project_prompt(history, arm.mechanisms(settings, None), case.question,
                               self.arm_instruction(case, settings), tools=tools, window=window)]

    def roles(self) -> ModeRoles | None:
        """Baseline / lossy / recovered modes of the report (``None``: the benchmark has no comparisons)."""
        return self.mode_roles

    def case_group(self, case: Case) -> str | None:
        """Cases that share per-run work or a long prompt prefix share a group key.

        Per-run work is :meth:`RunContext.once` (a meeting summary, a seeded conversation); the
        prefix is e.g. one meeting's transcript. The in-process executor runs a group's cases one
        after another, so a server's prompt cache (llama.cpp keeps a slot's last prompt; hosted APIs
        cache prefixes) reuses the shared prefix and the per-group work is built once before the
        group's other cases start; different groups still run concurrently. A distributed executor
        sends a group's cases to one worker, so that work is done, and its tokens counted, once per
        run as in-process. ``None``: the case stands alone.
        """
        return None

    def report_tables(self, store: ResultStore) -> dict[str, Any]:
        """The benchmark's own tables in its published report's shape, as pandas DataFrames by name.

        ``report`` prints each one and writes it to the store as ``<benchmark>_<name>``; a task
        whose paper reports only the shared comparison tables keeps this default: none.
        """
        return {}


# -------------------------------------------------------------------------------- registry

TASKS: dict[str, type[Task]] = {}
_discovered = False


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: make a task available to the CLI under ``cls.name``."""
    for attr in ("name", "modes", "default_mode"):
        if not hasattr(cls, attr):
            raise TypeError(f"task {cls.__name__} must define {attr!r}")
    if cls.default_mode not in cls.modes:
        raise TypeError(f"task {cls.name}: default_mode {cls.default_mode!r} is not one of {cls.modes}")
    rule = cls.published_token_rule
    if rule is not None and rule not in facts.TOKEN_RULES:
        raise TypeError(f"task {cls.name}: published_token_rule {rule!r} is not one of {facts.TOKEN_RULES}")
    TASKS[cls.name] = cls
    return cls


def discover() -> dict[str, type[Task]]:
    """Import every module of this package (and the user's, :func:`agentlab.extensions.load_extensions`) so tasks register."""
    global _discovered
    if not _discovered:
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
        _discovered = True
    load_extensions()
    return TASKS


def mode_roles() -> dict[str, ModeRoles]:
    """Baseline / lossy / recovered modes of every registered benchmark that has comparisons."""
    return {name: cls.mode_roles for name, cls in discover().items() if cls.mode_roles is not None}


# The settings loader and the store read the registered classes through this (they sit below it).
facts.use_registry(discover, lambda: TASKS)


def get_task(name: str) -> Task:
    """A fresh instance of the task registered as ``name`` (:class:`UnknownBenchmark` if none).

    The module of that name (``agentlab/bench/tasks/<name>.py``) and the user's extensions are
    imported first; every other task module only when the name is not found there (importing all
    of them, LoCoMo's memory stack included, cost a run a quarter second of start-up).
    """
    if name not in TASKS and name.isidentifier() and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        importlib.import_module(f"{__name__}.{name}")
    load_extensions()
    tasks = TASKS if name in TASKS else discover()
    if name not in tasks:
        known = ", ".join(sorted(tasks)) or "none registered"
        raise UnknownBenchmark(f"unknown benchmark {name!r}; known benchmarks: {known}")
    return tasks[name]()


__all__ = [
    "Case",
    "CaseError",
    "CaseResult",
    "CaseSelection",
    "DRY_RUN_WINDOW",
    "PRECHECK_SLACK",
    "RunContext",
    "RunOutcome",
    "TASKS",
    "Task",
    "UnknownBenchmark",
    "Unsupported",
    "check_window",
    "collect_run",
    "compaction_row",
    "context_length_need",
    "discover",
    "get_task",
    "mode_roles",
    "project_prompt",
    "register",
]
