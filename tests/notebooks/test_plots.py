"""The Pareto plot's layout logic: coinciding runs, tick labels of a narrow range, label placement."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from agentlab.notebooks import plots  # noqa: E402


def pareto_points(coords: list[tuple[float, float]]) -> pd.DataFrame:
    """A pareto_df-shaped frame, one summary run per (savings, loss) coordinate."""
    return pd.DataFrame([{
        "benchmark": "qmsum", "model": "openai:fake", "metric": "rougeL", "mode": "summary", "variant": f"v{i}",
        "token_savings": x, "savings_ci_low": x - 0.001, "savings_ci_high": x + 0.001, "quality_loss": y,
        "loss_ci_low": y - 0.002, "loss_ci_high": y + 0.002, "loss_n_pairs": 4, "on_frontier": True,
    } for i, (x, y) in enumerate(coords)])


def test_percent_ticks_of_a_narrow_range_are_distinct() -> None:
    ticks = [0.988, 0.99, 0.992, 0.994, 0.996]
    labels = plots.percent_labels(ticks)
    assert labels == ["98.8%", "99.0%", "99.2%", "99.4%", "99.6%"]
    assert len(set(plots.percent_labels([0.9915, 0.992, 0.9925]))) == 3
    assert plots.percent_labels([0.0, 0.5, 1.0]) == ["0%", "50%", "100%"]


def test_identical_points_get_one_combined_label() -> None:
    groups = plots.coincident_groups([0.99, 0.5, 0.99, 0.99], [0.01, 0.2, 0.01, 0.01])
    assert groups == [[0, 2, 3], [1]]
    label = plots.pareto_label(["summary · a", "summary · b"], [4, 4])
    assert label.splitlines() == ["2 runs at the same point (n=4 each):", "summary · a", "summary · b"]
    assert plots.pareto_label(["summary · a"], [3]) == "summary · a  (n=3)"


def test_labels_are_placed_apart_and_inside() -> None:
    anchors = [(100.0, 100.0)] * 3 + [(104.0, 102.0)]
    boxes = plots.place_labels(anchors, [(80.0, 20.0)] * 4, (0.0, 0.0, 400.0, 300.0))
    for i, a in enumerate(boxes):
        assert 0 <= a[0] and a[2] <= 400 and 0 <= a[1] and a[3] <= 300
        for b in boxes[i + 1:]:
            assert plots._overlap(a, b) == 0, (a, b)


@pytest.mark.parametrize("coords, n_labels", [
    ([(0.9921, 0.0067)] * 3 + [(0.9921 + 1e-12, 0.0067)], 1),          # notebook 03 today: four equal runs
    ([(0.9905, 0.004), (0.9921, 0.0067), (0.9921, 0.0067), (0.993, 0.012)], 3),
])
def test_the_drawn_plot_is_legible(coords: list[tuple[float, float]], n_labels: int) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    plots.plot_pareto(pareto_points(coords), ax=ax)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert len(ticks) == len(set(ticks)) > 2, ticks
    texts = [t for t in ax.texts if t.get_text()]
    assert len(texts) == n_labels
    boxes = [t.get_window_extent(renderer) for t in texts]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (texts, a, b)
    frame = ax.get_window_extent(renderer)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 for b in boxes)
    assert "%" in ax.get_xlabel() and "Δ rougeL" in ax.get_ylabel()
    frontier = [line for line in ax.get_lines() if line.get_label() == "frontier"]
    assert len(frontier) == (n_labels > 1), "a frontier line joins distinct points only"
    plt.close(fig)


def test_grouped_bars_on_a_shared_axis_are_not_clipped_by_the_panel_drawn_first() -> None:
    small = pd.DataFrame({"category": ["a", "b"], "x": [0.1, 0.2]})
    large = pd.DataFrame({"category": ["a", "b"], "x": [0.5, 0.7]})
    fig, (left, right) = plt.subplots(1, 2, sharey=True)
    plots.plot_grouped_bars(small, "category", ["x"], ax=left)
    plots.plot_grouped_bars(large, "category", ["x"], ax=right)
    assert right.get_ylim()[1] >= 0.7 and left.get_ylim() == right.get_ylim()
    plt.close(fig)


def test_the_pareto_plot_draws_the_delta_of_the_table_beside_it() -> None:
    # pareto_df's quality_loss is baseline − variant; the table printed beside the plot has
    # delta = variant − baseline: the plot draws the delta, and its interval negated.
    fig, ax = plt.subplots(figsize=(8, 4.5))
    plots.plot_pareto(pareto_points([(0.5, 0.05)]), ax=ax)
    (line,) = [c for c in ax.get_children() if isinstance(c, matplotlib.lines.Line2D) and len(c.get_ydata()) == 1
               and c.get_marker() == "o"]
    assert line.get_ydata()[0] == pytest.approx(-0.05)
    assert "variant − baseline; higher is better" in ax.get_ylabel()
    caps = sorted(float(y) for c in ax.get_children() if isinstance(c, matplotlib.lines.Line2D)
                  and c.get_marker() == "_" for y in c.get_ydata())
    assert caps[:1] + caps[-1:] == pytest.approx([-0.052, -0.048])  # the loss interval [0.048, 0.052], negated
    plt.close(fig)


def test_grouped_bars_tell_a_missing_value_from_a_zero_and_say_when_all_are_zero() -> None:
    frame = pd.DataFrame({"category": ["a", "b"], "x": [0.0, float("nan")], "y": [0.4, 0.0]})
    fig, ax = plt.subplots()
    plots.plot_grouped_bars(frame, "category", ["x", "y"], ax=ax)
    marks = sorted(t.get_text() for t in ax.texts)
    assert marks == ["0", "0", "–"] and ax.get_ylabel() == "mean over cases"
    zeros = pd.DataFrame({"category": ["a", "b"], "x": [0.0, 0.0]})
    fig2, ax2 = plt.subplots()
    plots.plot_grouped_bars(zeros, "category", ["x"], ax=ax2)
    assert "every value is 0" in [t.get_text() for t in ax2.texts]
    plt.close(fig)
    plt.close(fig2)
