"""Notebook 05's long sessions: Claude Code runs replayed per arm, and the cache model against the bill.

:func:`measure_long_sessions` runs ``python -m agentlab.bench retention trajectories`` on the first
sessions of the ``claude_code`` dataset at each budget with the ``anthropic`` cache profile, storing
into a DuckDB file, and :func:`long_session_table` reads the stored tables back (the
``trajectory_retention`` rows joined to their ``prompt_cache`` figures) into one row per budget and
arm: mean ``supported`` (with the summarising arms' bounds ``supported_lo`` / ``supported_hi`` when
the stored rows have them) and mean net cost per session. :func:`supported_against_cost` and
:func:`predicted_against_recorded` draw them; no model is called, and the titles say so. Nothing
here prints a session's content (the sessions carry no license).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NO_MODEL = "no model: LLM-free replay of recorded Claude Code sessions"


def measure_long_sessions(db: Path, limit: int, budgets: Sequence[int], arms: Sequence[str]) -> list[str]:
    """Run the replay at each budget into ``db``; the commands' printed outputs, one per budget."""
    from agentlab.bench.cli.main import main

    outputs = []
    for budget in budgets:
        out = io.StringIO()
        status = main(["retention", "trajectories", "--set", 'dataset.datasets=["claude_code"]', "--arms",
                       ",".join(arms), "--context-budget", str(budget), "--cache-profile", "anthropic", "--limit",
                       str(limit), "--db", str(db)], out=out)
        if status != 0:
            raise RuntimeError(f"retention at budget {budget} failed (status {status}); see the error above")
        outputs.append(out.getvalue())
    return outputs


def long_session_table(db: Path) -> Any:
    """One row per (budget, arm): sessions, mean supported (and its bounds when stored), mean net cost (USD)."""
    from agentlab.bench import analysis

    rows = analysis.trajectory_retention_df("claude_code", db=db)
    cache = analysis.prompt_cache_df("trajectories", db=db)
    cache = cache[(cache["benchmark"] == "claude_code") & (cache["cache_profile"] == "anthropic")]
    merged = rows.merge(cache[["context_budget", "arm", "case_id", "net_cost_usd", "raw_cost_usd", "hit_rate"]],
                        left_on=["context_budget", "arm", "traj_id"], right_on=["context_budget", "arm", "case_id"])
    for bound in ("supported_lo", "supported_hi"):
        if bound not in merged:
            merged[bound] = merged["supported"]
    return (merged.groupby(["context_budget", "arm"], sort=False)
            .agg(sessions=("traj_id", "nunique"), supported=("supported", "mean"),
                 supported_lo=("supported_lo", "mean"), supported_hi=("supported_hi", "mean"),
                 net_cost_usd=("net_cost_usd", "mean"), raw_cost_usd=("raw_cost_usd", "mean"),
                 hit_rate=("hit_rate", "mean"))
            .reset_index())


