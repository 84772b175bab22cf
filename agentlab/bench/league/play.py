"""The league report: many arms of one benchmark against one baseline, on the same cases, in one process.

    from agentlab.bench.league.play import run_league
    result = run_league("qmsum", arms="all", limit=20, context_budget=8192, model="openai:m@http://…/v1")
    print(format_league(result))

A league is a set of ordinary runs: each arm is resolved through :func:`agentlab.bench.spec.resolve_run`
(so its run id is the one ``python -m agentlab.bench <benchmark> --arm NAME`` with the same flags
makes, and either command reuses the other's cases), then run with :func:`agentlab.bench.running.executor.run_task`
on ONE model object (one back end, one call cache), ONE case selection (the dataset is loaded once)
and ONE results store. The baseline is run once, first; a finished baseline (or arm) already in the
results file is reused — run_task skips every case stored ``ok`` — so an interrupted league resumes
where it stopped, and an arm whose cases are all stored costs no call.

The table is computed from the stored cases and calls of exactly these runs, on the league's cases
(not from the report's pairing, which may pick another baseline variant):

* ``n_ok`` / ``n_failed``: the arm's cases by status; a failed case is counted, never dropped, and
  scores 0 in the quality columns (an unscored ok case, e.g. a judge parse failure, is left out);
* ``prompt_savings``: mean over the cases ok in both runs of ``(baseline − arm) / baseline`` answer
  prompt tokens (all ``answer`` calls of the case summed), with its bootstrap interval;
* ``peak_prompt_tokens_mean`` / ``_max``: the largest single answer-call prompt of a case (ACON's
  peak context), mean and max over the arm's ok cases;
* ``summary_calls`` / ``summary_tokens``: per ok case, mean number of ``summary`` calls and their
  prompt + completion tokens;
* ``delta`` per metric: mean of ``arm − baseline`` per case with the paired 95 % interval and the
  Wilcoxon p-value (:func:`agentlab.bench.scoring.stats.paired_difference`);
* ``recovery`` (recovered arms): ``(recovered − lossy) / (baseline − lossy)`` with its interval
  (:func:`agentlab.bench.scoring.stats.recovery_ratio`); ``None`` unless the lossy arm scores below the
  baseline by more than 1 % of the baseline's mean (:mod:`agentlab.bench.scoring.recovery_rule`: nothing to
  recover — a lossy arm above the baseline lost nothing — printed ``n/a`` with the reason);
* ``pareto``: on the frontier of (prompt savings ↑, quality loss = −delta ↓) among the baseline
  and every arm, per metric (:func:`agentlab.bench.scoring.stats.pareto_front`: equal points do not
  dominate each other, so ties are all on it; an arm without a savings or delta is off it);
* ``cached_tokens`` … ``net_cost_usd``: the answer calls' provider-reported prompt cache and cost per case
  (:mod:`agentlab.bench.scoring.call_costs`; printed, in ``--json``, not stored in ``league_rows``);
* ``evidence_kept``: the mean LLM-free ``retained`` fraction of the ``retention`` table
  (``python -m agentlab.bench retention``) for this benchmark, turn delivery, the league's
  mechanism window and arm name, over the league's cases that have a row; ``None`` when none has.

The result is stored in two tables of the results file: ``leagues`` (one row per league id, the
hash of its runs and cases) and ``league_rows`` (one row per arm × metric, the columns of
:data:`LEAGUE_COLUMNS`); :func:`agentlab.bench.analysis.league_df` reads them back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import agentlab.policies.arms as arms_mod
from agentlab.bench.config import config_hash
from agentlab.bench.league.store import COLUMN_NAMES, LEAGUE_COLUMNS, read_league
from agentlab.bench.league.table import (
    LEAGUE_VERSION,
    PRIMARY_METRICS,
    RECOVERY_GAP,
    RECOVERY_RELATIVE_GAP,
    LeagueArm,
    LeagueResult,
    compute_rows,
    format_league,
    mark_pareto,
    pick_metric,
    recovery_of,
    write_league,
)
from agentlab.bench.spec import RunSpec, is_embedded, load_selection, resolve_run
from agentlab.bench.store.results import DEFAULT_DB, ResultStore
from agentlab.bench.tasks import Task, Unsupported, get_task
from agentlab.bench.usage import EMBEDDED_DEFAULT_LIMIT, UsageError

# ------------------------------------------------------------------------------------ arm choice


def choose_arms(task: Task, names: str, *, recall: bool = False, seeding: str | None = None) -> tuple[list[str], dict[str, str], str]:
    """The arms a league runs (without the baseline), the ones left out with the reason, and the rule.

    ``all``: every generic arm registered as lossy that applies to the task (the peer policies and
    ``rolling_summary``), then the task's own non-baseline modes (its published lossy and
    recovered conditions, e.g. QMSum's ``summary`` and ``recall``); with ``--seeding lived`` the
    task's modes are left out (they seed their own way). ``recall`` adds ``<arm>+recall`` after
    every lossy generic arm. Naming ``x+recall`` brings its partner ``x`` along (recovery needs it).
    Unknown names are a :class:`UsageError` listing the known arms.
    """
    roles = task.roles()
    if roles is None:
        raise UsageError(f"{task.name} has no baseline mode to compare arms with, so a league does not apply")
    baseline = roles.baseline
    lived = seeding == "lived"
    skipped: dict[str, str] = {}
    chosen: list[str] = []
    if names.strip() == "all":
        generic = [n for n, a in arms_mod.ARMS.items() if a.role == "lossy" and task.has_arm(n)]
        for n, a in arms_mod.ARMS.items():
            if a.role == "lossy" and not task.has_arm(n):
                skipped[n] = arms_mod._inapplicable(task, n) or "does not apply"
        own = [m for m in task.modes if m != baseline]
        chosen = list(generic)
        if lived:
            skipped.update({m: f"{task.name}'s {m} mode seeds its own way (--seeding lived is for generic arms)"
                            for m in own})
        else:
            chosen += own
        rule = ("all: every lossy generic arm (peer policies, rolling_summary)"
                + ("" if lived else f" and {task.name}'s own modes ({', '.join(own) or 'none'})")
                + (", each lossy generic arm with +recall" if recall else ""))
    else:
        chosen = [n.strip() for n in names.split(",") if n.strip()]
        if not chosen:
            raise UsageError("--arms: name at least one arm, or 'all'")
        rule = "named with --arms" + (", each lossy generic arm with +recall" if recall else "")
    out: list[str] = []
    for name in chosen:
        if name == baseline:
            continue  # the baseline runs anyway
        try:
            arm = task.arm(name)
        except LookupError as exc:
            raise UsageError(f"--arms: {exc.args[0]}") from exc
        if lived and not arm.generic:
            raise UsageError(f"--arms {name}: {task.name}'s {name} mode seeds its own way; --seeding lived is for "
                           "generic arms (leave it out, or drop --seeding lived)")
        if arm.role == "recovered" and arm.partner and arm.partner not in out and arm.partner != baseline:
            out.append(arm.partner)
        if name not in out:
            out.append(name)
        if recall and arm.generic and arm.role == "lossy":
            recalled = name + arms_mod.RECALL_SUFFIX
            if task.has_arm(recalled) and recalled not in out:
                out.append(recalled)
    if not out:
        raise UsageError(f"--arms {names}: no arm besides the baseline {baseline!r} to compare")
    return out, skipped, rule


# ------------------------------------------------------------------------------------ evidence kept

def llm_free_arm(task: Task, name: str) -> Any:
    """Arm ``name`` as the retention measurement runs it when its mechanisms need no model (else ``None``).

    The baseline is the full history (no mechanism); a generic arm needs a model when it (or, for
    ``x+recall``, ``x``) summarises (``Arm.needs_model``). A task's other modes run their own code: not measured.
    """
    roles = task.roles()
    if roles is not None and name == roles.baseline:
        return arms_mod.full_history_arm(name)
    arm = task.arm(name)
    return arm if arm.generic and not arm.needs_model else None


async def measure_evidence(task: Task, cases: Sequence[Any], settings: Any, names: Sequence[str], budget: int,
                           store: ResultStore, code_version: str = "") -> tuple[list[str], float]:
    """Measure and store (``retention`` table, turn delivery) the LLM-free retention of ``names`` on ``cases``.

    An arm whose rows for every case are already stored (same budget, same retention version) is
    not measured again. Returns the arms measured and the seconds it took; no model is called. The
    task measures (:meth:`~agentlab.bench.tasks.Task.retention`); a task without retention measures nothing.
    """
    from agentlab.bench.retention import questions as retention
    from agentlab.bench.store.retention import write_retention

    started = time.perf_counter()
    stored: dict[str, set[str]] = {}
    if store.has_table("retention"):
        for arm, case_id in store.query(
                "SELECT arm, case_id FROM retention WHERE benchmark = ? AND delivery = 'turns' AND context_budget = ? "
                "AND retention_version = ?", [task.name, budget, retention.RETENTION_VERSION]):
            stored.setdefault(arm, set()).add(case_id)
    wanted = {c.id for c in cases}
    chosen = []
    for name in names:
        arm = llm_free_arm(task, name)
        if arm is not None and not wanted <= stored.get(name, set()):
            chosen.append(arm)
    if store.path is None:
        return [], 0.0
    if not chosen or not task.has_evidence_rows():
        return [], 0.0
    rows = await task.retention(cases, chosen, settings, delivery="turns", context_window=budget)
    write_retention(store.path, rows, benchmark=task.name, chunk_turns=None, context_budget=budget,
                    code_version=code_version)
    return [a.name for a in chosen], time.perf_counter() - started


# ------------------------------------------------------------------------------------ running


def _check_baseline_fits(task: Task, cases: Sequence[Any], settings: Any, window: int, model_spec: str,
                         demo_possible: bool, notes: TextIO | None = None) -> None:
    """Refuse a league whose baseline prompts do not fit the model's window (it would compare with failures).

    Counted with the cl100k estimate (a smaller-vocabulary tokenizer does not encode English in
    fewer tokens, see :func:`agentlab.bench.running.selection.select_fitting`): a case the estimate lets
    through and the server still refuses is stored as a failed case and counted in the table.
    """
    from agentlab.bench.running.selection import baseline_prompts
    from agentlab.model import tokens

    if not task.model_answers:  # a replay: the model never answers the baseline's prompts
        if notes is not None:
            notes.write(f"  ({task.name} replays recorded steps: the model answers none of its prompts, so they are "
                        f"not checked against the {window}-token window)\n")
        return
    answer = int(settings.get("answer", "max_tokens", 0) or 0)
    too_long = []
    for case in cases:
        try:
            prompts = baseline_prompts(task, case, settings)
        except Unsupported:  # no dry run: the baseline's prompts are known only once it runs
            if notes is not None:
                notes.write(f"  ({task.name} has no dry run, so its baseline prompts are not checked against the "
                            f"{window}-token window before the run)\n")
            return
        if prompts:
            need = max(tokens.count_messages(p) for p in prompts) + answer
            if need > window:
                too_long.append(need)
    if not too_long:
        return
    roles = task.roles()
    assert roles is not None
    fix = ("drop --limit to run the embedded model's demo set (the cases whose baseline fits its window), "
           "or --fitting to take the first N such cases" if demo_possible else
           "pass --fitting to take only the cases whose baseline fits, or a model with a larger window")
    raise UsageError(f"{len(too_long)} of {len(cases)} selected {task.name} cases need a {roles.baseline} prompt over "
                   f"the model {model_spec}'s {window}-token window (largest {max(too_long)} tokens with "
                   f"{answer} answer tokens, cl100k estimate): the baseline would fail and every arm would be "
                   f"compared with failures; {fix}")


async def arun_league(benchmark: str, *, arms: str = "all", recall: bool = False, model: str | None = None,
                      model_object: Any = None, limit: int | None = None, context_budget: int | None = None,
                      context_window: int | None = None, seeding: str | None = None, judge_model: str | None = None,
                      overrides: Sequence[str] = (), db: str | Path | None = DEFAULT_DB,
                      store: ResultStore | None = None, concurrency: int | None = None, progress: bool = True,
                      metric: str | None = None, fitting: bool = False, selection: Any = None,
                      published_settings: bool = False, evidence: bool = True,
                      notes: TextIO | None = None) -> LeagueResult:
    """Run (or resume) the baseline and every arm of a league, compute, store and return its table.

    ``model``: the answer model spec (default: the environment's); ``judge_model``: the judge's, as
    ``run --judge-model`` (default ``[judge] model``, else the answer model); ``model_object``: an
    already built model to use instead (a test's scripted model; ``model`` is then only its label).
    ``selection``: the cases (default: the task's published selection, loaded once). ``fitting``:
    take the first ``limit`` (default :data:`EMBEDDED_DEFAULT_LIMIT`) cases whose baseline prompt
    fits the model's window. ``evidence``: measure the LLM-free evidence kept of the arms that need
    no model first (:func:`measure_evidence`; stored in the ``retention`` table). ``notes``: where
    progress lines go (default stderr).
    Every user error is a :class:`UsageError` raised before anything is stored.
    """
    from agentlab.bench.running.executor import run_task, select
    from agentlab.bench.running.models import build_model, choose_cases, close_clients, prepare_model
    from agentlab.model.base import observe_calls

    started = time.perf_counter()
    notes = notes or sys.stderr
    main_task = asyncio.current_task()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        if main_task is not None:  # SIGTERM (a CI timeout, kill) stops the league as cleanly as Ctrl-C
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    task = get_task(benchmark)
    names, skipped, rule = choose_arms(task, arms, recall=recall, seeding=seeding)
    roles = task.roles()
    assert roles is not None

    def resolve(mode: str) -> RunSpec:
        return resolve_run(benchmark, mode=mode, model=model, limit=limit, context_window=context_window,
                           context_budget=context_budget, overrides=overrides, concurrency=concurrency,
                           progress=progress, seeding=seeding if task.arm(mode).generic else None,
                           published_settings=published_settings, judge_model=judge_model, task=task)

    specs = {name: resolve(name) for name in names}
    first = specs[names[0]]
    settings = first.settings
    if metric is not None and not metric.strip():
        raise UsageError("--metric: give a metric name")
    if model_object is not None:
        built = model_object
        info = built.info
    else:
        built = build_model(first.model_spec, "--model", context_window)
        info = prepare_model(built, first.model_spec, "--model", window=True)
    judge = None
    if first.judge_spec is not None:
        from agentlab.bench.scoring.judge import Judge

        judging = built
        if first.judge_spec != first.model_spec and model_object is None:
            judging = build_model(first.judge_spec, "--judge-model")
            prepare_model(judging, first.judge_spec, "--judge-model", window=False)
        judge = Judge(judging, first.judge_spec)
    rule_name: str | None = None
    if selection is None and fitting:
        from agentlab.bench.running.selection import FITS_WINDOW_RULE, model_prompt_counter, select_fitting
        from agentlab.model.window import resolve_context_window

        window = resolve_context_window(built) or int(info.context_window or 0)
        counter, counted_with = model_prompt_counter(built)
        fitted = select_fitting(task, load_selection(task, settings), settings, window=window,
                                limit=limit or EMBEDDED_DEFAULT_LIMIT, counter=counter, counted_with=counted_with)
        if not fitted.selection.cases:
            raise UsageError(f"--fitting: no {task.name} case's {roles.baseline} prompt fits the {window}-token window")
        selection, rule_name = fitted.selection, FITS_WINDOW_RULE
        notes.write(f"{fitted.selection.note}\n")
    elif selection is None:
        selection, rule_name = choose_cases(task, settings, built, first, notes)
    bound = {name: spec.bind(info, selection.dataset_sha256) for name, spec in specs.items()}
    run_limit = None if rule_name is not None else first.limit
    cases = select(selection, run_limit)
    if not cases:
        raise UsageError(f"{task.name}: no case selected (check --limit and the settings)")
    if info.context_window:
        _check_baseline_fits(task, cases, settings, int(info.context_window), first.model_spec,
                             demo_possible=is_embedded(first.model_spec) and limit is not None and not fitting,
                             notes=notes)

    # The runs in order: the baseline once, then each arm (a recovered arm after its partner).
    league_arms: list[LeagueArm] = []
    requests: dict[str, Any] = {}
    run_arms: dict[str, Any] = {}  # run id -> the arm its spec resolved
    baseline_id = ""
    for name in names:
        spec = bound[name]
        ids = spec.run_ids()
        baseline_id = baseline_id or ids[roles.baseline]
        if ids[roles.baseline] != baseline_id:
            raise UsageError(f"arm {name}: its baseline run {ids[roles.baseline]} differs from the league's "
                           f"{baseline_id} (the arms' settings differ); run them in separate leagues")
        for mode in spec.modes:
            if ids[mode] not in requests:
                request = spec.request(mode)
                requests[ids[mode]] = dataclasses.replace(request, limit=run_limit)
                run_arms[ids[mode]] = spec.arm(mode)
        arm = spec.arm(name)
        league_arms.append(LeagueArm(name, arm.role, arm.partner, ids[name], spec))
    header = bound[names[0]]
    budget_line = (f", context budget {header.context_budget} tokens" if header.context_budget is not None
                   else ", no context budget (the mechanisms see the model's window)")
    notes.write(f"league {task.name}: {len(league_arms)} arms + baseline {roles.baseline} on {len(cases)} cases; "
                f"model {header.model_spec}, window {header.context_window} tokens{budget_line}, "
                f"seeding {seeding or 'forced'}\n")
    own_store = store is None
    active = store if store is not None else ResultStore(db)
    calls = {"sent": 0, "replayed": 0}
    runs: dict[str, dict[str, Any]] = {}

    def count(record: Any) -> None:
        calls["replayed" if record.cache_hit else "sent"] += 1

    try:
        if evidence and task.has_evidence_rows():
            measured, took = await measure_evidence(task, cases, settings, [roles.baseline, *names],
                                                    header.mechanism_window, active, header.code_version)
            if measured:
                notes.write(f"  evidence kept measured without a model for {len(measured)} arms in {took:.1f} s "
                            f"(retention table, turn delivery, budget {header.mechanism_window})\n")
        with observe_calls(count):
            for run_id, request in requests.items():
                before = dict(calls)
                summary = await run_task(task, request, model=built, store=active, judge=judge, selection=selection,
                                         arm=run_arms[run_id])
                runs[run_id] = {"mode": request.mode, "cases_run_now": summary.attempted,
                                "cases_reused": summary.already_done, "failed_now": summary.failed,
                                "calls_sent": calls["sent"] - before["sent"],
                                "calls_replayed": calls["replayed"] - before["replayed"]}
                notes.write(f"  {request.mode}: run {run_id}, {summary.attempted} cases run now "
                            f"({summary.failed} failed), {summary.already_done} reused from the results file, "
                            f"{runs[run_id]['calls_sent']} model calls sent\n")
        reused = runs[baseline_id]["cases_run_now"] == 0
        baseline_source = (f"reused run {baseline_id} (all {len(cases)} cases already stored)" if reused else
                           f"run now as {baseline_id} ({runs[baseline_id]['cases_run_now']} cases answered, "
                           f"{runs[baseline_id]['cases_reused']} reused)")
        case_ids = [c.id for c in cases]
        league_id = config_hash({"league": LEAGUE_VERSION, "benchmark": task.name, "baseline": baseline_id,
                                 "arms": {a.name: a.run_id for a in league_arms}, "cases": case_ids})
        rows = compute_rows(active, task.name, league_id, baseline_id, roles.baseline, league_arms, case_ids,
                            metric=None, mechanism_window=header.mechanism_window)
        primary, source = pick_metric(rows, metric)
        mark_pareto(rows)
        result = LeagueResult(
            league_id=league_id, benchmark=task.name, model=header.model_spec,
            context_window=header.context_window, context_window_source=header.context_window_source,
            context_budget=header.context_budget, mechanism_window=header.mechanism_window,
            seeding=seeding or "forced", limit=run_limit if rule_name is None else len(cases), case_ids=case_ids,
            selection=rule_name or "published", baseline=roles.baseline, baseline_run_id=baseline_id,
            baseline_source=baseline_source, primary_metric=primary, primary_metric_source=source,
            arms=league_arms, skipped=skipped, rows=rows, smoke_test=header.smoke_test, calls_made=calls["sent"],
            calls_replayed=calls["replayed"],
            seconds=time.perf_counter() - started, arm_choice=rule, runs=runs)
        write_league(active, result, code_version=header.code_version)
        return result
    finally:
        if own_store:
            active.close()
        if model_object is None:
            await close_clients(built, getattr(judge, "model", None))


def run_league(benchmark: str, **kwargs: Any) -> LeagueResult:
    """:func:`arun_league` from synchronous code (also inside Jupyter's running loop)."""
    from agentlab.bench.running.loops import run_sync

    return run_sync(arun_league(benchmark, **kwargs))


__all__ = [
    "LEAGUE_VERSION",
    "PRIMARY_METRICS",
    "RECOVERY_GAP",
    "RECOVERY_RELATIVE_GAP",
    "recovery_of",
    "COLUMN_NAMES",
    "LEAGUE_COLUMNS",
    "LeagueArm",
    "LeagueResult",
    "arun_league",
    "choose_arms",
    "compute_rows",
    "format_league",
    "mark_pareto",
    "pick_metric",
    "read_league",
    "run_league",
    "write_league",
]
