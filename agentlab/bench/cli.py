"""``python -m agentlab.bench``: run a benchmark mode, print a report, list benchmarks.

    python -m agentlab.bench <benchmark> [--mode MODE] [--limit N] [--model SPEC] [--judge-model SPEC]
                                         [--context-window N] [--concurrency K] [--db PATH] [--set section.field=value ...]
                                         [--dry-run] [--retrieval-only] [--json] [--no-progress]
                                         [--executor in-process|ray] [--ray-address ADDR] [--workers N]
    python -m agentlab.bench sweep <benchmark> --mode M --grid SECTION.FIELD=V1,V2 [--grid ...] [run flags]
    python -m agentlab.bench report <benchmark> [--db PATH] [--json] [--run ID] [--variant NAME]
                                    [--between VARIANT_A VARIANT_B]
    python -m agentlab.bench list [--json]
    python -m agentlab.bench fixture longmemeval PATH [--questions N] [--sessions N] [--turns N]

Published settings come from ``benchmarks/<benchmark>.toml``; flags and ``--set`` override them.
With the embedded model (the offline smoke-test model) and no ``--limit``, only the first 5 cases
run, and everything it produces is labelled a smoke test. ``--limit 0`` runs all cases.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from agentlab.bench.config import (
    MODE_ROLES,
    SettingsError,
    apply_overrides,
    apply_smoke,
    code_version,
    load_settings,
    settings_path,
    variant_settings,
)
from agentlab.bench.datasets.base import DatasetError
from agentlab.bench.distributed import ExecutorError
from agentlab.bench.store import DEFAULT_DB, RUN_MEANS_SQL, ResultStore
from agentlab.bench.tasks import Task, UnknownBenchmark, discover, get_task
from agentlab.duckdb_files import DatabaseFileError

#: What ``--variant NAME`` may contain (it is shown in tables and typed back into ``--variant``).
_VARIANT_NAME = re.compile(r"[A-Za-z0-9_.=;:+,-]+")
#: Values of --executor.
EXECUTORS = ("in-process", "ray")
#: Cases run with the embedded model when no --limit is given.
EMBEDDED_DEFAULT_LIMIT = 5
SMOKE_LABEL = ("SMOKE TEST: produced with the embedded SmolLM2-135M model; these numbers only show that the "
               "pipeline runs and are not comparable with published results.")


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


# ---------------------------------------------------------------------------------- parsers


def _run_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run one mode of a benchmark (resumable).")
    p.add_argument("benchmark")
    p.add_argument("--mode", help="mode (arm) to run; default: the benchmark's default mode")
    p.add_argument("--limit", type=int, default=None,
                   help=f"run the first N selected cases (0 = all; default all, {EMBEDDED_DEFAULT_LIMIT} on the embedded model)")
    p.add_argument("--model", help="answer model spec (e.g. embedded, openai:gpt-4o-mini); default from the environment")
    p.add_argument("--judge-model", help="judge model spec; default: [judge] model in the settings, else the answer model")
    p.add_argument("--context-window", type=int, default=None, metavar="N",
                   help="the answer model's context window in tokens (default: what its server states, else the "
                        "known-model table; a model neither knows stops the run)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="cases run at once (per worker with --executor ray; default [run] concurrency or 4)")
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"results DuckDB file (default {DEFAULT_DB})")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a setting from benchmarks/<benchmark>.toml (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="build every prompt and count tokens; call no model")
    p.add_argument("--retrieval-only", action="store_true", help="LLM-free evidence recall@k of the retrieval")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--published-settings", action="store_true",
                   help="with the embedded model, keep the published settings (skip the [smoke] settings)")
    p.add_argument("--variant", metavar="NAME",
                   help="name this run's variant (part of its id); default: the --set settings that differ "
                        "from the benchmark's file, e.g. summary.max_output_tokens=512, or 'default'")
    p.add_argument("--no-baselines", action="store_true",
                   help="run only --mode (by default a mode with a baseline first runs, or reuses, its baseline "
                        "and lossy modes on the same cases and ends with the comparison tables)")
    add_executor_args(p)
    return p


def add_executor_args(p: argparse.ArgumentParser) -> None:
    """``--executor``, ``--ray-address``, ``--workers``: where cases run (not part of the run id)."""
    p.add_argument("--executor", choices=EXECUTORS, default="in-process",
                   help="where cases run: in this process (default) or on Ray workers (pip install 'agentlab[ray]'); "
                        "the results land in --db either way and a run can be resumed with the other executor")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="join this Ray cluster ('auto' or HOST:PORT of `ray start --head`); default: a private "
                        "local Ray instance")
    p.add_argument("--workers", type=int, metavar="N",
                   help="Ray workers (one CPU each; each runs --concurrency cases at once); default: the cluster's CPUs")


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

    return RayExecutor(args.ray_address, workers=args.workers)


def _report_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{prog} report", description="Rebuild and print the derived tables.")
    p.add_argument("benchmark")
    p.add_argument("--db", type=Path, default=DEFAULT_DB)
    p.add_argument("--json", action="store_true")
    p.add_argument("--run", action="append", metavar="ID", help="only rows of this run (and its partners; repeatable)")
    p.add_argument("--variant", action="append", metavar="NAME", help="only rows of this variant (repeatable)")
    p.add_argument("--between", nargs=2, metavar=("A", "B"),
                   help="also compare variant B with variant A of each mode, paired on shared cases")
    return p


def _sweep_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{prog} sweep", allow_abbrev=False,  # unknown flags go to the runs: no prefix guessing
        description="Run one mode over the cartesian product of --grid settings, each point a resumable variant "
                    "run named by its settings; the baseline mode runs once first (skip with --no-baseline). "
                    "Interrupted and rerun, it finishes only what is missing.",
        epilog="Every other flag of a run (--limit, --model, --judge-model, --context-window, --concurrency, --db, "
               "--set for settings shared by every point, --published-settings, --json, --no-progress) is passed "
               "to each run.")
    p.add_argument("benchmark")
    p.add_argument("--mode", help="mode (arm) to sweep; default: the benchmark's default mode")
    p.add_argument("--grid", action="append", required=True, metavar="SECTION.FIELD=V1,V2[,...]",
                   help="a setting and its values (repeatable: the grid is the product)")
    p.add_argument("--no-baseline", action="store_true", help="do not run the baseline mode first")
    return p


def _list_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{prog} list", description="List the registered benchmarks.")
    p.add_argument("--json", action="store_true")
    return p


def _fixture_parser(prog: str) -> argparse.ArgumentParser:
    from agentlab.bench.datasets.longmemeval import QUESTION_TYPES

    p = argparse.ArgumentParser(
        prog=f"{prog} fixture",
        description="Write a small generated data file in a benchmark's real schema, for runs without the "
                    "real data (LongMemEval only: it cannot be downloaded everywhere). Run on it with "
                    "--set dataset.path=PATH.")
    p.add_argument("benchmark", choices=["longmemeval"])
    p.add_argument("path", type=Path, help="JSON file to write")
    p.add_argument("--questions", type=int, default=6, help="questions (default 6)")
    p.add_argument("--sessions", type=int, default=3, help="haystack sessions per question (default 3)")
    p.add_argument("--turns", type=int, default=4, help="turns per session (default 4)")
    p.add_argument("--question-type", action="append", dest="types", choices=QUESTION_TYPES,
                   help="question types to cycle through (repeatable; default all six)")
    return p


# ------------------------------------------------------------------------------------ helpers


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        try:
            return _jsonable(value.item())
        except (AttributeError, ValueError):
            pass
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _records(df: Any) -> list[dict[str, Any]]:
    if df is None or len(df) == 0:
        return []
    return [{k: _jsonable(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def _print_json(obj: Any, out: TextIO) -> None:
    out.write(json.dumps(obj, ensure_ascii=False, indent=1, default=str) + "\n")


def _banner(text: str, out: TextIO) -> None:
    line = "!" * min(100, max(40, len(text) + 8))
    out.write(f"{line}\n!!! {text}\n{line}\n")


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


# --------------------------------------------------------------------------------- commands


def cmd_fixture(args: argparse.Namespace, out: TextIO) -> int:
    from agentlab.bench.datasets.longmemeval import QUESTION_TYPES, write_longmemeval_fixture

    for flag, value in (("--questions", args.questions), ("--sessions", args.sessions), ("--turns", args.turns)):
        if value < 1:
            raise CliError(f"{flag} must be >= 1, got {value}")
    path = write_longmemeval_fixture(args.path, args.questions, sessions_per_question=args.sessions,
                                     turns_per_session=args.turns, question_types=args.types or QUESTION_TYPES)
    out.write(f"wrote {args.questions} GENERATED questions (not the LongMemEval data) to {path}\n"
              f"run on it with: python -m agentlab.bench longmemeval --set dataset.path={path}\n")
    return 0


def _grid_points(grid: Sequence[str], shared: Sequence[str]) -> list[list[str]]:
    """``["a.b=1,2", "c.d=x,y"]`` → the product as ``--set`` lists; a key given twice is an error."""
    axes: list[list[str]] = []
    keys: list[str] = []
    shared_keys = {a.split("=", 1)[0].strip() for a in shared}
    for item in grid:
        key, sep, raw = item.partition("=")
        key = key.strip()
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not sep or not key or not values:
            raise CliError(f"--grid {item!r}: expected section.field=v1,v2[,...]")
        if key in keys or key in shared_keys:
            raise CliError(f"--grid {key}: the setting is given twice (in --grid or --set); give it once")
        if len(set(values)) != len(values):
            raise CliError(f"--grid {item!r}: a value is listed twice")
        keys.append(key)
        axes.append([f"{key}={v}" for v in values])
    return [list(point) for point in itertools.product(*axes)]


def cmd_sweep(args: argparse.Namespace, run_flags: Sequence[str], out: TextIO) -> int:
    """Each grid point is an ordinary resumable run (``run_flags`` passed to each); the sweep stores
    nothing of its own."""
    import io

    task = get_task(args.benchmark)
    mode = args.mode or task.default_mode
    if mode not in task.modes:
        raise CliError(f"{task.name}: unknown mode {mode!r}; modes: {', '.join(task.modes)}")
    parser = _run_parser("python -m agentlab.bench")
    shared = parser.parse_args([task.name, "--mode", mode, *run_flags])
    for flag, used in (("--dry-run", shared.dry_run), ("--retrieval-only", shared.retrieval_only),
                       ("--variant", shared.variant is not None)):
        if used:
            raise CliError(f"sweep: {flag} is not for sweeps (each point's variant is named by its --grid settings)")
    points = _grid_points(args.grid, shared.overrides)
    for point in points:  # every point's settings are checked before the first model call
        apply_overrides(load_settings(task.name, task.default_settings()), [*shared.overrides, *point])
    roles = _all_roles().get(task.name)
    plan: list[tuple[str, list[str]]] = []
    if roles is not None and mode != roles.baseline and not args.no_baseline:
        plan.append((roles.baseline, []))
    plan += [(mode, [a for assignment in point for a in ("--set", assignment)]) for point in points]
    results = []
    for step, (step_mode, point_flags) in enumerate(plan, 1):
        buffer = io.StringIO()
        status = cmd_run(parser.parse_args([task.name, *run_flags, *point_flags, "--mode", step_mode, "--json",
                                            "--no-baselines"]), buffer)
        if status != 0:
            sys.stderr.write(f"sweep stopped at step {step} of {len(plan)} ({step_mode} "
                             f"{' '.join(point_flags[1::2]) or 'default'}); rerun the same command to finish the rest\n")
            return status
        run = json.loads(buffer.getvalue())
        results.append(run)
        if not shared.json:
            out.write(f"[{step}/{len(plan)}] {task.name}/{step_mode} variant {run['variant']} run {run['run_id']}: "
                      f"{run['already_done']} already stored, {run['ok']} ok and {run['failed']} failed now, "
                      f"of {run['selected']} selected\n")
    if shared.json:
        _print_json({"benchmark": task.name, "mode": mode, "grid": list(args.grid), "runs": results}, out)
    else:
        out.write(f"sweep done: {len(points)} variant(s) of {mode}; compare them with "
                  f"`python -m agentlab.bench report {task.name} --db {shared.db}`\n")
    return 0


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    tasks = discover()
    rows = []
    for name in sorted(tasks):
        cls = tasks[name]
        path = settings_path(name)
        rows.append({"benchmark": name, "modes": list(cls.modes), "default_mode": cls.default_mode,
                     "version": cls.version, "settings": str(path) if path.is_file() else None,
                     "description": cls.description})
    if args.json:
        _print_json({"benchmarks": rows}, out)
        return 0
    if not rows:
        out.write("no benchmarks registered\n")
    for r in rows:
        modes = ", ".join(m + (" (default)" if m == r["default_mode"] else "") for m in r["modes"])
        out.write(f"{r['benchmark']:<14} modes: {modes}\n")
        if r["description"]:
            out.write(f"{'':<14} {r['description']}\n")
    return 0


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
    means = {s.run_id: store.df(RUN_MEANS_SQL, [s.run_id, s.run_id]) for s in summaries}
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
    if len(means):
        out.write("  mean scores of this run's cases (failed cases count 0; unscored ones are left out):\n")
        out.write("    " + means.to_string(index=False).replace("\n", "\n    ") + "\n")


#: The report sections a run with baselines ends with (``report`` prints every section).
COMPARISON_SECTIONS = ("token_savings", "quality_loss", "recovery", "own")
_NO_ROWS = "(no rows: needs the baseline mode and the compared modes run on the same model)"


#: How runs meet in the report; printed with it and stored in its JSON (``rules``).
REPORT_RULES = (
    "Every run is its own row: a run is (benchmark, mode, model, judge, variant) on one dataset and task "
    "version, and its id is the hash of that configuration. --limit is not part of the id, so the same "
    "command with another --limit extends (or reuses the first cases of) the same run; nothing is replaced "
    "because a newer run exists. Each run is compared with the baseline-mode run of the same model, judge, "
    "data and task version whose variant settings are the largest subset of its own (baseline_variant), "
    "paired on the cases both hold (n_cases; n_pairs = pairs with both scores). Intervals: paired bootstrap "
    "95% (percentile), seeded; p-values: two-sided Wilcoxon signed-rank (stats_method, stats_seed; "
    "stats_note says why a value is empty). token_savings intervals are those of prompt_savings."
)


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    if not args.db.exists():
        raise CliError(f"no results database at {args.db}; run `python -m agentlab.bench {args.benchmark} ...` first")
    payload = _report_payload(args.benchmark, args.db, frames=True, between=args.between)
    runs = payload["runs"]
    run_ids = set(args.run) if args.run else None
    variants = set(args.variant) if args.variant else None
    if run_ids is not None:
        unknown = sorted(run_ids - set(runs["run_id"]))
        if unknown:
            raise CliError(f"--run {', '.join(unknown)}: no such run of {args.benchmark}; runs: "
                           f"{', '.join(runs['run_id'])}")
    known_variants = payload["variants"]
    for name in [*(variants or ()), *(args.between or ())]:
        if name not in known_variants:
            raise CliError(f"variant {name!r}: no run of {args.benchmark} has it; variants: {', '.join(known_variants)}")
    if run_ids is not None or variants is not None:
        shown = _narrow(runs, run_ids, variants, ("run_id",))
        partners = set(shown["run_id"]) | set(shown["baseline_run_id"].dropna()) | set(shown["lossy_run_id"].dropna())
        payload["runs"] = runs[runs["run_id"].isin(partners)]
        payload["scores"] = _narrow(payload["scores"], run_ids, variants, ("run_id",))
        for key in ("token_savings", "quality_loss", "recovery", "pareto"):
            payload[key] = _narrow(payload[key], run_ids, variants)
    if args.json:
        payload = {k: (_records(v.drop(columns=["config"]) if k == "runs" else v) if hasattr(v, "to_dict") else v)
                   for k, v in payload.items()}
        payload["benchmark_tables"] = {name: _records(df) for name, df in payload["benchmark_tables"].items()}
        _print_json(payload, out)
        return 0
    _write_report(payload, out)
    return 0


def _all_roles() -> dict[str, Any]:

    roles: dict[str, Any] = dict(MODE_ROLES)
    try:
        for name, cls in discover().items():
            task_roles = cls().roles()
            if task_roles is not None:
                roles[name] = task_roles
    except Exception:  # a broken task module must not prevent reporting stored results
        pass
    return roles


def _narrow(df: Any, run_ids: set[str] | None, variants: set[str] | None,
            id_columns: Sequence[str] = ("run_id", "baseline_run_id", "lossy_run_id")) -> Any:
    """Rows that involve one of ``run_ids`` (as the run or a partner) and are of one of ``variants``."""
    if df is None or len(df) == 0:
        return df
    keep = df.index == df.index
    if run_ids is not None:
        hit = df.index != df.index
        for column in id_columns:
            if column in df.columns:
                hit = hit | df[column].isin(run_ids)
        keep = keep & hit
    if variants is not None and "variant" in df.columns:
        keep = keep & df["variant"].isin(variants)
    return df[keep]


def _report_payload(benchmark: str, db: Path, frames: bool = False,
                    between: Sequence[str] | None = None) -> dict[str, Any]:
    """Rebuild the derived tables and read them back: DataFrames with ``frames``, else JSON records."""
    from agentlab.bench import analysis

    with ResultStore(db) as store:
        store.rebuild_derived(_all_roles())
        runs = analysis.runs_df(benchmark, store=store)
        if len(runs) == 0:
            raise CliError(f"no runs of {benchmark!r} in {db}")
        tables = {
            "runs": runs.drop(columns=["config"]) if not frames else runs,
            "scores": analysis.mode_means_df(benchmark, store=store),
            "token_savings": analysis.token_savings_df(benchmark, level="aggregate", store=store),
            "quality_loss": analysis.quality_loss_df(benchmark, store=store),
            "recovery": analysis.recovery_df(benchmark, store=store),
            "pareto": analysis.pareto_df(benchmark, store=store),
        }
        if between:
            tables["between"] = analysis.variant_comparison_df(benchmark, between[0], between[1], store=store)
        own = _benchmark_tables(benchmark, store)
    smoke = bool(runs["smoke_test"].fillna(False).any())
    head = {"benchmark": benchmark, "smoke_test": smoke, "smoke_label": SMOKE_LABEL if smoke else None, "db": str(db),
            "rules": REPORT_RULES, "variants": sorted(set(runs["variant"].fillna("legacy")))}
    if frames:
        return {**head, **tables, "benchmark_tables": own}
    return {**head, **{k: _records(v) for k, v in tables.items()},
            "benchmark_tables": {name: _records(df) for name, df in own.items()}}


def _write_report(payload: dict[str, Any], out: TextIO, sections: Sequence[str] | None = None) -> None:
    """Print a :func:`_report_payload` (made with ``frames=True``): every section, or ``sections``."""
    shown = set(sections) if sections is not None else None

    def section(key: str, title: str, df: Any, columns: list[str]) -> None:
        if shown is not None and key not in shown:
            return
        out.write(f"\n== {title} ==\n")
        if df is None or len(df) == 0:
            out.write(_NO_ROWS + "\n")
            return
        picked = df[[c for c in columns if c in df.columns]]
        out.write(picked.to_string(index=False, float_format=lambda v: f"{v:.4f}") + "\n")

    if payload["smoke_test"] and shown is None:
        _banner(SMOKE_LABEL, out)
    savings = payload["token_savings"]
    stats_columns = ["ci_low", "ci_high", "p_value", "n_pairs"]
    section("runs", "runs", payload["runs"],
            ["run_id", "mode", "variant", "model", "judge_model", "status", "n_ok", "n_failed", "smoke_test",
             "baseline_variant", "baseline_run_id", "started"])
    section("scores", "scores by mode and variant (failed cases count as 0)", payload["scores"],
            ["mode", "variant", "model", "metric", "mean", "n_cases", "n_failed", "n_unscored"])
    section("token_savings", "token_savings (answer-call prompt tokens vs baseline; interval of prompt_savings)",
            savings,
            ["mode", "variant", "baseline_variant", "n_cases", "n_baseline_estimated", "baseline_prompt_tokens",
             "mode_prompt_tokens", "prompt_savings", *stats_columns, "prompt_savings_ratio",
             "prompt_savings_with_summary", "total_savings", "total_savings_ratio", "mode_prompt_tokens_last",
             "prompt_savings_last", "published_token_rule"])
    savings_shown = shown is None or "token_savings" in shown
    if savings_shown and len(savings):
        out.write("prompt tokens of a case: summed over all its answer calls; *_last: its last answer call only. "
                  "published_token_rule names the one the published report uses (README, Token accounting)\n")
    if savings_shown and len(savings) and \
            savings.get("n_baseline_estimated") is not None and savings["n_baseline_estimated"].sum() > 0:
        out.write("n_baseline_estimated: baseline cases whose prompt did not fit the model's window; their prompt "
                  "tokens are the tokens the prompt needed (cl100k count), and total savings leave them out\n")
    section("quality_loss", "quality_loss (run vs its baseline run; failed cases count 0; interval of delta)",
            payload["quality_loss"],
            ["mode", "variant", "baseline_variant", "metric", "n_cases", "n_scored", "n_failed_baseline",
             "n_failed_mode", "baseline_mean", "mode_mean", "delta", *stats_columns, "relative_loss"])
    section("recovery", "recovery ((recovered - lossy) / (baseline - lossy))", payload["recovery"],
            ["variant", "lossy_variant", "metric", "n_cases", "n_failed_baseline", "baseline_mean", "lossy_mean",
             "recovered_mean", "recovery", *stats_columns, "n_baseline_ok", "recovery_baseline_ok", "wins", "losses",
             "ties"])
    section("pareto", "pareto (token savings vs quality loss per metric; on_frontier)", payload.get("pareto"),
            ["metric", "mode", "variant", "token_savings", "savings_ci_low", "savings_ci_high", "quality_loss",
             "loss_ci_low", "loss_ci_high", "on_frontier"])
    if payload.get("between") is not None:
        section("between", "between variants (B - A, paired on shared cases)", payload["between"],
                ["mode", "model", "metric", "variant_a", "variant_b", "mean_a", "mean_b", "delta", *stats_columns])
    notes = sorted({n for key in ("token_savings", "quality_loss", "recovery")
                    if (df := payload.get(key)) is not None and len(df) and "stats_note" in df
                    for n in df["stats_note"].dropna()})
    if notes and shown is None:
        out.write("\nempty intervals / p-values: " + " | ".join(notes) + "\n")
    recovery = payload["recovery"]
    if (shown is None or "recovery" in shown) and len(recovery) and \
            recovery.get("n_failed_baseline") is not None and recovery["n_failed_baseline"].sum() > 0:
        out.write("recovery: over all n_cases, failed baseline cases counting 0 (this can exceed 1); "
                  "recovery_baseline_ok: over the n_baseline_ok cases whose baseline answered\n")
    own = payload["benchmark_tables"]
    if shown is None or "own" in shown:
        for name, df in own.items():
            out.write(f"\n== {name} ({payload['benchmark']}'s own report table) ==\n")
            out.write(df.to_string(index=False, float_format=lambda v: f"{v:.4f}") + "\n" if len(df) else "(no rows)\n")
    tables = ", ".join(["token_savings", "quality_loss", "recovery", *own])
    if shown is None:
        out.write(f"\nhow runs are compared: {REPORT_RULES}\n")
    out.write(f"\ntables {tables} rebuilt in {payload['db']}\n")
    if payload["smoke_test"] and shown is not None:
        out.write(SMOKE_LABEL + "\n")


def _benchmark_tables(benchmark: str, store: ResultStore) -> dict[str, Any]:
    """A task's own report tables (``Task.report_tables``), also written to the store as ``<benchmark>_<name>``."""
    try:
        task = get_task(benchmark)
    except UnknownBenchmark:
        return {}
    build = getattr(task, "report_tables", None)
    if build is None:
        return {}
    tables = {f"{benchmark}_{name}": df for name, df in (build(store) or {}).items() if df is not None}
    for name, df in tables.items():
        if len(df.columns):
            store.write_frame(name, df)
    return tables


# ------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    out = out or sys.stdout
    prog = "python -m agentlab.bench"
    if not argv or argv[0] in {"-h", "--help"}:
        out.write(__doc__ or "")
        return 0 if argv else 2
    try:
        if argv[0] == "list":
            return cmd_list(_list_parser(prog).parse_args(argv[1:]), out)
        if argv[0] == "report":
            return cmd_report(_report_parser(prog).parse_args(argv[1:]), out)
        if argv[0] == "sweep":
            sweep_args, run_flags = _sweep_parser(prog).parse_known_args(argv[1:])
            return cmd_sweep(sweep_args, run_flags, out)
        if argv[0] == "fixture":
            return cmd_fixture(_fixture_parser(prog).parse_args(argv[1:]), out)
        return cmd_run(_run_parser(prog).parse_args(argv), out)
    except (CliError, SettingsError, UnknownBenchmark, DatasetError, FileNotFoundError, DatabaseFileError,
            ExecutorError) as exc:
        message = exc.args[0] if isinstance(exc, UnknownBenchmark | FileNotFoundError) and exc.args else str(exc)
        sys.stderr.write(f"error: {message}\n")
        return 2
