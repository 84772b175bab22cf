"""The runs a notebook shows: made through the CLI (resumable, so a rerun only reports), then read per run.

Notebooks call the CLI in-process rather than the executor directly, so a notebook's runs are
exactly the runs the documented command makes, with the same ids: each goes through the one
resolution of a run (:func:`agentlab.bench.spec.resolve_run`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd


def _run_cli(args: Sequence[str]) -> tuple[int, str, str]:
    from agentlab.bench.cli import main as cli

    out, err = io.StringIO(), io.StringIO()

    def call() -> int:
        with contextlib.redirect_stderr(err):
            return cli.main(list(args), out=out)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        status = pool.submit(call).result()
    return status, out.getvalue(), err.getvalue()


def _failure_line(status: int, out: str, err: str) -> str:
    """What a failed CLI call said last (its ``error: ...`` line), else its exit status."""
    text = (err or out).strip()
    return text.splitlines()[-1] if text else f"exit status {status}"


def run_cli(args: Sequence[str]) -> tuple[int, str]:
    """``python -m agentlab.bench <args>`` in-process; returns (exit status, printed text).

    The CLI calls ``asyncio.run``, which a Jupyter kernel's running loop refuses, so it runs in a
    worker thread; its output is captured and returned rather than printed from that thread.
    """
    status, out, err = _run_cli(args)
    return status, out + err


def ensure_results(benchmark: str, modes: Sequence[str], *, model: str, limit: int, db: str | os.PathLike[str],
                   overrides: Iterable[str] = (), judge_model: str | None = None, context_budget: int | None = None,
                   echo: bool = True) -> pd.DataFrame:
    """Make sure ``db`` holds results of every mode: run the CLI once per mode.

    Runs are identified by their configuration and resumable, so the CLI itself decides what is
    missing: cases already stored ``ok`` are skipped (a rerun costs a data load), missing or failed
    ones are run (model calls replay from the call cache when they were made before). Returns one
    row per mode — run id, cases selected / already done / run now / failed, failure codes — and
    rebuilds the derived tables.
    """
    from agentlab.bench import analysis

    Path(db).parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode in modes:
        args = [benchmark, "--mode", mode, "--limit", str(limit), "--model", model, "--db", str(db),
                "--no-progress", "--json"]
        if judge_model:
            args += ["--judge-model", judge_model]
        if context_budget is not None:
            args += ["--context-budget", str(context_budget)]
        for assignment in overrides:
            args += ["--set", assignment]
        status, out, err = _run_cli(args)
        if echo:
            print(f"$ python -m agentlab.bench {' '.join(args)}")
        if status != 0:
            message = _failure_line(status, out, err)
            print(f"  failed: {message}")
            rows.append({"mode": mode, "model": model, "status": status, "error": message})
            continue
        run = json.loads(out)
        if echo:
            print(f"  run {run['run_id']}: {run['already_done']} already stored, {run['ok']} ok and "
                  f"{run['failed']} failed now, of {run['selected']} selected")
        rows.append({"mode": mode, "model": model, "status": status, "run_id": run["run_id"], "selected": run["selected"],
                     "already_done": run["already_done"], "ran_ok": run["ok"], "ran_failed": run["failed"],
                     "failures": ", ".join(f"{k} {v}" for k, v in sorted(run["errors"].items())),
                     "prompt_tokens": run["prompt_tokens"], "completion_tokens": run["completion_tokens"]})
    if Path(db).exists():
        analysis.rebuild(Path(db))
    return pd.DataFrame(rows)


def ensure_sweep(benchmark: str, mode: str, grid: Sequence[str], *, model: str, limit: int,
                 db: str | os.PathLike[str], overrides: Iterable[str] = (), context_window: int | None = None,
                 context_budget: int | None = None, echo: bool = True) -> pd.DataFrame:
    """Run ``python -m agentlab.bench sweep`` (the baseline once, then every grid point); one row per run.

    Resumable: a second call only reports what is stored. Raises with the CLI's error line when the
    sweep stops.
    """
    from agentlab.bench import analysis

    Path(db).parent.mkdir(parents=True, exist_ok=True)
    args = ["sweep", benchmark, "--mode", mode, "--limit", str(limit), "--model", model, "--db", str(db),
            "--no-progress", "--json"]
    for item in grid:
        args += ["--grid", item]
    for assignment in overrides:
        args += ["--set", assignment]
    if context_window is not None:
        args += ["--context-window", str(context_window)]
    if context_budget is not None:
        args += ["--context-budget", str(context_budget)]
    if echo:
        print(f"$ python -m agentlab.bench {' '.join(args)}")
    status, out, err = _run_cli(args)
    if status != 0:
        message = _failure_line(status, out, err)
        raise RuntimeError(f"sweep failed: {message}")
    runs = json.loads(out)["runs"]
    analysis.rebuild(Path(db))
    frame = pd.DataFrame([{k: r[k] for k in ("mode", "variant", "run_id", "selected", "already_done", "ok", "failed")}
                          for r in runs])
    if echo:
        print(frame.to_string(index=False))
    return frame


def these_runs(frame: pd.DataFrame, log: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` that belong to the runs :func:`ensure_results` made or found (``log``).

    A results file keeps every run — other variants, other data subsets, older task versions of
    the same model — and the tables show each as its own row; a notebook reading "its" runs picks
    them by id rather than by model name.
    """
    if frame is None or len(frame) == 0:
        return frame
    if "run_id" not in frame.columns:  # a benchmark's own tables: one row per (model, mode) at most
        return frame[frame["model"].isin(set(log["model"]))] if "model" in frame.columns else frame
    ids = set(log["run_id"].dropna()) if "run_id" in log.columns else set()
    return frame[frame["run_id"].isin(ids)]


