"""The league report: many arms of one benchmark against one baseline, on the same cases, in one process.

    from agentlab.bench.league import run_league
    result = run_league("qmsum", arms="all", limit=20, context_budget=8192, model="openai:m@http://…/v1")
    print(format_league(result))

A league is a set of ordinary runs: each arm is resolved through :func:`agentlab.bench.spec.resolve_run`
(so its run id is the one ``python -m agentlab.bench <benchmark> --arm NAME`` with the same flags
makes, and either command reuses the other's cases), then run with :func:`agentlab.bench.executor.run_task`
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
  Wilcoxon p-value (:func:`agentlab.bench.stats.paired_difference`);
* ``recovery`` (recovered arms): ``(recovered − lossy) / (baseline − lossy)`` with its interval
  (:func:`agentlab.bench.stats.recovery_ratio`); ``None`` unless the lossy arm scores below the
  baseline by more than 1 % of the baseline's mean (:mod:`agentlab.bench.recovery_rule`: nothing to
  recover — a lossy arm above the baseline lost nothing — printed ``n/a`` with the reason);
* ``pareto``: on the frontier of (prompt savings ↑, quality loss = −delta ↓) among the baseline
  and every arm, per metric (:func:`agentlab.bench.stats.pareto_front`: equal points do not
  dominate each other, so ties are all on it; an arm without a savings or delta is off it);
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
import json
import math
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import agentlab.bench.arms as arms_mod
from agentlab.bench.cli_common import EMBEDDED_DEFAULT_LIMIT, CliError
from agentlab.bench.config import canonical_json, config_hash
from agentlab.bench.league_store import COLUMN_NAMES, LEAGUE_COLUMNS, create_tables, read_league
from agentlab.bench.recovery_rule import RECOVERY_GAP as RECOVERY_GAP
from agentlab.bench.recovery_rule import RECOVERY_RELATIVE_GAP as RECOVERY_RELATIVE_GAP
from agentlab.bench.recovery_rule import no_loss_reason
from agentlab.bench.spec import RunSpec, is_embedded, load_selection, resolve_run
from agentlab.bench.stats import mean_with_ci, paired_difference, pareto_front, recovery_ratio
from agentlab.bench.store import DEFAULT_DB, ResultStore
from agentlab.bench.tasks import Task, get_task

#: Version of the league's definitions (stored with every league).
LEAGUE_VERSION = "2"  # 2: recovery only over a loss (lossy below the baseline), not over |gap|
#: The metric the printed table's Pareto flag and the default ``--metric`` use: the first of these
#: that the league's runs score (else the first metric in name order); the output names the choice.
PRIMARY_METRICS = ("rougeL", "rouge_l_f1", "locomo_f1", "f1", "rouge1_f1", "rouge1", "accuracy", "llm_score")

@dataclass(frozen=True)
class LeagueArm:
    """One arm of a league: its name, role, lossy partner, resolved spec and run id."""

    name: str
    role: str
    partner: str | None
    run_id: str
    spec: RunSpec = field(repr=False, compare=False)


@dataclass
class LeagueResult:
    """A computed league: the header facts, the rows (arm × metric) and what ran."""

    league_id: str
    benchmark: str
    model: str
    context_window: int
    context_window_source: str
    context_budget: int | None
    mechanism_window: int
    seeding: str
    limit: int | None
    case_ids: list[str]
    selection: str
    baseline: str
    baseline_run_id: str
    baseline_source: str
    primary_metric: str | None
    primary_metric_source: str
    arms: list[LeagueArm]
    skipped: dict[str, str]
    rows: list[dict[str, Any]]
    smoke_test: bool
    calls_made: int
    seconds: float
    #: Calls answered from the call cache this time (no server saw them).
    calls_replayed: int = 0
    arm_choice: str = ""
    #: Per run: what this invocation did (``ran`` N cases, ``reused``).
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` payload."""
        return {
            "league_id": self.league_id, "benchmark": self.benchmark, "model": self.model,
            "context_window": self.context_window, "context_window_source": self.context_window_source,
            "context_budget": self.context_budget, "mechanism_window": self.mechanism_window,
            "seeding": self.seeding, "limit": self.limit, "n_cases": len(self.case_ids),
            "case_ids": self.case_ids, "selection": self.selection, "baseline": self.baseline,
            "baseline_run_id": self.baseline_run_id, "baseline_source": self.baseline_source,
            "primary_metric": self.primary_metric, "primary_metric_source": self.primary_metric_source,
            "arm_choice": self.arm_choice, "smoke_test": self.smoke_test,
            "arms": [{"arm": a.name, "role": a.role, "partner": a.partner, "run_id": a.run_id,
                      **self.runs.get(a.run_id, {})} for a in self.arms],
            "skipped": self.skipped, "calls_made": self.calls_made, "calls_replayed": self.calls_replayed, "seconds": round(self.seconds, 3),
            "rows": [{k: _jsonable(v) for k, v in r.items()} for r in self.rows],
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ------------------------------------------------------------------------------------ arm choice


def choose_arms(task: Task, names: str, *, recall: bool = False, seeding: str | None = None) -> tuple[list[str], dict[str, str], str]:
    """The arms a league runs (without the baseline), the ones left out with the reason, and the rule.

    ``all``: every generic arm registered as lossy that applies to the task (the peer policies and
    ``rolling_summary``), then the task's own non-baseline modes (its published lossy and
    recovered conditions, e.g. QMSum's ``summary`` and ``recall``); with ``--seeding lived`` the
    task's modes are left out (they seed their own way). ``recall`` adds ``<arm>+recall`` after
    every lossy generic arm. Naming ``x+recall`` brings its partner ``x`` along (recovery needs it).
    Unknown names are a :class:`CliError` listing the known arms.
    """
    roles = task.roles()
    if roles is None:
        raise CliError(f"{task.name} has no baseline mode to compare arms with, so a league does not apply")
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
            raise CliError("--arms: name at least one arm, or 'all'")
        rule = "named with --arms" + (", each lossy generic arm with +recall" if recall else "")
    out: list[str] = []
    for name in chosen:
        if name == baseline:
            continue  # the baseline runs anyway
        try:
            arm = task.arm(name)
        except LookupError as exc:
            raise CliError(f"--arms: {exc.args[0]}") from exc
        if lived and not arm.generic:
            raise CliError(f"--arms {name}: {task.name}'s {name} mode seeds its own way; --seeding lived is for "
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
        raise CliError(f"--arms {names}: no arm besides the baseline {baseline!r} to compare")
    return out, skipped, rule


# ------------------------------------------------------------------------------------ evidence kept

#: Benchmarks whose gold evidence is marked turn by turn (what :mod:`agentlab.bench.retention` measures).
RETENTION_BENCHMARKS = ("qmsum", "locomo", "longmemeval")


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
    not measured again. Returns the arms measured and the seconds it took; no model is called.
    """
    from agentlab.bench import retention
    from agentlab.bench.cli_retention import _groups
    from agentlab.bench.delivery import Delivery
    from agentlab.bench.retention_store import write_retention

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
    if not chosen or task.name not in RETENTION_BENCHMARKS:
        return [], 0.0
    groups = _groups(task.name, cases, Delivery("turns"), settings)
    timed = await retention.measure_groups(groups, chosen, context_window=budget, settings=settings)
    write_retention(store.path, timed.rows, benchmark=task.name, chunk_turns=None, context_budget=budget,
                    code_version=code_version)
    return [a.name for a in chosen], time.perf_counter() - started


# ------------------------------------------------------------------------------------ running


def _check_baseline_fits(task: Task, cases: Sequence[Any], settings: Any, window: int, model_spec: str,
                         demo_possible: bool) -> None:
    """Refuse a league whose baseline prompts do not fit the model's window (it would compare with failures).

    Counted with the cl100k estimate (a smaller-vocabulary tokenizer does not encode English in
    fewer tokens, see :func:`agentlab.bench.selection.select_fitting`): a case the estimate lets
    through and the server still refuses is stored as a failed case and counted in the table.
    """
    from agentlab.bench.selection import baseline_prompts
    from agentlab.model import tokens

    answer = int(settings.get("answer", "max_tokens", 0) or 0)
    too_long = []
    for case in cases:
        prompts = baseline_prompts(task, case, settings)
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
    raise CliError(f"{len(too_long)} of {len(cases)} selected {task.name} cases need a {roles.baseline} prompt over "
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
    Every user error is a :class:`CliError` raised before anything is stored.
    """
    from agentlab.bench.cli_run import _build_model, _choose_cases, _close_clients, _prepare_model
    from agentlab.bench.executor import run_task, select
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
                           published_settings=published_settings, judge_model=judge_model)

    specs = {name: resolve(name) for name in names}
    first = specs[names[0]]
    settings = first.settings
    if metric is not None and not metric.strip():
        raise CliError("--metric: give a metric name")
    if model_object is not None:
        built = model_object
        info = built.info
    else:
        built = _build_model(first.model_spec, "--model", context_window)
        info = _prepare_model(built, first.model_spec, "--model", window=True)
    judge = None
    if first.judge_spec is not None:
        from agentlab.bench.judge import Judge

        judging = built
        if first.judge_spec != first.model_spec and model_object is None:
            judging = _build_model(first.judge_spec, "--judge-model")
            _prepare_model(judging, first.judge_spec, "--judge-model", window=False)
        judge = Judge(judging, first.judge_spec)
    rule_name: str | None = None
    if selection is None and fitting:
        from agentlab.bench.selection import FITS_WINDOW_RULE, model_prompt_counter, select_fitting
        from agentlab.model.window import resolve_context_window

        window = resolve_context_window(built) or int(info.context_window or 0)
        counter, counted_with = model_prompt_counter(built)
        fitted = select_fitting(task, load_selection(task, settings), settings, window=window,
                                limit=limit or EMBEDDED_DEFAULT_LIMIT, counter=counter, counted_with=counted_with)
        if not fitted.selection.cases:
            raise CliError(f"--fitting: no {task.name} case's {roles.baseline} prompt fits the {window}-token window")
        selection, rule_name = fitted.selection, FITS_WINDOW_RULE
        notes.write(f"{fitted.selection.note}\n")
    elif selection is None:
        selection, rule_name = _choose_cases(task, settings, built, first, notes)
    bound = {name: spec.bind(info, selection.dataset_sha256) for name, spec in specs.items()}
    run_limit = None if rule_name is not None else first.limit
    cases = select(selection, run_limit)
    if not cases:
        raise CliError(f"{task.name}: no case selected (check --limit and the settings)")
    if info.context_window:
        _check_baseline_fits(task, cases, settings, int(info.context_window), first.model_spec,
                             demo_possible=is_embedded(first.model_spec) and limit is not None and not fitting)

    # The runs in order: the baseline once, then each arm (a recovered arm after its partner).
    league_arms: list[LeagueArm] = []
    requests: dict[str, Any] = {}
    baseline_id = ""
    for name in names:
        spec = bound[name]
        ids = spec.run_ids()
        baseline_id = baseline_id or ids[roles.baseline]
        if ids[roles.baseline] != baseline_id:
            raise CliError(f"arm {name}: its baseline run {ids[roles.baseline]} differs from the league's "
                           f"{baseline_id} (the arms' settings differ); run them in separate leagues")
        for mode in spec.modes:
            if ids[mode] not in requests:
                request = spec.request(mode)
                requests[ids[mode]] = dataclasses.replace(request, limit=run_limit)
        arm = task.arm(name)
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
        if evidence and task.name in RETENTION_BENCHMARKS:
            measured, took = await measure_evidence(task, cases, settings, [roles.baseline, *names],
                                                    header.mechanism_window, active, header.code_version)
            if measured:
                notes.write(f"  evidence kept measured without a model for {len(measured)} arms in {took:.1f} s "
                            f"(retention table, turn delivery, budget {header.mechanism_window})\n")
        with observe_calls(count):
            for run_id, request in requests.items():
                before = dict(calls)
                summary = await run_task(task, request, model=built, store=active, judge=judge, selection=selection)
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
            await _close_clients(built, getattr(judge, "model", None))


def run_league(benchmark: str, **kwargs: Any) -> LeagueResult:
    """:func:`arun_league` from synchronous code (also inside Jupyter's running loop)."""
    from agentlab.bench.loops import run_sync

    return run_sync(arun_league(benchmark, **kwargs))


# ------------------------------------------------------------------------------------ the table


_CASES_SQL = """
SELECT c.run_id, c.case_id, c.status,
    COALESCE(SUM(k.prompt_tokens) FILTER (WHERE k.purpose = 'answer'), 0) AS answer_prompt,
    COALESCE(MAX(k.prompt_tokens) FILTER (WHERE k.purpose = 'answer'), 0) AS peak_prompt,
    count(k.seq) FILTER (WHERE k.purpose = 'summary') AS summary_calls,
    COALESCE(SUM(k.prompt_tokens + k.completion_tokens) FILTER (WHERE k.purpose = 'summary'), 0) AS summary_tokens
FROM cases c LEFT JOIN calls k ON k.run_id = c.run_id AND k.case_id = c.case_id
WHERE c.run_id IN ({marks})
GROUP BY c.run_id, c.case_id, c.status
"""


def _case_frame(store: ResultStore, run_ids: Sequence[str], case_ids: Sequence[str]) -> tuple[dict[str, dict[str, tuple]], dict[str, dict[str, dict[str, float | None]]]]:
    """(run → case → (status, answer prompt, peak, summary calls, summary tokens), run → metric → case → value)."""
    marks = ", ".join("?" for _ in run_ids)
    wanted = set(case_ids)
    cases: dict[str, dict[str, tuple]] = {r: {} for r in run_ids}
    for run_id, case_id, status, answer, peak, s_calls, s_tokens in store.query(_CASES_SQL.format(marks=marks),
                                                                                 list(run_ids)):
        if case_id in wanted:
            cases[run_id][case_id] = (status, int(answer), int(peak), int(s_calls), int(s_tokens))
    scores: dict[str, dict[str, dict[str, float | None]]] = {r: {} for r in run_ids}
    for run_id, case_id, metric, value in store.query(
            f"SELECT run_id, case_id, metric, value FROM scores WHERE run_id IN ({marks})", list(run_ids)):
        if case_id in wanted:
            scores[run_id].setdefault(metric, {})[case_id] = None if value is None else float(value)
    return cases, scores


def _values(cases: dict[str, tuple], scores: dict[str, float | None], case_ids: Sequence[str]) -> dict[str, float | None]:
    """Per case: the score of an ok case (None: unscored), 0 for a failed case; cases not stored are absent."""
    out: dict[str, float | None] = {}
    for case_id in case_ids:
        row = cases.get(case_id)
        if row is None:
            continue
        out[case_id] = scores.get(case_id) if row[0] == "ok" else 0.0
    return out


def _evidence(store: ResultStore, benchmark: str, arm: str, budget: int, case_ids: Sequence[str]) -> tuple[float | None, int]:
    """Mean stored ``retained`` of the arm on the league's cases (turn delivery, this budget), and how many."""
    if not store.has_table("retention"):
        return None, 0
    wanted = set(case_ids)
    rows = [(c, v) for c, v in store.query(
        "SELECT case_id, retained FROM retention WHERE benchmark = ? AND arm = ? AND delivery = 'turns' "
        "AND context_budget = ?", [benchmark, arm, budget]) if c in wanted and v is not None]
    if not rows:
        return None, 0
    return sum(float(v) for _, v in rows) / len(rows), len(rows)


def recovery_of(baseline: Sequence[float], lossy: Sequence[float], recovered: Sequence[float],
                partner: str) -> tuple[Any, str | None]:
    """The recovery over paired triples, or ``None`` and why: only a loss can be recovered.

    ``None`` (with the reason) when there are no triples, when the lossy arm scores above the
    baseline, or when it is below it by at most
    :data:`~agentlab.bench.recovery_rule.RECOVERY_RELATIVE_GAP` of the baseline's mean.
    """
    if not baseline:
        return None, None
    why = no_loss_reason(sum(baseline) / len(baseline), sum(lossy) / len(lossy), partner)
    return (recovery_ratio(baseline, lossy, recovered), None) if why is None else (None, why)


def compute_rows(store: ResultStore, benchmark: str, league_id: str, baseline_id: str, baseline: str,
                 league_arms: Sequence[LeagueArm], case_ids: Sequence[str], *, metric: str | None = None,
                 mechanism_window: int = 0) -> list[dict[str, Any]]:
    """The league's rows (baseline first, then each arm; one per metric), ``pareto`` not yet marked."""
    run_ids = [baseline_id, *(a.run_id for a in league_arms)]
    cases, scores = _case_frame(store, run_ids, case_ids)
    # The baseline's metrics (a mode's own extras, e.g. recall's evidence_recall@k, have nothing to be
    # compared with); a benchmark whose baseline scores nothing (MT-Bench-101) takes every arm's.
    metrics = sorted(scores[baseline_id]) or sorted({m for r in run_ids for m in scores[r]})
    if metric is not None:
        metrics = [m for m in metrics if m == metric]
    by_name = {a.name: a for a in league_arms}
    entries = [(baseline, "baseline", None, baseline_id), *((a.name, a.role, a.partner, a.run_id) for a in league_arms)]
    rows: list[dict[str, Any]] = []
    for ordinal, (name, role, partner, run_id) in enumerate(entries):
        mine = cases[run_id]
        ok = [c for c in case_ids if mine.get(c, ("",))[0] == "ok"]
        n_failed = sum(1 for c in case_ids if mine.get(c, ("",))[0] == "failed")
        both = [c for c in ok if cases[baseline_id].get(c, ("",))[0] == "ok" and cases[baseline_id][c][1] > 0]
        if run_id == baseline_id:
            savings = dict.fromkeys(("estimate", "ci_low", "ci_high"), 0.0 if both else None)
        else:
            result = mean_with_ci([(cases[baseline_id][c][1] - mine[c][1]) / cases[baseline_id][c][1] for c in both])
            savings = {"estimate": result.estimate, "ci_low": result.ci_low, "ci_high": result.ci_high}
        peaks = [mine[c][2] for c in ok]
        # Every answer prompt the same size as the baseline's: the arm's mechanisms did not act here.
        unchanged = run_id != baseline_id and bool(both) and len(both) == len(ok) and all(
            mine[c][1] == cases[baseline_id][c][1] for c in both)
        evidence, evidence_n = _evidence(store, benchmark, name, mechanism_window, case_ids)
        common = {
            "league_id": league_id, "benchmark": benchmark, "arm": name, "role": role, "partner": partner,
            "n_ok": len(ok), "n_failed": n_failed, "prompt_savings": savings["estimate"],
            "peak_prompt_tokens_mean": (sum(peaks) / len(peaks)) if peaks else None,
            "peak_prompt_tokens_max": max(peaks) if peaks else None,
            "summary_calls": (sum(mine[c][3] for c in ok) / len(ok)) if ok else None,
            "summary_tokens": (sum(mine[c][4] for c in ok) / len(ok)) if ok else None,
            "evidence_kept": evidence, "evidence_cases": evidence_n, "unchanged": unchanged,
            "run_id": run_id, "baseline_run_id": baseline_id, "ordinal": ordinal,
            "n_cases": sum(1 for c in case_ids if c in mine),
            "savings_ci_low": savings["ci_low"], "savings_ci_high": savings["ci_high"],
        }
        base_values = {m: _values(cases[baseline_id], scores[baseline_id].get(m, {}), case_ids) for m in metrics}
        # A run with no ok case scored nothing: it takes every metric (its failed cases count 0).
        arm_metrics: list[str | None] = [m for m in metrics if m in scores[run_id] or not ok]
        for m in arm_metrics or [None]:
            row = dict(common, metric=m, delta=None, ci_low=None, ci_high=None, p_value=None, recovery=None,
                       n_pairs=0, baseline_mean=None, arm_mean=None, recovery_ci_low=None, recovery_ci_high=None,
                       stats_note=None, pareto=False)
            if m is not None:
                mine_values = _values(mine, scores[run_id].get(m, {}), case_ids)
                paired = [c for c in case_ids if base_values[m].get(c) is not None and mine_values.get(c) is not None]
                b = [float(base_values[m][c]) for c in paired]  # type: ignore[arg-type]
                x = [float(mine_values[c]) for c in paired]  # type: ignore[arg-type]
                notes = []
                if paired:
                    row["baseline_mean"], row["arm_mean"] = sum(b) / len(b), sum(x) / len(x)
                if run_id == baseline_id:
                    row.update(delta=0.0 if paired else None, n_pairs=len(paired))
                else:
                    diff = paired_difference(b, x)
                    row.update(delta=diff.estimate, ci_low=diff.ci_low, ci_high=diff.ci_high, p_value=diff.p_value,
                               n_pairs=len(paired))
                    if diff.note:
                        notes.append(diff.note)
                if role == "recovered" and partner in by_name:
                    lossy_id = by_name[partner].run_id
                    lossy_values = _values(cases[lossy_id], scores[lossy_id].get(m, {}), case_ids)
                    triple = [c for c in paired if lossy_values.get(c) is not None]
                    tb = [float(base_values[m][c]) for c in triple]  # type: ignore[arg-type]
                    tl = [float(lossy_values[c]) for c in triple]  # type: ignore[arg-type]
                    tr = [float(mine_values[c]) for c in triple]  # type: ignore[arg-type]
                    rec, why = recovery_of(tb, tl, tr, partner)
                    if rec is not None:
                        row.update(recovery=rec.estimate, recovery_ci_low=rec.ci_low, recovery_ci_high=rec.ci_high)
                    elif why:
                        notes.append(why)
                row["stats_note"] = "; ".join(notes) or None
            rows.append(row)
    return rows


def pick_metric(rows: Sequence[dict[str, Any]], metric: str | None) -> tuple[str | None, str]:
    """The primary metric (for the printed Pareto flag) and how it was chosen."""
    scored = sorted({r["metric"] for r in rows if r["metric"] is not None})
    if metric is not None:
        if metric not in scored:
            raise CliError(f"--metric {metric!r}: the league's runs score {', '.join(scored) or 'no metric'}")
        return metric, "--metric"
    for name in PRIMARY_METRICS:
        if name in scored:
            return name, f"the first of {', '.join(PRIMARY_METRICS)} the runs score; --metric to choose"
    if scored:
        return scored[0], "the first metric by name (none of the usual primary metrics is scored); --metric to choose"
    return None, "no metric scored"


def mark_pareto(rows: list[dict[str, Any]]) -> None:
    """Set ``pareto`` per metric: savings (higher better) against quality loss −delta (lower better)."""
    for m in {r["metric"] for r in rows if r["metric"] is not None}:
        group = [r for r in rows if r["metric"] == m]
        flags = pareto_front([r["prompt_savings"] for r in group],
                             [None if r["delta"] is None else 0.0 - r["delta"] for r in group])
        for r, flag in zip(group, flags, strict=True):
            r["pareto"] = bool(flag)


# ------------------------------------------------------------------------------------ storage


def write_league(store: ResultStore, result: LeagueResult, *, code_version: str = "") -> None:
    """Store the league (replacing an earlier computation of the same id) in one transaction."""
    create_tables(store.conn)
    spec = {"benchmark": result.benchmark, "model": result.model, "context_budget": result.context_budget,
            "seeding": result.seeding, "limit": result.limit, "selection": result.selection,
            "arms": {a.name: a.run_id for a in result.arms}, "baseline_run_id": result.baseline_run_id,
            "case_ids": result.case_ids}
    con = store.conn
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DELETE FROM league_rows WHERE league_id = ?", [result.league_id])
        con.execute("DELETE FROM leagues WHERE league_id = ?", [result.league_id])
        con.execute("INSERT INTO leagues VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now())", [
            result.league_id, result.benchmark, canonical_json(spec), result.model, result.context_window,
            result.context_budget, result.seeding, result.limit, len(result.case_ids), result.selection,
            result.baseline, result.baseline_run_id, result.baseline_source, result.primary_metric,
            json.dumps([{"arm": a.name, "role": a.role, "partner": a.partner, "run_id": a.run_id}
                        for a in result.arms]),
            json.dumps(result.skipped), result.smoke_test, LEAGUE_VERSION, code_version, result.seconds])
        marks = ", ".join("?" for _ in COLUMN_NAMES)
        con.executemany(f"INSERT INTO league_rows ({', '.join(COLUMN_NAMES)}) VALUES ({marks})",
                        [[_jsonable(r.get(c)) for c in COLUMN_NAMES] for r in result.rows])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


# ------------------------------------------------------------------------------------ printing


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def _num(value: float | None, digits: int = 3, signed: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _interval(low: float | None, high: float | None, digits: int = 3) -> str:
    if low is None or high is None:
        return "-"
    return f"[{low:+.{digits}f}, {high:+.{digits}f}]"


def format_league(result: LeagueResult, metrics: Sequence[str] | None = None) -> str:
    """The printed league: a header (model, budget, seeding, cases, baseline, units), then one line per arm.

    The quality columns are the primary metric's; every other metric follows in a compact block.
    """
    lines = []
    budget = (f"{result.context_budget} tokens (the window the mechanisms see)" if result.context_budget is not None
              else f"none (the mechanisms see the model's {result.context_window}-token window)")
    lines.append(f"league {result.league_id}: {result.benchmark}, {len(result.arms)} arms vs baseline "
                 f"{result.baseline}" + ("  [SMOKE TEST: embedded model]" if result.smoke_test else ""))
    lines.append(f"  model {result.model}, context window {result.context_window} tokens "
                 f"({result.context_window_source or 'stated by the model'}), context budget {budget}")
    lines.append(f"  seeding {result.seeding}; {len(result.case_ids)} cases ({result.selection} selection"
                 + (f", --limit {result.limit}" if result.limit else "") + f"); baseline {result.baseline_source}")
    lines.append(f"  arms: {result.arm_choice}")
    primary = result.primary_metric
    lines.append(f"  primary metric {primary or '-'} ({result.primary_metric_source})")
    lines.append("  units: savings = mean per-case share of the baseline's answer prompt tokens saved (cases ok in both);")
    lines.append("         peak = largest answer prompt of a case in tokens, mean/max; summ, summ tok = summary calls "
                 "and their tokens per case;")
    lines.append(f"         delta = arm − baseline on {primary or 'the metric'} (failed case = 0), paired bootstrap "
                 "95% CI, Wilcoxon p;")
    lines.append("         rec = (recovered − lossy)/(baseline − lossy) vs the arm in 'vs'; P * = on the "
                 "savings/quality Pareto frontier;")
    lines.append("         kept = evidence retained in the final request (retention table; - = not measured)")
    shown = [r for r in result.rows if r["metric"] == primary]
    wide = max([len(r["arm"]) for r in shown] + [3])
    vs = max([len(r["partner"] or "") for r in shown] + [2])
    head = (f"{'arm':{wide}s} {'role':9s} {'vs':{vs}s} {'ok/fail':>7s} {'savings':>8s} {'peak mean/max':>13s} {'summ':>4s} "
            f"{'summ tok':>8s} {'delta':>7s} {'95% CI':>17s} {'p':>6s} {'rec':>6s} {'P':1s} {'kept':>5s}")
    lines.append(head)
    lines.append("-" * len(head))
    for r in result.rows:
        if r["metric"] != primary and not (primary is None and r["metric"] is None):
            continue
        name = r["arm"]
        rec = "-"
        if r["role"] == "recovered":
            rec = "n/a" if r["recovery"] is None else f"{round(r['recovery'], 2) + 0.0:.2f}"  # no "-0.00"
        peak = ("-" if r["peak_prompt_tokens_mean"] is None else
                f"{r['peak_prompt_tokens_mean']:.0f}/{r['peak_prompt_tokens_max']}")
        p = "-" if r["p_value"] is None else f"{r['p_value']:.3f}"
        lines.append(f"{name:{wide}s} {r['role']:9s} {(r['partner'] or ''):{vs}s} "
                     f"{str(r['n_ok']) + '/' + str(r['n_failed']):>7s} {_pct(r['prompt_savings']):>8s} {peak:>13s} {_num(r['summary_calls'], 1, False):>4s} "
                     f"{_num(r['summary_tokens'], 0, False):>8s} {_num(r['delta']):>7s} "
                     f"{_interval(r['ci_low'], r['ci_high']):>17s} {p:>6s} {rec:>6s} {'*' if r['pareto'] else ' '} "
                     f"{_num(r['evidence_kept'], 2, False):>5s}")
    others = sorted({r["metric"] for r in result.rows if r["metric"] not in (None, primary)})
    if metrics is not None:
        others = [m for m in others if m in metrics]
    if others:
        lines.append("")
        lines.append("other metrics: delta [95% CI] (p), * = on that metric's Pareto frontier")
        for m in others:
            lines.append(f"  {m}:")
            for r in result.rows:
                if r["metric"] != m or r["role"] == "baseline":
                    continue
                p = "-" if r["p_value"] is None else f"{r['p_value']:.3f}"
                rec = "" if r["role"] != "recovered" else (
                    "  rec n/a" if r["recovery"] is None else f"  rec {r['recovery']:.2f}")
                lines.append(f"    {r['arm']:{wide}s} {_num(r['delta']):>7s} {_interval(r['ci_low'], r['ci_high']):>17s}"
                             f" ({p}){rec} {'*' if r['pareto'] else ''}")
    if result.skipped:
        lines.append("")
        lines.append("left out:")
        lines.extend(f"  {name:{wide}s} {reason}" for name, reason in result.skipped.items())
    same = [r["arm"] for r in result.rows if r["metric"] == primary and r.get("unchanged")]
    if same:
        lines.append("")
        lines.append(f"sent answer prompts of the baseline's size on every case (their mechanisms did not act at "
                     f"this budget): {', '.join(same)}")
    failed = sum(r["n_failed"] for r in result.rows if r["metric"] == primary)
    if failed:
        lines.append(f"{failed} failed case(s) are counted above (scored 0 in delta; left out of savings and peak)")
    lines.append(f"{result.calls_made} model calls sent this time, {result.calls_replayed} replayed from the call "
                 "cache (cases already stored cost none); "
                 f"{result.seconds:.1f} s; stored as league {result.league_id} (analysis.league_df)")
    return "\n".join(lines) + "\n"


__all__ = [
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
