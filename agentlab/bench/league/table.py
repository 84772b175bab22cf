"""The league's table: what a league is (:class:`LeagueArm`, :class:`LeagueResult`), its rows from the
stored cases and calls, the Pareto marks, its storage and its printed form.

:mod:`agentlab.bench.league.play` runs a league and re-exports every name here; the definitions of the
columns are in its docstring.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import agentlab.bench.scoring.call_costs as call_costs
from agentlab.bench.config import canonical_json
from agentlab.bench.league.store import COLUMN_NAMES, create_tables
from agentlab.bench.scoring.recovery_rule import RECOVERY_GAP as RECOVERY_GAP
from agentlab.bench.scoring.recovery_rule import RECOVERY_RELATIVE_GAP as RECOVERY_RELATIVE_GAP
from agentlab.bench.scoring.recovery_rule import no_loss_reason
from agentlab.bench.scoring.stats import mean_with_ci, paired_difference, pareto_front, recovery_ratio
from agentlab.bench.spec import RunSpec
from agentlab.bench.store.results import ResultStore
from agentlab.bench.usage import UsageError

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
    :data:`~agentlab.bench.scoring.recovery_rule.RECOVERY_RELATIVE_GAP` of the baseline's mean.
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
    call_costs.add_to_rows(store.query, rows)
    return rows


def pick_metric(rows: Sequence[dict[str, Any]], metric: str | None) -> tuple[str | None, str]:
    """The primary metric (for the printed Pareto flag) and how it was chosen."""
    scored = sorted({r["metric"] for r in rows if r["metric"] is not None})
    if metric is not None:
        if metric not in scored:
            raise UsageError(f"--metric {metric!r}: the league's runs score {', '.join(scored) or 'no metric'}")
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
    lines.extend(call_costs.league_lines(result.rows, primary, result.model))
    failed = sum(r["n_failed"] for r in result.rows if r["metric"] == primary)
    if failed:
        lines.append(f"{failed} failed case(s) are counted above (scored 0 in delta; left out of savings and peak)")
    lines.append(f"{result.calls_made} model calls sent this time, {result.calls_replayed} replayed from the call "
                 "cache (cases already stored cost none); "
                 f"{result.seconds:.1f} s; stored as league {result.league_id} (analysis.league_df)")
    return "\n".join(lines) + "\n"


__all__ = [
    "LEAGUE_VERSION",
    "LeagueArm",
    "LeagueResult",
    "PRIMARY_METRICS",
    "RECOVERY_GAP",
    "RECOVERY_RELATIVE_GAP",
    "compute_rows",
    "format_league",
    "mark_pareto",
    "pick_metric",
    "recovery_of",
    "write_league",
]
