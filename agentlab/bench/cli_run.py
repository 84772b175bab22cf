"""``python -m agentlab.bench <benchmark>``: one mode's run, with its baselines, on the chosen cases.

Settings loading (task defaults < file < ``[smoke]`` < ``--set``), the checks that stop a run
before anything is stored, the models, the case selection, and the run summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from agentlab.bench.cli_common import (
    _VARIANT_NAME,
    EMBEDDED_DEFAULT_LIMIT,
    SMOKE_LABEL,
    CliError,
    _banner,
    _print_json,
    _records,
)
from agentlab.bench.cli_report import COMPARISON_SECTIONS, _report_payload, _write_report
from agentlab.bench.config import apply_overrides, apply_smoke, code_version, load_settings, variant_settings
from agentlab.bench.datasets.base import DatasetError
from agentlab.bench.store import RUN_MEANS_SQL, ResultStore
from agentlab.bench.tasks import Task, discover, get_task

# ------------------------------------------------------------------------------- settings


def _load(task: Task, overrides: Sequence[str], smoke: bool = False, out: TextIO | None = None) -> Any:
    """Task defaults < settings file < (smoke settings, embedded model only) < ``--set``."""
    return _load_with_reference(task, overrides, smoke=smoke, out=out)[0]


def _load_with_reference(task: Task, overrides: Sequence[str], *, smoke: bool = False, embedded: bool = False,
                         out: TextIO | None = None) -> tuple[Any, Any]:
    """The run's settings, and the reference its variant is named against.

    The reference is what the plain command uses with this model: the file, plus its ``[smoke]``
    settings on the embedded model. So an embedded smoke run is the ``default`` variant, while
    ``--published-settings`` on the embedded model is a variant named by the published values.
    """
    file_settings = load_settings(task.name, task.default_settings())
    settings = reference = file_settings
    if (smoke or embedded) and file_settings.smoke:
        smoked, changed = apply_smoke(file_settings)
        if embedded:
            reference = smoked
        if smoke:
            settings = smoked
            if changed and out is not None:
                shown = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items())
                _banner(f"smoke settings for the embedded model (benchmarks/{task.name}.toml [smoke]; "
                        f"--published-settings keeps the published values): {shown}", out)
    return apply_overrides(settings, overrides), reference



# ---------------------------------------------------------------------------------- checks


def _is_embedded(model_spec: str) -> bool:
    return model_spec.strip() == "embedded"


def _resolve_limit(args: argparse.Namespace, model_spec: str) -> tuple[int | None, bool]:
    """(``--limit`` as a case count or None for all, whether this is a smoke test on the embedded model).

    Without ``--limit`` the embedded model runs at most :data:`EMBEDDED_DEFAULT_LIMIT` cases
    (see :func:`_choose_cases` for which).
    """
    smoke = _is_embedded(model_spec)
    if args.limit is not None and args.limit < 0:
        raise CliError(f"--limit must be >= 0 (0 = all cases), got {args.limit}")
    if args.limit == 0:
        return None, smoke
    if args.limit is None and smoke:
        return EMBEDDED_DEFAULT_LIMIT, smoke
    return args.limit, smoke


def _check_flags(args: argparse.Namespace) -> None:
    """Numbers no run can use: one line before anything is loaded."""
    if args.limit is not None and args.limit < 0:
        raise CliError(f"--limit must be >= 0 (0 = all cases), got {args.limit}")
    if args.concurrency is not None and args.concurrency < 1:
        raise CliError(f"--concurrency must be >= 1, got {args.concurrency}")
    if args.context_window is not None and args.context_window < 1:
        raise CliError(f"--context-window must be a positive number of tokens, got {args.context_window}")


def _check_policies(task: Task, mode: str, settings: Any) -> None:
    """Build the mode's policies now, so a value one rejects stops the run before any case."""
    try:
        task.policies(mode, settings)
    except (ValueError, TypeError, KeyError) as exc:
        detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise CliError(f"{task.name}/{mode} settings rejected: {detail} (fix the --set value or "
                       f"benchmarks/{task.name}.toml)") from exc


