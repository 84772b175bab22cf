"""Figures of notebook 05: recorded agent trajectories replayed under each arm (no model).

:func:`supported_against_tokens` puts one point per arm — mean ``supported`` share against mean
total prompt tokens, with its 95 % bootstrap interval over trajectories as a vertical bar — and
:func:`hidden_by_step` draws one trajectory step by step: which support each arm hid at which step.
Both titles say the measure is LLM-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentlab.bench.retention.trajectories import TrajectoryRow, TrajectorySummary

NO_MODEL = "no model: LLM-free measure"


def supported_against_tokens(summaries: Sequence[TrajectorySummary], dataset: str, budget: int) -> Any:
    """One point per arm of ``dataset``: supported share (with its interval) against mean total prompt tokens."""
    import matplotlib.pyplot as plt

    group = [s for s in summaries if s.dataset == dataset and s.supported.mean is not None]
    if not group:
        raise ValueError(f"no arm of {dataset!r} has a supported share to plot")
    fig, ax = plt.subplots(figsize=(10, 5))
    for s in group:
        mean = s.supported.mean or 0.0
        low = mean - (s.supported.low if s.supported.low is not None else mean)
        high = (s.supported.high if s.supported.high is not None else mean) - mean
        ax.errorbar([s.mean_total_prompt_tokens], [mean], yerr=[[low], [high]], fmt="o", capsize=3,
                    label=f"{s.arm} ({mean:.3f})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_xlabel("mean prompt tokens sent per trajectory (sum over steps)")
    ax.set_ylabel("supported (share of step supports visible)")
    ax.set_title(f"{dataset}: supports kept vs tokens sent, budget {budget} "
                 f"({group[0].n_trajectories} trajectories; 95% bootstrap interval)\n{NO_MODEL}", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def hidden_by_step(rows: Sequence[TrajectoryRow], step_indices: Sequence[int], traj_id: str) -> Any:
    """A grid for one trajectory: arms by assistant step, each cell the number of supports the arm hid there."""
    import matplotlib.pyplot as plt

    mine = [r for r in rows if r.traj_id == traj_id]
    if not mine:
        raise ValueError(f"no rows for trajectory {traj_id!r}")
    column = {index: j for j, index in enumerate(step_indices)}
    grid = [[0] * len(step_indices) for _ in mine]
    labels: dict[tuple[int, int], list[str]] = {}
    for i, row in enumerate(mine):
        for index, text in row.hidden:
            grid[i][column[index]] += 1
            labels.setdefault((i, column[index]), []).append(text[:14])
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(step_indices)), 0.45 * len(mine) + 1.6))
    ax.imshow(grid, cmap="Reds", aspect="auto", vmin=0)
    top = max(max(r) for r in grid) or 1
    for (i, j), texts in labels.items():
        ax.text(j, i, "\n".join(texts[:2]), ha="center", va="center", fontsize=5,
                color="white" if grid[i][j] > top / 2 else "black")
    ax.set_yticks(range(len(mine)), [r.arm for r in mine], fontsize=7)
    ax.set_xticks(range(len(step_indices)), [str(k + 1) for k in range(len(step_indices))], fontsize=7)
    ax.set_xlabel("assistant step")
    ax.set_title(f"{traj_id}: supports each arm hid, by step (cell: count, first values)\n{NO_MODEL}", fontsize=9)
    fig.tight_layout()
    return fig


__all__ = ["NO_MODEL", "hidden_by_step", "supported_against_tokens"]
