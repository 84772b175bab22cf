"""What a task works with: the case types, the per-case :class:`RunContext`, the window checks, and
the helpers that project a prompt or collect a run's answer.

:mod:`agentlab.bench.tasks` re-exports every name here; its docstring is the interface a task
implements.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from agentlab.bench.config import Settings
from agentlab.bench.scoring.judge import Judge
from agentlab.bench.store.results import CompactionRow, ResultStore
from agentlab.events import OBJ_COMPACTION, Event, Message
from agentlab.model.base import Model

if TYPE_CHECKING:
    from agentlab.policies.arms import Arm
    from agentlab.runtime import RunOptions

T = TypeVar("T")
#: Window the generic dry run projects with (the published models' 128k): no mechanism needs a model then.
DRY_RUN_WINDOW = 128_000


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


class Unsupported(NotImplementedError):
    """A task lacks an optional capability (a dry run, retention, a tool delivery...).

    The message names the task, what it lacks and what to do instead; the CLI prints it as one
    ``error:`` line. A subclass of ``NotImplementedError``, so code that tolerated that still does.
    """

    pass


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
        #: The run's arm, resolved once by the executor or a remote worker (``None``: resolved per case from ``mode``).
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

    tRPC-Agent-Go's passes, its synchronous summary and every peer policy that changed the request leave
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
    "DRY_RUN_WINDOW",
    "PRECHECK_SLACK",
    "RunContext",
    "RunOutcome",
    "UnknownBenchmark",
    "Unsupported",
    "check_window",
    "collect_run",
    "compaction_row",
    "context_length_need",
    "project_prompt",
]