def partition_settings(benchmark: str, assignments: Iterable[str]) -> tuple[list[str], list[str]]:
    """The ``section.field=value`` assignments the benchmark's settings know, and the others."""
    from agentlab.bench.config import load_settings
    from agentlab.bench.tasks import get_task

    task = get_task(benchmark)
    settings = load_settings(task.name, task.default_settings())
    kept: list[str] = []
    missing: list[str] = []
    for assignment in assignments:
        key = assignment.split("=", 1)[0].strip()
        section, _, name = key.partition(".")
        (kept if section in settings and name in settings[section] else missing).append(assignment)
    return kept, missing


def supported_settings(benchmark: str, assignments: Iterable[str]) -> list[str]:
    """The ``section.field=value`` assignments the benchmark's settings know; prints the others.

    Smoke-run shortcuts may name a field a task does not (yet) have; the CLI would refuse the
    whole run, so such an assignment is left out, loudly.
    """
    kept, missing = partition_settings(benchmark, assignments)
    for assignment in missing:
        print(f"note: {benchmark} has no setting {assignment.split('=', 1)[0].strip()!r}; not applied: {assignment}")
    return kept


def published_savings_column(frame: pd.DataFrame) -> str:
    """The prompt-savings column of a ``token_savings`` frame that follows its benchmark's published token rule.

    ``prompt_savings_last`` where the published report counts the last answer call of a run, else
    ``prompt_savings`` (the sum over a case's answer calls).
    """
    rules = set(frame["published_token_rule"].dropna()) if "published_token_rule" in frame else set()
    return "prompt_savings_last" if rules == {"last_answer_call"} else "prompt_savings"


def mode_quality_and_savings(benchmark: str, metric: str, *, db: str | os.PathLike[str], model: str) -> pd.DataFrame:
    """Per run (mode and variant) of one model: mean ``metric`` and mean per-case prompt savings.

    Failed cases count 0 in the mean; the savings are against the run's baseline run (0 for a
    baseline run itself), by the published token rule (``prompt_savings_rule`` names the column).
    """
    from agentlab.bench import analysis
    from agentlab.bench.tasks import get_task

    roles = get_task(benchmark).roles()
    if roles is None:
        raise ValueError(f"{benchmark} declares no mode roles: no baseline to measure savings against")
    means = analysis.mode_means_df(benchmark, db=Path(db))
    means = means[(means["model"] == model) & (means["metric"] == metric)]
    savings = analysis.token_savings_df(benchmark, level="aggregate", db=Path(db))
    baseline = roles.baseline
    column = published_savings_column(savings)
    by_run = dict(zip(savings["run_id"], savings[column], strict=True)) if len(savings) else {}
    rows = []
    for _, row in means.iterrows():
        saving = 0.0 if row["mode"] == baseline else float(by_run.get(row["run_id"], float("nan")))
        rows.append({"mode": row["mode"], "variant": row["variant"], "run_id": row["run_id"], metric: row["mean"],
                     "prompt_savings": saving, "prompt_savings_rule": column, "n_cases": row["n_cases"],
                     "n_failed": row["n_failed"]})
    return pd.DataFrame(rows)


def case_metadata(cases: pd.DataFrame, *keys: str) -> pd.DataFrame:
    """``cases`` with the named fields of its JSON ``metadata`` column added as columns."""
    meta = [json.loads(m) if isinstance(m, str) else (m or {}) for m in cases["metadata"]]
    out = cases.copy()
    for key in keys:
        out[key] = [m.get(key) for m in meta]
    return out


def judge_note(means: pd.DataFrame, metric: str = "llm_score") -> str:
    """What ``<metric>`` and ``<metric>_correct`` are, with the judge's mean confidence on the answers it passed.

    ``<metric>_correct`` is the share of answers the judge *labelled* correct; ``<metric>`` is the
    published score, the judge's confidence when it said correct and 0 otherwise
    (:func:`agentlab.bench.scoring.judge.confidence_if_correct`). So ``<metric>`` / ``<metric>_correct`` is its
    mean confidence on the answers it passed: a judge that says "correct" with confidence 0 gives
    1.0 and 0 — it passed everything and believed none of it; neither says that the answers are right.
    """
    correct = means[means["metric"] == f"{metric}_correct"].set_index("mode")["mean"]
    score = means[means["metric"] == metric].set_index("mode")["mean"]
    if correct.empty:
        return f"{metric}: the judge's score (no {metric}_correct stored)"
    parts = []
    for mode in correct.index:
        share, value = correct[mode], score.get(mode)
        confidence = "n/a" if value is None or not share else f"{value / share:.2f}"
        parts.append(f"{mode}: labelled correct {share:.2f}, mean confidence when correct {confidence}")
    return (f"{metric}_correct = share of answers the judge labelled correct; {metric} = its confidence when it "
            f"said correct, else 0 (the published score). " + "; ".join(parts))
