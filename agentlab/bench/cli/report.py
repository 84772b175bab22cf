"""``python -m agentlab.bench report``: rebuild the derived tables and print or return them.

The run command ends with the comparison sections of the same report (:func:`report_payload`,
:func:`write_report`), so both read the tables one way.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from agentlab.bench.cli.common import SMOKE_LABEL, CliError, frame_records, print_banner, print_json
from agentlab.bench.scoring.call_costs import with_run_costs
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import Task, UnknownBenchmark, get_task

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
    """``report``: rebuild the derived tables of ``--db`` and print them, narrowed to runs or variants."""
    if not args.db.exists():
        raise CliError(f"no results database at {args.db}; run `python -m agentlab.bench {args.benchmark} ...` first")
    run_ids = set(args.run) if args.run else None
    variants = set(args.variant) if args.variant else None
    payload = report_payload(args.benchmark, args.db, frames=True, between=args.between,
                              run_ids=run_ids, variants=variants)
    runs = payload["runs"]
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
        for key in ("token_savings", "quality_loss", "recovery", "pareto", "prompt_cache"):
            payload[key] = _narrow(payload[key], run_ids, variants)
    if args.json:
        payload["code_versions"] = code_versions(payload["runs"])
        payload = {k: (frame_records(v.drop(columns=["config"]) if k == "runs" else v) if hasattr(v, "to_dict") else v)
                   for k, v in payload.items()}
        payload["benchmark_tables"] = {name: frame_records(df) for name, df in payload["benchmark_tables"].items()}
        print_json(payload, out)
        return 0
    write_report(payload, out)
    return 0


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


def report_payload(benchmark: str, db: Path, frames: bool = False, between: Sequence[str] | None = None,
                    run_ids: set[str] | None = None, variants: set[str] | None = None,
                    task: Task | None = None) -> dict[str, Any]:
    """Rebuild the derived tables and read them back: DataFrames with ``frames``, else JSON records.

    ``run_ids``/``variants`` (``report --run/--variant``) also choose which run stands for a mode in
    the task's own tables (:meth:`ResultStore.select_runs`); the caller narrows the other tables.
    ``task``: the benchmark's task when the caller has it (a run's report), not looked up again.
    """
    from agentlab.bench import analysis

    with ResultStore(db) as store:
        store.rebuild_derived()
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
        tables["prompt_cache"], cache_notes = with_run_costs(runs[["run_id", "mode", "variant", "model"]], store.query)
        if run_ids is not None or variants is not None:
            store.select_runs(run_ids, variants)
        own = _benchmark_tables(benchmark, store, task)
    smoke = bool(runs["smoke_test"].fillna(False).any())
    head = {"benchmark": benchmark, "smoke_test": smoke, "smoke_label": SMOKE_LABEL if smoke else None, "db": str(db),
            "rules": REPORT_RULES, "variants": sorted(set(runs["variant"].fillna("legacy"))),
            "prompt_cache_notes": cache_notes}
    if frames:
        return {**head, **tables, "benchmark_tables": own}
    return {**head, **{k: frame_records(v) for k, v in tables.items()},
            "benchmark_tables": {name: frame_records(df) for name, df in own.items()}}


#: Stands for a run stored without a code version.
UNRECORDED_VERSION = "unrecorded"


def code_versions(runs: Any) -> dict[str, list[str]]:
    """``{code version: ["mode run_id", ...]}`` of the runs a report compares, oldest run first.

    A run's code version is the one that last ran cases of it (``runs.code_version``, written again
    when a run is resumed). Settings, prompts and the run id can change between versions (see
    CHANGELOG.md), so numbers of runs made by different versions may not be comparable.
    """
    versions: dict[str, list[str]] = {}
    if runs is None or len(runs) == 0:
        return versions
    has_version = "code_version" in runs.columns
    for _, run in runs.iterrows():
        version = run["code_version"] if has_version else None
        key = str(version) if isinstance(version, str) and version else UNRECORDED_VERSION
        variant = run.get("variant")
        label = run["mode"] if variant in (None, "default") or not isinstance(variant, str) else \
            f"{run['mode']} [{variant}]"
        versions.setdefault(key, []).append(f"{label} {str(run['run_id'])[:12]}")
    return versions


def code_versions_line(runs: Any) -> str | None:
    """One line naming the code versions when the compared runs were made by more than one, else None."""
    versions = code_versions(runs)
    if len(versions) < 2:
        return None
    parts = "; ".join(f"{version}: {', '.join(labels)}" for version, labels in versions.items())
    return (f"note: these runs were made by {len(versions)} code versions ({parts}); settings and scoring may "
            "differ between them, see CHANGELOG.md\n")


def write_report(payload: dict[str, Any], out: TextIO, sections: Sequence[str] | None = None) -> None:
    """Print a :func:`report_payload` (made with ``frames=True``): every section, or ``sections``."""
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
        print_banner(SMOKE_LABEL, out)
    versions_note = code_versions_line(payload["runs"])
    if versions_note:
        out.write(versions_note)
    savings = payload["token_savings"]
    stats_columns = ["ci_low", "ci_high", "p_value", "n_pairs"]
    section("runs", "runs", payload["runs"],
            ["run_id", "mode", "variant", "model", "judge_model", "status", "n_ok", "n_failed", "smoke_test",
             "baseline_variant", "baseline_run_id", "started", "code_version"])
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
                  "published_token_rule names the one the published report uses (docs/token-accounting.md)\n")
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
    recovery = payload["recovery"]
    if (shown is None or "recovery" in shown) and len(recovery) and "stats_note" in recovery:
        for _, row in recovery[recovery["stats_note"].fillna("").str.startswith("recovery n/a")].iterrows():
            out.write(f"{row['recovered_mode']} {row['variant']} {row['metric']}: {row['stats_note']}\n")
    section("pareto", "pareto (token savings vs quality loss per metric; on_frontier)", payload.get("pareto"),
            ["metric", "mode", "variant", "token_savings", "savings_ci_low", "savings_ci_high", "quality_loss",
             "loss_ci_low", "loss_ci_high", "on_frontier"])
    section("prompt_cache", "prompt_cache (answer calls, provider-reported cached tokens, means per case; "
            "agentlab/bench/scoring/call_costs.py)", payload.get("prompt_cache"),
            ["run_id", "mode", "variant", "model", "cached_tokens", "uncached_tokens", "cache_hit_pct", "raw_cost_usd",
             "net_cost_usd"])
    if shown is None:
        out.write("".join(f"{note}\n" for note in payload.get("prompt_cache_notes", [])))
    if payload.get("between") is not None:
        section("between", "between variants (B - A, paired on shared cases)", payload["between"],
                ["mode", "model", "metric", "variant_a", "variant_b", "mean_a", "mean_b", "delta", *stats_columns])
    notes = sorted({n for key in ("token_savings", "quality_loss", "recovery")
                    if (df := payload.get(key)) is not None and len(df) and "stats_note" in df
                    for n in df["stats_note"].dropna()})
    if notes and shown is None:
        out.write("\nempty intervals / p-values: " + " | ".join(notes) + "\n")
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


def _benchmark_tables(benchmark: str, store: ResultStore, task: Task | None = None) -> dict[str, Any]:
    """A task's own report tables (``Task.report_tables``), also written to the store as ``<benchmark>_<name>``."""
    if task is None:
        try:
            task = get_task(benchmark)
        except UnknownBenchmark:
            return {}
    tables = {f"{benchmark}_{name}": df for name, df in task.report_tables(store).items() if df is not None}
    for name, df in tables.items():
        if len(df.columns):
            store.write_frame(name, df)
    return tables


