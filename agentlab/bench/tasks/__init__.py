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

The harness (:mod:`agentlab.bench.executor`) owns everything around a case:

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

import asyncio
import contextlib
import importlib
import importlib.util
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import agentlab.bench.facts as facts
from agentlab.bench.config import Settings
from agentlab.bench.facts import ModeRoles
from agentlab.bench.judge import Judge, JudgeTemplate
from agentlab.bench.metrics import Score
from agentlab.bench.store import CompactionRow, ResultStore
from agentlab.events import OBJ_COMPACTION, Event, Message
from agentlab.extensions import LEGACY_ENV, load_extensions
from agentlab.model.base import Model

if TYPE_CHECKING:
    from agentlab.bench.arms import Arm
    from agentlab.runtime import RunOptions

T = TypeVar("T")

#: App, user and agent names of a generic arm's runs.
GENERIC_APP, GENERIC_USER, GENERIC_AGENT = "agentlab-bench", "user", "assistant"
#: Window the generic dry run projects with (the published models' 128k): no mechanism needs a model then.
DRY_RUN_WINDOW = 128_000

#: Extra modules to import when discovering tasks: the older name of ``$AGENTLAB_EXTENSIONS``
#: (:mod:`agentlab.extensions`), which is read too.
TASK_MODULES_ENV = LEGACY_ENV


# -------------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class Case:
    """One benchmark item."""

    #: Stable id, unique within the benchmark (e.g. ``Bed003_specific_01``); the resume key.
    id: str
    #: The question / user input the agent answers.
    question: str
    #: The gold answer the scores compare with.
    reference: str
    #: The typed dataset object (e.g. a ``QMSumCase``); not stored.
    data: Any = None
    #: Small JSON-able facts stored with the case row (e.g. meeting id, category, support distance).
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CaseSelection:
    """What :meth:`Task.load_cases` returns."""

    cases: Sequence[Case]
    #: Fingerprint of the data files read (part of the run id).
    dataset_sha256: str
    #: How many items were loaded before the selection rule (e.g. QMSum: 244 loaded, 189 selected).
    loaded: int | None = None
    #: One line on how cases were selected (printed by the CLI).
    note: str = ""


@dataclass
class CaseResult:
    """What :meth:`Task.run_case` returns."""

    prediction: str
    #: Defaults to ``case.reference``.
    reference: str | None = None
    #: Stored with the case row (JSON-able): tool-call counts, summary length, timings...
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Request-side compaction stats of the case (see :func:`collect_run`).
    compactions: list[CompactionRow] = field(default_factory=list)


