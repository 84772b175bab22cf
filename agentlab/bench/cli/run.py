"""``python -m agentlab.bench <benchmark>``: one mode's run, with its baselines, on the chosen cases.

The flags are resolved once into a :class:`~agentlab.bench.spec.RunSpec` (settings, modes, limit,
variant, budget: :mod:`agentlab.bench.spec`); this module carries it out: the models, the case
selection, the runs, and the run summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO, cast

from agentlab.bench.cli.common import (
    SMOKE_LABEL,
    CliError,
    frame_records,
    print_banner,
    print_json,
)
from agentlab.bench.cli.report import COMPARISON_SECTIONS, report_payload, write_report
from agentlab.bench.config import code_version, load_settings
from agentlab.bench.running.models import build_model, choose_cases, close_clients, prepare_model
from agentlab.bench.spec import (
    RunSpec,
    load_run_settings,
    load_selection,
    smoke_banner,
    spec_from_args,
    write_smoke_banner,
)
from agentlab.bench.store.results import DEFAULT_DB, RUN_MEANS_SQL, ResultStore
from agentlab.bench.tasks import Task

# ------------------------------------------------------------------------------- settings


def load_task_settings(task: Task, overrides: Sequence[str], smoke: bool = False, out: TextIO | None = None) -> Any:
    """Task defaults < settings file < (smoke settings, embedded model only) < ``--set``."""
    return _load_with_reference(task, overrides, smoke=smoke, out=out)[0]


def _load_with_reference(task: Task, overrides: Sequence[str], *, smoke: bool = False, embedded: bool = False,
                         out: TextIO | None = None) -> tuple[Any, Any]:
    """The run's settings and the reference its variant is named against (:func:`spec.load_run_settings`)."""
    settings, reference, changes = load_run_settings(task, overrides, smoke=smoke, embedded=embedded,
                                                     loader=load_settings)
    if changes and out is not None:
        print_banner(smoke_banner(task.name, changes), out)
    return settings, reference


# ---------------------------------------------------------------------------------- checks


def _check_unit(task: Task, args: argparse.Namespace) -> None:
    """``--unit`` / ``--retriever`` need ``--retrieval-only`` and a unit the benchmark's protocol knows."""
    units = tuple(getattr(task, "retrieval_units", ()))
    if args.retriever is not None and args.unit is None:
        raise CliError("--retriever applies with --unit (the published retrieval protocol)")
    if args.unit is not None and not args.retrieval_only:
        raise CliError("--unit applies with --retrieval-only")
    if args.unit is not None and args.unit not in units:
        known = f"use one of {', '.join(units)}" if units else "it has no published retrieval protocol"
        raise CliError(f"{task.name} --unit {args.unit!r}: {known}")


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    """Run (or resume) one mode and, unless ``--no-baselines``, the modes it is compared with.

    Also ``--dry-run`` (prompts and token counts, no model) and ``--retrieval-only``. The flags are
    resolved into one :class:`~agentlab.bench.spec.RunSpec` first (:func:`spec_from_args`); every
    check that can refuse the run happens before the results file is opened.
    """
    spec = spec_of(args)
    _check_unit(spec.task, args)
    if spec.action == "run":
        write_smoke_banner(spec, out if not args.json else sys.stderr)
    return run_spec(spec, out, json_output=args.json, db=args.db, executor_args=args,
                    unit=args.unit, retriever=args.retriever)


def spec_of(args: argparse.Namespace, task: Task | None = None) -> RunSpec:
    """The :class:`RunSpec` of the run command's flags (:func:`~agentlab.bench.spec.spec_from_args`).

    This module's ``load_settings`` and ``code_version`` are looked up at each call, so tests can
    point them at another settings folder or version. ``task``: the command's task, when it has
    one (a sweep's points share it and the arms it looked up).
    """
    return spec_from_args(args, loader=lambda name, schema: load_settings(name, schema),
                          version=lambda: code_version(), task=task)