def _load_selection(task: Task, settings: Any) -> Any:
    try:
        return task.load_cases(settings)
    except (ValueError, KeyError) as exc:
        if isinstance(exc, DatasetError):
            raise
        detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise CliError(f"{task.name}: {detail} (fix the --set value or benchmarks/{task.name}.toml)") from exc


def _build_model(spec: str, what: str, context_window: int | None = None) -> Any:
    """The cached model for ``spec``, with a mistake in the spec or a missing key as a :class:`CliError`."""
    from agentlab.model.base import ModelError
    from agentlab.model.registry import get_model

    try:
        return get_model(spec, context_window=context_window)
    except ModelError as exc:  # e.g. a missing OPENAI_API_KEY
        raise CliError(f"{what} {spec!r}: {exc}") from exc
    except ValueError as exc:  # an unknown spec
        raise CliError(f"{what}: {exc}") from exc


def _prepare_model(model: Any, spec: str, what: str, *, window: bool) -> Any:
    """Resolve the model's window (answer model) and make sure its server answers, before any case."""
    from agentlab.model.base import ModelError

    info = None
    if window:
        resolve = getattr(model, "resolve_info", None)
        try:
            info = resolve() if resolve is not None else model.info
        except ModelError as exc:
            raise CliError(f"{what} {spec!r}: {exc}") from exc
    check = getattr(model, "server_problem", None)
    problem = check() if check is not None else None
    if problem is not None:
        server = getattr(getattr(model, "inner", model), "server_label", "its server")
        raise CliError(f"{what} {spec!r}: the model server at {server} {problem}")
    return info