class CaseError(Exception):
    """A case could not produce an answer; ``code`` is stored (e.g. ``context_length``).

    ``metadata`` is stored with the failed case row, e.g. ``prompt_tokens_needed`` for a prompt that
    did not fit the window (the token-savings table measures the other modes against that need).
    """

    def __init__(self, message: str, code: str = "case_error", metadata: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.metadata = dict(metadata or {})


#: Long-context prompts are failed before sending only when the estimate exceeds the model's window
#: by this factor: the estimate uses cl100k, the model its own tokenizer, so near the edge the real
#: call decides (and a refusal comes back as a ``context_length`` failure too).
PRECHECK_SLACK = 1.10


def check_window(messages: Any, ctx: RunContext, what: str = "long-context prompt") -> int:
    """The prompt tokens of ``messages`` (cl100k); a ``context_length`` :class:`CaseError` if they cannot fit.

    The failure is recorded without sending the prompt, with ``prompt_tokens_needed`` in the case
    metadata, so a small model's long-context baseline still anchors the token-savings table.
    """
    from agentlab.model import tokens
    from agentlab.model.window import resolve_context_window

    estimate = tokens.count_messages(messages)
    # The model's real window, not the run's --context-budget: a baseline prompt is sent whole.
    window = resolve_context_window(ctx.model)
    if window and estimate > window * PRECHECK_SLACK:
        raise CaseError(f"the {what} needs about {estimate} tokens (cl100k estimate) but {ctx.model.info.name} "
                        f"has a {window}-token window; not sent", code="context_length",
                        metadata={"prompt_tokens_needed": estimate})
    return estimate


@contextlib.contextmanager
def context_length_need(estimate: int | None) -> Iterator[None]:
    """Inside, a context-length failure carries ``prompt_tokens_needed`` = ``estimate``.

    For a prompt that passed :func:`check_window` but was still refused (the model's tokenizer
    counts more than cl100k): whether the refusal arrives as the model's
    :class:`~agentlab.model.base.ContextLengthError` or as the ``context_length``
    :class:`CaseError` of a run that ended in it, the case keeps the need that anchors
    ``token_savings``. ``None``: nothing to record.
    """
    from agentlab.model.base import ContextLengthError

    try:
        yield
    except ContextLengthError as exc:
        if estimate is None:
            raise
        raise CaseError(f"the model refused the prompt ({exc})", code="context_length",
                        metadata={"prompt_tokens_needed": estimate}) from exc
    except CaseError as exc:
        if estimate is not None and exc.code == "context_length":
            exc.metadata.setdefault("prompt_tokens_needed", estimate)
        raise


class UnknownBenchmark(LookupError):
    """No registered task has the name asked for; the message lists the known ones."""

    pass


# ---------------------------------------------------------------------------------- context


class RunContext:
    """What a task gets for each case: models, settings, services and a per-run memo."""

    def __init__(self, *, benchmark: str, mode: str, model: Model, settings: Settings, model_spec: str = "",
                 judge: Judge | None = None, run_id: str = "",
                 session_service_factory: Callable[[], Any] | None = None, store: ResultStore | None = None,
                 context_budget: int | None = None, seeding: str = "forced") -> None:
        self.benchmark = benchmark
        self.mode = mode
        self.model = model
        self.model_spec = model_spec or model.info.name
        self.judge = judge
        self.settings = settings
        self.run_id = run_id
        #: The results store of the run (set by the executor): a task may read earlier runs from it,
        #: e.g. MT-Bench-101's summary mode looks up the baseline answers it compares with.
        self.store = store
        #: ``--context-budget``: the window the mechanisms see (``None``: the model's own). A task hands
        #: it to every run through :meth:`run_options`; the model's real window is unchanged.
        self.context_budget = context_budget
        #: ``--seeding``: how a generic arm's history reaches its session (``forced`` or ``lived``).
        self.seeding = seeding
        #: The run's arm, resolved once by the executor (``None``: resolved per case from ``mode``).
        self.arm: Arm | None = None
        self._session_service_factory = session_service_factory
        self._memo: dict[Any, Any] = {}
        self._locks: dict[Any, asyncio.Lock] = {}

    def new_session_service(self) -> Any:
        """A fresh session service for one case (in-memory unless the harness was given a factory)."""
        if self._session_service_factory is not None:
            return self._session_service_factory()
        from agentlab.session.inmemory import InMemorySessionService

        return InMemorySessionService()

    def run_options(self, **options: Any) -> RunOptions:
        """``RunOptions`` for a ``runner.run`` of this case: ``options``, with the run's context budget.

        The budget becomes ``RunOptions.context_window``, the window the summary triggers, the
        70 % pressure path and the compaction thresholds use instead of the model's.
        """
        from agentlab.runtime import RunOptions

        if self.context_budget is not None:
            options.setdefault("context_window", self.context_budget)
        return RunOptions(**options)

    async def once(self, key: Any, factory: Callable[[], Awaitable[T]]) -> T:
        """``await factory()`` once per run and key; concurrent callers wait for the first.

        A factory that raises is not remembered, so the next case tries again.
        """
        if key in self._memo:
            return self._memo[key]
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self._memo:
                self._memo[key] = await factory()
        return self._memo[key]


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
    #: One line for ``python -m agentlab.bench list``.
    description: ClassVar[str] = ""
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
        raise NotImplementedError(f"{self.name} does not support --dry-run")

    def retrieval_only(self, cases: Sequence[Case], mode: str, settings: Settings) -> dict[str, Any]:
        """LLM-free evidence recall@k of the retrieval for ``cases`` (``--retrieval-only``)."""
        raise NotImplementedError(f"{self.name} does not support --retrieval-only")

    # ------------------------------------------------------------------------------- arms

    def arm(self, name: str) -> Arm:
        """The arm ``name`` of this task: one of its modes, or a generic arm that applies to it.

        ``LookupError`` naming the known arms (or the task's reason an arm does not apply).
        """
        from agentlab.bench.arms import get_arm

        return get_arm(name, self)

    def arm_names(self) -> list[str]:
        """Every arm this task runs: its modes, then the generic arms it did not declare inapplicable."""
        from agentlab.bench.arms import arm_names

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
        from agentlab.bench.arms import full_history_arm

        roles = self.roles()
        if roles is not None and name == roles.baseline:
            return full_history_arm(name)
        raise ValueError(f"{self.name}'s {name} mode seeds its own history as turns, so dataset.delivery="
                         f"{self.delivery(settings)} does not apply to it; run a generic arm instead (e.g. "
                         f"--arm compaction, --arm rolling_summary, --arm inspect_edit; list shows them all)")

    def tool_delivery(self, case: Case, settings: Settings, session_id: str) -> Any:
        """The case's history as a scripted tool-reading trajectory and its tools (a :class:`~agentlab.bench.delivery.ToolDelivery`)."""
        raise NotImplementedError(self.tool_delivery_inapplicable or f"{self.name} has no tool-result delivery")

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
        raise NotImplementedError(f"{self.name} does not seed a history for generic arms")

    def arm_instruction(self, case: Case, settings: Settings) -> str:
        """The answer instruction of a generic arm's agent (default: none)."""
        return ""

    def arm_generation(self, settings: Settings) -> Any:
        """The ``GenerationConfig`` of a generic arm's answer (default: the model's)."""
        return None

    async def run_generic(self, case: Case, arm: Arm, ctx: RunContext) -> CaseResult:
        """Seed the history, ask once with the arm's mechanisms, return the answer (scored by :meth:`score`).

        ``[run] seeding`` (``--seeding``) decides how the history reaches the session
        (:func:`agentlab.bench.replay.seed`): all at once (``forced``), or event by event with the
        mechanisms' triggers firing as in a live agent (``lived``).
        """
        from agentlab.bench.replay import seed
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


# ------------------------------------------------------------------------------ run helper


def project_prompt(history: Sequence[Event], mechanisms: Sequence[Any], question: str,
                   instruction: str = "", tools: Sequence[Any] = (), window: int | None = None) -> list[Message]:
    """The answer prompt ``mechanisms`` build for ``history`` + ``question`` (no model; :func:`agentlab.core.project`).

    ``window``: the context window the mechanisms see (``None``: :data:`DRY_RUN_WINDOW`).
    """
    from agentlab.core import project
    from agentlab.model.base import ModelInfo

    async def build() -> list[Message]:
        result = await project(list(history), mechanisms, question, ModelInfo("dry-run", window or DRY_RUN_WINDOW),
                               instruction=instruction, tools=list(tools))
        return list(result.request.messages)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(build())
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from inside a loop (a notebook)
        return pool.submit(asyncio.run, build()).result()



@dataclass
class RunOutcome:
    """What one ``runner.run(...)`` produced."""

    answer: str
    final_event: Event
    events: list[Event]
    compactions: list[CompactionRow]
    tool_calls: dict[str, int]


#: ``kind`` of a request stats record -> the ``compactions.mechanism`` it is stored as (a peer: its name).
_COMPACTION_KINDS = {"tool_results": "compaction", "sync_summary": "compaction_sync_summary"}


def compaction_row(stat: Mapping[str, Any]) -> CompactionRow | None:
    """The ``compactions`` row of one request stats record, or ``None`` for a record that is no compaction.

    The seed's passes, its synchronous summary and every peer policy that changed the request leave
    ``results_compacted`` / ``tokens_before`` / ``tokens_after``; other records (the recall preload
    of ``<arm>+recall``, a peer's note that it could not act) are not compactions.
    """
    if "results_compacted" not in stat:
        return None
    kind = str(stat.get("kind", ""))
    mechanism = str(stat.get("policy", "")) if kind == "peer_policy" else _COMPACTION_KINDS.get(kind, kind)
    return CompactionRow(int(stat.get("results_compacted", 0)), int(stat.get("tokens_before", 0)),
                         int(stat.get("tokens_after", 0)), mechanism)


async def collect_run(stream: AsyncIterator[Event]) -> RunOutcome:
    """Consume a runner's event stream: the final answer, compaction stats and tool-call counts.

    Raises :class:`CaseError` (code = the event's ``error_code``) when the run produced an error
    and no final answer after it, or no answer at all.
    """
    events: list[Event] = []
    compactions: list[CompactionRow] = []
    tools: dict[str, int] = {}
    final: Event | None = None
    error: Event | None = None
    async for event in stream:
        events.append(event)
        if event.object == OBJ_COMPACTION:
            row = compaction_row(event.metadata.get("compaction") or {})
            if row is not None:
                compactions.append(row)
        if event.error:
            error, final = event, None
            continue
        if event.is_tool_call() and event.message is not None:
            for call in event.message.tool_calls:
                tools[call.name] = tools.get(call.name, 0) + 1
        if event.is_final_response():
            final = event
    if final is None:
        if error is not None:
            raise CaseError(str(error.error), code=error.error_code or "run_error")
        raise CaseError("the run ended without a final answer", code="no_answer")
    return RunOutcome(final.text.strip(), final, events, compactions, tools)


__all__ = [
    "Case",
    "CaseError",
    "CaseResult",
    "CaseSelection",
    "RunContext",
    "RunOutcome",
    "TASKS",
    "Task",
    "UnknownBenchmark",
    "collect_run",
    "discover",
    "get_task",
    "project_prompt",
    "register",
]