def run_spec(spec: RunSpec, out: TextIO, *, json_output: bool = False, db: Any = DEFAULT_DB,
             executor_args: argparse.Namespace | None = None, unit: str | None = None,
             retriever: str | None = None) -> int:
    """Carry out a resolved :class:`RunSpec`: a dry run, a retrieval measurement, or the runs and their report.

    ``executor_args``: the ``--executor`` flags (default: in-process). ``unit`` / ``retriever``: the
    published retrieval protocol of ``--retrieval-only --unit`` (checked by the caller). Returns the
    exit status.
    """
    from agentlab.bench.running import executor

    task, mode, settings = spec.task, spec.mode, spec.settings
    if spec.action == "dry_run":
        result = executor.dry_run(task, mode, settings, limit=spec.limit, selection=load_selection(task, settings, spec.limit),
                                  context_budget=spec.context_budget, arm=spec.arm(mode))
        if json_output:
            print_json(result, out)
        else:
            out.write(f"{task.name}/{mode} dry run (no model called): {result['cases']} cases"
                      + (f" of {result['loaded']} loaded" if result.get("loaded") is not None else "")
                      + (f", context budget {spec.context_budget} tokens" if spec.context_budget is not None else "")
                      + "\n")
            out.write(f"  avg prompt tokens {result['avg_prompt_tokens']:.2f}  (min {result['min_prompt_tokens']}, "
                      f"max {result['max_prompt_tokens']}, {result['prompts']} prompts, {result['encoding']})\n")
            if result.get("context_budget_note"):
                out.write(f"  context budget {result['context_budget_note']}\n")
        return 0

    if spec.action == "retrieval_only":
        selection = load_selection(task, settings)
        cases = executor.select(selection, spec.limit)
        if unit is None:
            result = task.retrieval_only(cases, mode, settings)
        else:
            from agentlab.bench.store.retrieval_protocol import (
                format_comparison,
                format_protocol,
                write_protocol_result,
            )

            # Tasks with ``retrieval_units`` take the unit (checked by _check_unit); the base signature does not.
            try:
                result = cast(Any, task).retrieval_only(cases, mode, settings, unit=unit, retriever=retriever)
            except ValueError as exc:  # e.g. a data file without the unit's field, or no embedder
                raise CliError(f"{task.name} --unit {unit}: {exc}") from exc
            for measured in result.get("results", [result]):  # several retrievers, or one
                write_protocol_result(db, measured, task.name)
        result = {"benchmark": task.name, "mode": mode, "cases": len(cases), **result}
        if json_output:
            print_json(result, out)
        elif unit is not None:
            out.write(format_comparison(result) if "results" in result else format_protocol(result))
        else:
            for key, value in result.items():
                out.write(f"{key}: {value}\n")
        return 0

    from agentlab.bench.scoring.judge import Judge

    notes = out if not json_output else sys.stderr
    chosen = executor_from_args(executor_args) if executor_args is not None else executor.InProcessExecutor()
    # Every check that can stop the run happens here, before the results file is touched.
    model = build_model(spec.model_spec, "--model", spec.context_window_flag)
    info = prepare_model(model, spec.model_spec, "--model", window=True)
    judge = None
    if spec.judge_spec is not None:
        judge_model = model
        if spec.judge_spec != spec.model_spec:
            judge_model = build_model(spec.judge_spec, "--judge-model")
            prepare_model(judge_model, spec.judge_spec, "--judge-model", window=False)
        judge = Judge(judge_model, spec.judge_spec)
    selection, rule = choose_cases(task, settings, model, spec, notes)
    spec = spec.bind(info, selection.dataset_sha256)  # a budget above the window stops here
    # The demo selection is already cut to its cases; --limit is not part of the run id either way.
    requests = [r if rule is None else dataclasses.replace(r, limit=None) for r in spec.requests()]
    modes = list(spec.modes)
    store = ResultStore(db)
    notes.write(spec.header() + "\n")
    executor_notes = getattr(chosen, "notes", None)
    if executor_notes is not None:
        for line in executor_notes.info:
            notes.write(f"  {line}\n")
        for line in executor_notes.warnings:
            sys.stderr.write(f"{line}\n")
    try:
        summaries = asyncio.run(run_with_baselines(task, requests, model=model, store=store, judge=judge,
                                                   selection=selection, executor=chosen, arms=spec.arms))
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
    runs = [{"benchmark": task.name, "mode": r.mode, "model": spec.model_spec, "judge_model": r.judge_spec,
             "variant": r.variant_label, "variant_settings": dict(spec.variant_settings),
             "context_window": info.context_window, "context_window_source": info.context_window_source,
             "context_budget": spec.context_budget,
             "smoke_test": spec.smoke_test, "db": str(db), **s.to_dict(), "scores": frame_records(means[s.run_id]),
             "executor": chosen.name, "workers": workers}
            for r, s in zip(requests, summaries, strict=True)]
    if json_output:
        payload: dict[str, Any] = {**runs[-1], "selection": rule or "published"}
        if len(runs) > 1:
            payload["runs"] = runs
            payload["report"] = report_payload(task.name, db, task=task)
        print_json(payload, out)
        return 0
    if spec.smoke_test:
        print_banner(SMOKE_LABEL, out)
    for r, s in zip(requests, summaries, strict=True):
        _write_run_summary(task.name, r.mode, s, means[s.run_id], out)
    if workers:
        out.write(f"  executor: {chosen.name}, {len(workers)} worker{'s' if len(workers) != 1 else ''} "
                  f"({', '.join(workers)})\n")
    if len(modes) > 1:
        write_report(report_payload(task.name, db, frames=True, task=task), out, sections=COMPARISON_SECTIONS)
    else:
        out.write(f"  stored in {db}; `python -m agentlab.bench report {task.name}` builds the tables\n")
    return 0


