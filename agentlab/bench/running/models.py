"""The models a run uses and the cases it runs: built, checked and closed once, for a run or a league.

``python -m agentlab.bench <benchmark>`` (:mod:`agentlab.bench.cli.run`) and the league
(:mod:`agentlab.bench.league.play`) both build the answer (and judge) model from its spec, check
that its server answers before any case (:func:`prepare_model`), pick the cases (the published
selection, or the embedded model's demo selection: :func:`choose_cases`) and close the HTTP clients
in the loop that opened them (:func:`close_clients`). A mistake is a
:class:`~agentlab.bench.usage.UsageError`, raised before anything is stored.
"""

from __future__ import annotations

import contextlib
from typing import Any, TextIO

from agentlab.bench.spec import RunSpec, load_selection
from agentlab.bench.tasks import Task
from agentlab.bench.usage import EMBEDDED_DEFAULT_LIMIT, UsageError, print_banner


def build_model(spec: str, what: str, context_window: int | None = None) -> Any:
    """The cached model for ``spec``, with a mistake in the spec or a missing key as a :class:`~agentlab.bench.usage.UsageError`."""
    from agentlab.model.base import ModelError
    from agentlab.model.registry import get_model

    try:
        return get_model(spec, context_window=context_window)
    except ModelError as exc:  # e.g. a missing OPENAI_API_KEY
        raise UsageError(f"{what} {spec!r}: {exc}") from exc
    except ValueError as exc:  # an unknown spec
        raise UsageError(f"{what}: {exc}") from exc


def prepare_model(model: Any, spec: str, what: str, *, window: bool) -> Any:
    """Resolve the model's window (answer model) and make sure its server answers, before any case."""
    from agentlab.model.base import ModelError

    info = None
    if window:
        resolve = getattr(model, "resolve_info", None)
        try:
            info = resolve() if resolve is not None else model.info
        except ModelError as exc:
            raise UsageError(f"{what} {spec!r}: {exc}") from exc
    check = getattr(model, "server_problem", None)
    problem = check() if check is not None else None
    if problem is not None:
        server = getattr(getattr(model, "inner", model), "server_label", "its server")
        raise UsageError(f"{what} {spec!r}: the model server at {server} {problem}")
    return info


async def close_clients(*models: Any) -> None:
    """``aclose()`` the innermost HTTP-backed model of each wrapper chain (cache → client)."""
    seen: set[int] = set()
    for model in models:
        while model is not None and id(model) not in seen:
            seen.add(id(model))
            close = getattr(model, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):  # closing is best effort; the results are stored
                    await close()
            model = getattr(model, "inner", None)


def choose_cases(task: Task, settings: Any, model: Any, spec: RunSpec, out: TextIO) -> tuple[Any, str | None]:
    """The published selection, or on the embedded model without ``--limit`` the demo selection.

    Returns the selection and the rule to store with the runs (``None`` = published).
    """
    from agentlab.bench.running.selection import FITS_WINDOW_RULE, model_prompt_counter, select_fitting
    from agentlab.model.window import resolve_context_window

    selection = load_selection(task, settings, None if spec.demo_selection else spec.limit)
    if not spec.demo_selection:
        return selection, None
    window = resolve_context_window(model)
    roles = task.roles()
    if not window or roles is None:
        print_banner(f"embedded model without --limit: running the first {EMBEDDED_DEFAULT_LIMIT} published cases "
                "(pass --limit 0 for all)", out)
        return _limited(selection, EMBEDDED_DEFAULT_LIMIT), None
    counter, counted_with = model_prompt_counter(model)
    try:
        fitting = select_fitting(task, selection, settings, window=window, limit=EMBEDDED_DEFAULT_LIMIT,
                                 counter=counter, counted_with=counted_with)
    except NotImplementedError:  # the task cannot plan its baseline prompts without a model
        fitting = None
    if fitting is None or not fitting.selection.cases:
        print_banner(f"embedded model without --limit: no {task.name} case's {roles.baseline} prompt fits the "
                f"{window}-token window, so its baseline will fail `context_length`; running the first "
                f"{EMBEDDED_DEFAULT_LIMIT} published cases (pass --limit N to choose)", out)
        return _limited(selection, EMBEDDED_DEFAULT_LIMIT), None
    groups = {task.case_group(c) for c in fitting.selection.cases}
    print_banner(f"DEMO SET, not the published selection: the embedded model's window is {window} tokens, so "
            f"{task.name} runs {len(fitting.selection.cases)} of the {fitting.fitting} cases (of {fitting.published} "
            f"published) whose {roles.baseline} prompt fits it (largest {fitting.max_prompt_tokens} "
            f"tokens, {counted_with}; {len(groups)} group(s) of shared context). Pass --limit N for the first N "
            "published cases, --limit 0 for all", out)
    return fitting.selection, FITS_WINDOW_RULE


def _limited(selection: Any, limit: int) -> Any:
    from agentlab.bench.tasks import CaseSelection

    return CaseSelection(list(selection.cases)[:limit], selection.dataset_sha256, selection.loaded, selection.note)