def _has_retrieval(task: Task) -> bool:
    return type(task).retrieval_only is not Task.retrieval_only


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    """Run (or resume) one mode and, unless ``--no-baselines``, the modes it is compared with.

    Also ``--dry-run`` (prompts and token counts, no model) and ``--retrieval-only``. Every check
    that can refuse the run happens before the results file is opened.
    """
    from agentlab.model.registry import default_spec

    _check_flags(args)
    task = get_task(args.benchmark)
    model_spec = args.model or default_spec()
    calls_model = not (args.dry_run or args.retrieval_only)
    smoke_settings = calls_model and _is_embedded(model_spec) and not args.published_settings
    settings, reference = _load_with_reference(task, args.overrides, smoke=smoke_settings,
                                               embedded=calls_model and _is_embedded(model_spec),
                                               out=out if not args.json else sys.stderr)
    variant_diff = variant_settings(settings, reference)
    if args.variant is not None and not _VARIANT_NAME.fullmatch(args.variant):
        raise CliError(f"--variant {args.variant!r}: use letters, digits and . _ - = ; : + , (no spaces)")
    mode = args.mode or task.default_mode
    if mode not in task.modes:
        raise CliError(f"{task.name}: unknown mode {mode!r}; modes: {', '.join(task.modes)}")
    if args.retrieval_only and not _has_retrieval(task):
        with_retrieval = ", ".join(name for name, cls in sorted(discover().items()) if _has_retrieval(cls()))
        raise CliError(f"{task.name} has no retrieval to measure, so --retrieval-only does not apply; "
                       f"benchmarks with it: {with_retrieval}")
    _check_policies(task, mode, settings)

    from agentlab.bench import executor

    if args.dry_run:
        limit = args.limit or None
        result = executor.dry_run(task, mode, settings, limit=limit, selection=_load_selection(task, settings))
        if args.json:
            _print_json(result, out)
        else:
            out.write(f"{task.name}/{mode} dry run (no model called): {result['cases']} cases"
                      + (f" of {result['loaded']} loaded" if result.get("loaded") is not None else "") + "\n")
            out.write(f"  avg prompt tokens {result['avg_prompt_tokens']:.2f}  (min {result['min_prompt_tokens']}, "
                      f"max {result['max_prompt_tokens']}, {result['prompts']} prompts, {result['encoding']})\n")
        return 0

    if args.retrieval_only:
        selection = _load_selection(task, settings)
        cases = executor.select(selection, args.limit or None)
        result = task.retrieval_only(cases, mode, settings)
        result = {"benchmark": task.name, "mode": mode, "cases": len(cases), **result}
        if args.json:
            _print_json(result, out)
        else:
            for key, value in result.items():
                out.write(f"{key}: {value}\n")
        return 0

    from agentlab.bench.judge import Judge

    notes = out if not args.json else sys.stderr
    limit, smoke = _resolve_limit(args, model_spec)
    judge_spec = args.judge_model or settings.get("judge", "model") or model_spec
    judge_enabled = bool(settings.get("judge", "enabled", True))
    concurrency = args.concurrency or int(settings.get("run", "concurrency", 4))
    modes = [mode] if args.no_baselines else comparison_modes(task, mode)
    for compared in modes[:-1]:  # the baseline and lossy runs use the same settings
        _check_policies(task, compared, settings)
    chosen = executor_from_args(args)  # flag errors stop the run before anything is stored
    # Every check that can stop the run happens here, before the results file is touched.
    model = _build_model(model_spec, "--model", args.context_window)
    info = _prepare_model(model, model_spec, "--model", window=True)
    judge = None
    if judge_enabled:
        judge_model = model
        if judge_spec != model_spec:
            judge_model = _build_model(judge_spec, "--judge-model")
            _prepare_model(judge_model, judge_spec, "--judge-model", window=False)
        judge = Judge(judge_model, judge_spec)
    selection, rule = _choose_cases(task, settings, model, args, smoke, notes)
    requests = [executor.RunRequest(
        benchmark=task.name, mode=m, model_spec=model_spec, settings=settings,
        judge_spec=judge_spec if judge_enabled else None, limit=limit if rule is None else None,
        concurrency=concurrency, smoke_test=smoke, progress=not args.no_progress, code_version=code_version(),
        # Remote workers build their own models (executor.build_models): the same window for them.
        model_options={} if args.context_window is None else {"context_window": args.context_window},
        variant=args.variant, variant_settings=variant_diff)
        for m in modes]
    store = ResultStore(args.db)
    notes.write(f"{task.name}/{', '.join(modes)}: model {model_spec}, context window {info.context_window} tokens "
                f"({info.context_window_source or 'stated by the model'})\n")
    executor_notes = getattr(chosen, "notes", None)
    if executor_notes is not None:
        for line in executor_notes.info:
            notes.write(f"  {line}\n")
        for line in executor_notes.warnings:
            sys.stderr.write(f"{line}\n")
    try:
        summaries = asyncio.run(run_with_baselines(task, requests, model=model, store=store, judge=judge,
                                                   selection=selection, executor=chosen))
    except (KeyboardInterrupt, asyncio.CancelledError):
        marks = ", ".join("?" for _ in modes)
        rows = store.query("SELECT r.mode, c.run_id, count(*) FILTER (WHERE c.status = 'ok'), count(*) FROM cases c "
                           "JOIN runs r ON r.run_id = c.run_id WHERE r.status = 'interrupted' AND r.benchmark = ? "
                           f"AND r.mode IN ({marks}) GROUP BY ALL", [task.name, *modes])
        stored = ", ".join(f"{r[2]} ok of {r[3]} stored in {r[0]} run {r[1]}" for r in rows) or "nothing stored"
        sys.stderr.write(f"\ninterrupted: {stored}. Rerun the same command to finish the missing cases.\n")
        store.close()
        return 130
    means = {s.run_id: _run_means(store, s.run_id) for s in summaries}
    store.close()
    workers = list(getattr(chosen, "started", []))
    runs = [{"benchmark": task.name, "mode": r.mode, "model": model_spec, "judge_model": r.judge_spec,
             "variant": r.variant_label, "variant_settings": variant_diff,
             "context_window": info.context_window, "context_window_source": info.context_window_source,
             "smoke_test": smoke, "db": str(args.db), **s.to_dict(), "scores": _records(means[s.run_id]),
             "executor": chosen.name, "workers": workers}
            for r, s in zip(requests, summaries, strict=True)]
    if args.json:
        payload: dict[str, Any] = {**runs[-1], "selection": rule or "published"}
        if len(runs) > 1:
            payload["runs"] = runs
            payload["report"] = _report_payload(task.name, args.db)
        _print_json(payload, out)
        return 0
    if smoke:
        _banner(SMOKE_LABEL, out)
    for r, s in zip(requests, summaries, strict=True):
        _write_run_summary(task.name, r.mode, s, means[s.run_id], out)
    if workers:
        out.write(f"  executor: {chosen.name}, {len(workers)} worker{'s' if len(workers) != 1 else ''} "
                  f"({', '.join(workers)})\n")
    if len(modes) > 1:
        _write_report(_report_payload(task.name, args.db, frames=True), out, sections=COMPARISON_SECTIONS)
    else:
        out.write(f"  stored in {args.db}; `python -m agentlab.bench report {task.name}` builds the tables\n")
    return 0


