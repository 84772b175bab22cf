"""Notebook 05's figures on hand-made rows: titles say no model; a hidden support lands in its step's cell."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from agentlab.bench.retention.trajectories import TrajectoryRow, aggregate_trajectories  # noqa: E402
from agentlab.notebooks.trajectory_view import NO_MODEL, hidden_by_step, supported_against_tokens  # noqa: E402


def _row(arm: str, supported: float, hidden: tuple[tuple[int, str], ...] = ()) -> TrajectoryRow:
    return TrajectoryRow("tau_bench/1-0", "tau_bench", arm, 3, 2, 4, supported, None, len(hidden), 10, 100, 250, 90,
                         1.0, hidden)


def test_figures_say_no_model_and_place_hidden_supports() -> None:
    rows = [_row("long_context", 1.0), _row("inspect_trim", 0.5, ((3, "HAT001"), (5, "ZZ9QX1")))]
    fig = supported_against_tokens(aggregate_trajectories(rows, 2048), "tau_bench", 2048)
    assert NO_MODEL in fig.axes[0].get_title()
    grid = hidden_by_step(rows, [1, 3, 5], "tau_bench/1-0")
    ax = grid.axes[0]
    assert NO_MODEL in ax.get_title()
    cells = ax.images[0].get_array()
    assert cells.tolist() == [[0, 0, 0], [0, 1, 1]]
    assert {t.get_text() for t in ax.texts} == {"HAT001", "ZZ9QX1"}