async def run_with_baselines(task: Task, requests: Sequence[Any], *, model: Any, store: ResultStore,
                             judge: Any = None, selection: Any = None, executor: Any = None,
                             arms: Mapping[str, Any] | None = None) -> list[Any]:
    """Run (or resume) each request's mode on the same cases, one after another; their summaries.

    These are ordinary runs: the baseline a ``recall`` run brings along has the same id as the
    one ``--mode long_context`` makes with the same settings, so either command reuses the other's
    stored cases, and the call cache replays any request already made. ``executor`` runs the cases
    (default in-process; it is not part of the run id). ``arms``: mode -> arm as resolved (a
    :class:`~agentlab.bench.spec.RunSpec`'s; default: the task's). SIGTERM (a CI timeout, ``kill``)
    stops the runs as cleanly as Ctrl-C does.
    """
    from agentlab.bench.running.executor import run_task

    main_task = asyncio.current_task()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        if main_task is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    selection = selection or task.load_cases(requests[0].settings)
    try:
        return [await run_task(task, request, model=model, store=store, judge=judge, selection=selection,
                               executor=executor, arm=(arms or {}).get(request.mode))
                for request in requests]
    finally:
        # An HTTP client must close in the loop that opened it: left to the garbage collector, it
        # would try to close during a later asyncio.run (the next sweep point) and print a traceback.
        await close_clients(model, getattr(judge, "model", None))


class RunMeans:
    """A run's mean scores (``RUN_MEANS_SQL`` rows), shown like a DataFrame without importing pandas.

    Building a DataFrame here imported pandas after every run, a quarter second of a run's wall time.
    """

    COLUMNS = ("metric", "mean", "n_cases", "n_failed", "n_unscored")

    def __init__(self, rows: Sequence[Sequence[Any]]) -> None:
        self.rows = [dict(zip(self.COLUMNS, r, strict=True)) for r in rows]

    def __len__(self) -> int:
        return len(self.rows)

    def to_dict(self, orient: str = "records") -> list[dict[str, Any]]:
        """The rows as records (the only orientation :func:`frame_records` asks for)."""
        if orient != "records":
            raise ValueError(f"RunMeans.to_dict: only orient='records'; got {orient!r}")
        return [dict(r) for r in self.rows]

    def to_string(self, index: bool = False) -> str:
        """The rows as a right-aligned text table, the mean with six decimals."""
        cells = [list(self.COLUMNS)] + [[str(r["metric"]), "" if r["mean"] is None else f"{r['mean']:.6f}",
                                         *(str(r[c]) for c in self.COLUMNS[2:])] for r in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.COLUMNS))]
        return "\n".join(" ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in cells)


def _run_means(store: ResultStore, run_id: str) -> RunMeans | None:
    """The run's mean scores (``RUN_MEANS_SQL``), or None for a run without scores."""
    rows = store.query(RUN_MEANS_SQL, [run_id, run_id])
    return RunMeans(rows) if rows else None


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
    """The :class:`~agentlab.bench.running.executor.Executor` the flags ask for (a sweep passes it to every run)."""
    from agentlab.bench.running import executor

    if args.executor != "ray":
        for flag, value in (("--ray-address", args.ray_address), ("--workers", args.workers)):
            if value is not None:
                raise CliError(f"{flag} needs --executor ray")
        return executor.InProcessExecutor()
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be >= 1, got {args.workers}")
    from agentlab.bench.running.distributed import RayExecutor

    chosen = RayExecutor(args.ray_address, workers=args.workers)
    # What the run exposes is settled here, before anything is stored: a refusal is an ExecutorError.
    chosen.check()
    return chosen