def comparison_modes(task: Task, mode: str) -> list[str]:
    """The modes a run of ``mode`` is compared with, then ``mode``: baseline [, lossy], mode.

    A recovered mode needs its baseline and its lossy mode (recovery); any other non-baseline
    mode needs the baseline (token savings, quality loss); the baseline needs nothing.
    """
    roles = task.roles()
    if roles is None or mode == roles.baseline or roles.baseline not in task.modes:
        return [mode]
    modes = [roles.baseline]
    if mode == roles.recovered and roles.lossy and roles.lossy in task.modes:
        modes.append(roles.lossy)
    return [*modes, mode]


async def run_with_baselines(task: Task, requests: Sequence[Any], *, model: Any, store: ResultStore,
                             judge: Any = None, selection: Any = None, executor: Any = None) -> list[Any]:
    """Run (or resume) each request's mode on the same cases, one after another; their summaries.

    These are ordinary runs: the baseline a ``recall`` run brings along has the same id as the
    one ``--mode long_context`` makes with the same settings, so either command reuses the other's
    stored cases, and the call cache replays any request already made. ``executor`` runs the cases
    (default in-process; it is not part of the run id). SIGTERM (a CI timeout, ``kill``) stops the
    runs as cleanly as Ctrl-C does.
    """
    from agentlab.bench.executor import run_task

    main_task = asyncio.current_task()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        if main_task is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    selection = selection or task.load_cases(requests[0].settings)
    try:
        return [await run_task(task, request, model=model, store=store, judge=judge, selection=selection,
                               executor=executor)
                for request in requests]
    finally:
        # An HTTP client must close in the loop that opened it: left to the garbage collector, it
        # would try to close during a later asyncio.run (the next sweep point) and print a traceback.
        await _close_clients(model, getattr(judge, "model", None))


async def _close_clients(*models: Any) -> None:
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