def cost_changes(db: Path, budget: int, against: Sequence[str] = ("long_context", "swe_agent_masking"),
                 dataset: str = "claude_code") -> Any:
    """Per arm at ``budget``: supports kept (a summarising arm's bounds), tokens sent, busts, raw and net $, and
    the change in net $ (``net_vs_<arm>``) and in raw $ (``raw_vs_<arm>``) against each arm of ``against``.

    The change is the mean over sessions of ``arm / other - 1`` (paired: the same session under both), with
    its 95 % bootstrap interval (:func:`agentlab.bench.scoring.stats.mean_with_ci`); means are per session.
    ``dataset``: ``claude_code_user`` for a user's own logs (``--sessions-dir``).
    """
    from agentlab.bench import analysis
    from agentlab.bench.scoring.stats import mean_with_ci

    rows = analysis.trajectory_retention_df(dataset, db=db)
    cache = analysis.prompt_cache_df("trajectories", db=db)
    cache = cache[(cache["benchmark"] == dataset) & (cache["cache_profile"] == "anthropic")
                  & (cache["context_budget"] == budget)]
    rows = rows[rows["context_budget"] == budget]
    merged = rows.merge(cache[["arm", "case_id", "prompt_tokens", "n_busts", "net_cost_usd", "raw_cost_usd"]],
                        left_on=["arm", "traj_id"], right_on=["arm", "case_id"])
    if merged.empty:
        raise ValueError(f"no stored {dataset} row with an anthropic cache figure at budget {budget} in {db}")
    out = (merged.groupby("arm", sort=False)
           .agg(sessions=("traj_id", "nunique"), supported=("supported", "mean"),
                supported_lo=("supported_lo", "mean"), supported_hi=("supported_hi", "mean"),
                tokens_sent=("prompt_tokens", "mean"), busts=("n_busts", "mean"),
                raw_cost_usd=("raw_cost_usd", "mean"), net_cost_usd=("net_cost_usd", "mean"))
           .reset_index())
    for column, label in (("net_cost_usd", "net"), ("raw_cost_usd", "raw")):
        costs = merged.pivot_table(index="traj_id", columns="arm", values=column)
        for other in against:
            if other not in costs:
                continue
            changes = []
            for arm in out["arm"]:
                paired = costs[[arm, other]].dropna()
                r = mean_with_ci(list(paired[arm] / paired[other] - 1)) if arm != other and len(paired) else None
                changes.append((None, None, None) if r is None else (r.estimate, r.ci_low, r.ci_high))
            out[f"{label}_vs_{other}"] = [c[0] for c in changes]
            out[f"{label}_vs_{other}_low"] = [c[1] for c in changes]
            out[f"{label}_vs_{other}_high"] = [c[2] for c in changes]
    return out


def supported_against_cost(table: Any, budget: int) -> Any:
    """One point per arm at ``budget``: mean supported (a bar from the lower to the upper bound) against net cost."""
    import matplotlib.pyplot as plt

    group = table[table["context_budget"] == budget]
    if group.empty:
        raise ValueError(f"no stored row at budget {budget}")
    fig, ax = plt.subplots(figsize=(10, 5))
    for _, r in group.iterrows():
        ax.errorbar([r["net_cost_usd"]], [r["supported"]],
                    yerr=[[r["supported"] - r["supported_lo"]], [r["supported_hi"] - r["supported"]]],
                    fmt="o", capsize=3, label=f"{r['arm']} ({r['supported']:.3f}, ${r['net_cost_usd']:.3f})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_xlabel("mean net input cost per session under Anthropic's prompt cache (USD, Sonnet 4.5 prices)")
    ax.set_ylabel("supported (share of step supports visible)")
    ax.set_title(f"claude_code: supports kept vs cost with caching, budget {budget} "
                 f"({int(group['sessions'].max())} sessions; bars: a summarising arm's bounds)\n{NO_MODEL}",
                 fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def predicted_against_recorded(result: Any, profile: str = "anthropic") -> Any:
    """Per session, predicted against recorded input cost (one series per model variant), the diagonal drawn."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    top = 0.0
    for variant in dict.fromkeys(s.variant for s in result.sessions):
        mine = [s for s in result.sessions if s.profile == profile and s.variant == variant]
        ax.scatter([s.recorded for s in mine], [s.predicted for s in mine], s=14, alpha=0.7, label=variant)
        top = max([top, *(s.recorded for s in mine), *(s.predicted for s in mine)])
    ax.plot([0, top], [0, top], color="grey", lw=1, ls="--", label="predicted = recorded")
    ax.set_xlabel("recorded input cost per session (USD, from the provider's usage)")
    ax.set_ylabel(f"predicted input cost ({profile} profile, USD)")
    ax.set_title(f"cache model vs the bill, long_context, {result.n_sessions} sessions\n{NO_MODEL}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


__all__ = ["NO_MODEL", "cost_changes", "long_session_table", "measure_long_sessions", "predicted_against_recorded",
           "supported_against_cost"]