def _choose_cases(task: Task, settings: Any, model: Any, args: argparse.Namespace, smoke: bool,
                  out: TextIO) -> tuple[Any, str | None]:
    """The published selection, or on the embedded model without ``--limit`` the demo selection.

    Returns the selection and the rule to store with the runs (``None`` = published).
    """
    from agentlab.bench.selection import FITS_WINDOW_RULE, model_prompt_counter, select_fitting

    selection = _load_selection(task, settings)
    if not (smoke and args.limit is None):
        return selection, None
    window = int(getattr(model.info, "context_window", 0) or 0)
    roles = task.roles()
    if not window or roles is None:
        _banner(f"embedded model without --limit: running the first {EMBEDDED_DEFAULT_LIMIT} published cases "
                "(pass --limit 0 for all)", out)
        return _limited(selection, EMBEDDED_DEFAULT_LIMIT), None
    counter, counted_with = model_prompt_counter(model)
    try:
        fitting = select_fitting(task, selection, settings, window=window, limit=EMBEDDED_DEFAULT_LIMIT,
                                 counter=counter, counted_with=counted_with)
    except NotImplementedError:  # the task cannot plan its baseline prompts without a model
        fitting = None
    if fitting is None or not fitting.selection.cases:
        _banner(f"embedded model without --limit: no {task.name} case's {roles.baseline} prompt fits the "
                f"{window}-token window, so its baseline will fail `context_length`; running the first "
                f"{EMBEDDED_DEFAULT_LIMIT} published cases (pass --limit N to choose)", out)
        return _limited(selection, EMBEDDED_DEFAULT_LIMIT), None
    groups = {task.case_group(c) for c in fitting.selection.cases}
    _banner(f"DEMO SET, not the published selection: the embedded model's window is {window} tokens, so "
            f"{task.name} runs {len(fitting.selection.cases)} of the {fitting.fitting} cases (of {fitting.published} "
            f"published) whose {roles.baseline} prompt fits it (largest {fitting.max_prompt_tokens} "
            f"tokens, {counted_with}; {len(groups)} group(s) of shared context). Pass --limit N for the first N "
            "published cases, --limit 0 for all", out)
    return fitting.selection, FITS_WINDOW_RULE


def _limited(selection: Any, limit: int) -> Any:
    from agentlab.bench.tasks import CaseSelection

    return CaseSelection(list(selection.cases)[:limit], selection.dataset_sha256, selection.loaded, selection.note)


def _run_means(store: ResultStore, run_id: str) -> Any:
    """The run's mean scores (``RUN_MEANS_SQL``), or None for a run without scores (a baseline): its
    frame would be empty, and building it would import pandas, a quarter second of the run.
    """
    if not store.query("SELECT 1 FROM scores WHERE run_id = ? LIMIT 1", [run_id]):
        return None
    return store.df(RUN_MEANS_SQL, [run_id, run_id])


def _write_run_summary(benchmark: str, mode: str, summary: Any, means: Any, out: TextIO) -> None:
    out.write(f"{benchmark}/{mode} run {summary.run_id}: {summary.total_cases_ok} ok, {summary.failed} failed "
              f"this time, {summary.already_done} already done (of {summary.selected} selected)\n")
    if summary.errors:
        out.write("  failures by code: " + ", ".join(f"{k} {v}" for k, v in sorted(summary.errors.items())) + "\n")
    out.write(f"  tokens this time: {summary.prompt_tokens} prompt + {summary.completion_tokens} completion\n")
    if summary.prompt_tokens:
        processed = summary.processed_prompt_tokens
        out.write(f"  prompt tokens processed by the server: {processed} of {summary.prompt_tokens} sent "
                  f"({processed / summary.prompt_tokens:.1%}; {summary.replayed_prompt_tokens} replayed from the call "
                  f"cache, {summary.server_cached_prompt_tokens} reused from the server's prompt cache)\n")
    if means is not None and len(means):
        out.write("  mean scores of this run's cases (failed cases count 0; unscored ones are left out):\n")
        out.write("    " + means.to_string(index=False).replace("\n", "\n    ") + "\n")


def executor_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~agentlab.bench.executor.Executor` the flags ask for (a sweep passes it to every run)."""
    from agentlab.bench import executor

    if args.executor != "ray":
        for flag, value in (("--ray-address", args.ray_address), ("--workers", args.workers)):
            if value is not None:
                raise CliError(f"{flag} needs --executor ray")
        return executor.InProcessExecutor()
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be >= 1, got {args.workers}")
    from agentlab.bench.distributed import RayExecutor

    chosen = RayExecutor(args.ray_address, workers=args.workers)
    # What the run exposes is settled here, before anything is stored: a refusal is an ExecutorError.
    chosen.check()
    return chosen

