"""The charts the analysis notebooks share, one colour per mode in all of them.

matplotlib is imported inside each function, so this module loads without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pandas as pd

from agentlab.notebooks.results import published_savings_column

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: One colour per mode, the same in every notebook.
MODE_COLOURS: dict[str, str] = {
    "long_context": "#4c72b0", "baseline": "#4c72b0", "summary": "#dd8452", "recall": "#55a868",
    "session_recall": "#55a868", "memory": "#8172b3", "memory_original": "#937860",
}


def plot_grouped_bars(frame: pd.DataFrame, category: str, columns: Sequence[str], *, ax: Axes | None = None,
                      title: str = "", ylabel: str = "", percent: bool = False,
                      colours: Sequence[str] | None = None) -> Axes:
    """One group of bars per ``category`` value, one bar per column (NaN bars are left out)."""
    import matplotlib.pyplot as plt
    import numpy as np

    ax = ax or plt.subplots()[1]
    x = np.arange(len(frame))
    width = 0.8 / max(1, len(columns))
    for i, column in enumerate(columns):
        values = frame[column].astype(float).to_numpy()
        colour = colours[i] if colours else MODE_COLOURS.get(column)
        ax.bar(x + (i - (len(columns) - 1) / 2) * width, np.nan_to_num(values, nan=0.0), width,
               label=column, color=colour, alpha=0.9)
    ax.set_xticks(x, [str(v) for v in frame[category]])
    ax.set_ylabel(ylabel)
    if percent:
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.axhline(0, color="black", linewidth=0.8)
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.18 * (high - low))  # headroom so the legend does not cover bars
    ax.set_title(title)
    ax.legend(fontsize=8, ncols=min(4, len(columns)), loc="upper right")
    return ax


def plot_savings_distribution(per_case: pd.DataFrame, *, column: str | None = None, ax: Axes | None = None,
                              published_points: Mapping[str, float] | None = None, title: str = "") -> Axes:
    """Per-case savings of each mode as dots over a box; published aggregates as diamonds.

    ``column`` defaults to the savings column of the benchmark's published token rule
    (:func:`published_savings_column`), so the dots and the diamonds count tokens the same way.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    column = column or published_savings_column(per_case)
    ax = ax or plt.subplots()[1]
    published_points = {m: v for m, v in (published_points or {}).items() if v is not None and not pd.isna(v)}
    cases = per_case[per_case["level"] == "case"] if "level" in per_case else per_case
    modes = list(dict.fromkeys(cases["mode"])) if len(cases) else []
    modes += [m for m in published_points if m not in modes]
    order = list(MODE_COLOURS)
    modes.sort(key=lambda m: order.index(m) if m in order else len(order))
    for i, mode in enumerate(modes):
        values = cases.loc[cases["mode"] == mode, column].dropna().astype(float).to_numpy()
        colour = MODE_COLOURS.get(mode, "grey")
        if len(values) > 1:
            ax.boxplot(values, positions=[i], widths=0.5, showfliers=False, medianprops={"color": colour})
        jitter = np.linspace(-0.12, 0.12, len(values)) if len(values) > 1 else np.zeros(len(values))
        ax.scatter(i + jitter, values, color=colour, alpha=0.8, zorder=3,
                   label="ours, per case" if i == 0 else None)
        if published_points and mode in published_points:
            ax.scatter([i], [published_points[mode]], marker="D", s=70, facecolor="none", edgecolor="black",
                       zorder=4, label="published (aggregate)" if not ax.get_legend_handles_labels()[1].count(
                           "published (aggregate)") else None)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(modes)), modes)
    ax.set_ylabel(column.replace("_", " "))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_title(title or f"{column.replace('_', ' ')} per case vs the baseline")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return ax


def plot_quality_vs_savings(ours: pd.DataFrame, metric: str, *, published_frame: pd.DataFrame | None = None,
                            published_savings: str = "prompt_savings", published_metric: str | None = None,
                            ax: Axes | None = None, title: str = "") -> Axes:
    """Quality (y) against prompt savings (x) per mode: ours filled, published hollow."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots()[1]
    for _, row in ours.iterrows():
        colour = MODE_COLOURS.get(row["mode"], "grey")
        ax.scatter(row["prompt_savings"], row[metric], s=80, color=colour, zorder=3)
        ax.annotate(f"{row['mode']} (ours)", (row["prompt_savings"], row[metric]), textcoords="offset points",
                    xytext=(6, 4), fontsize=8)
    if published_frame is not None and len(published_frame):
        column = published_metric or metric
        for _, row in published_frame.iterrows():
            x = row[published_savings]
            x = 0.0 if pd.isna(x) else x
            colour = MODE_COLOURS.get(row["mode"], "grey")
            ax.scatter(x, row[column], s=80, facecolor="none", edgecolor=colour, linewidth=2, zorder=3)
            ax.annotate(f"{row['mode']} (published)", (x, row[column]), textcoords="offset points",
                        xytext=(6, -10), fontsize=8, color="dimgrey")
    low, high = ax.get_xlim()
    ax.set_xlim(min(low, -0.05), max(high, 1.15))  # room for the labels right of the points
    ax.set_xlabel("prompt savings vs the baseline mode (mean per case)")
    ax.set_ylabel(metric)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_title(title or f"{metric} against savings: filled = ours, hollow = published")
    return ax


def plot_pareto(points: pd.DataFrame, *, ax: Axes | None = None, title: str = "") -> Axes:
    """Quality loss (y, lower is better) against token savings (x, higher is better), one point per
    (mode, variant) run with its 95 % intervals as error bars; frontier points filled and joined.

    ``points`` is :func:`agentlab.bench.analysis.pareto_df` for one benchmark, model and metric.
    An empty interval (too few pairs) draws no bar; the point is still shown.
    """
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 4.5))[1]
    if points.empty:
        ax.text(0.5, 0.5, "no compared runs", ha="center", va="center", transform=ax.transAxes)
        return ax
    metrics = sorted(set(points["metric"]))
    if len(metrics) != 1 or points["model"].nunique() != 1:
        raise ValueError(f"plot_pareto draws one metric of one model; got metrics {metrics}, "
                         f"models {sorted(set(points['model']))}: filter pareto_df first")

    def half_widths(centre: pd.Series, low: pd.Series, high: pd.Series) -> list[list[float]]:
        below = (centre - low).where(low.notna(), 0.0).clip(lower=0.0)
        above = (high - centre).where(high.notna(), 0.0).clip(lower=0.0)
        return [below.tolist(), above.tolist()]

    for _, row in points.iterrows():
        colour = MODE_COLOURS.get(row["mode"], "grey")
        one = points.loc[[_]]
        ax.errorbar(row["token_savings"], row["quality_loss"],
                    xerr=half_widths(one["token_savings"], one["savings_ci_low"], one["savings_ci_high"]),
                    yerr=half_widths(one["quality_loss"], one["loss_ci_low"], one["loss_ci_high"]),
                    fmt="o", color=colour, markerfacecolor=colour if row["on_frontier"] else "white",
                    markersize=8, capsize=3, zorder=3)
        ax.annotate(f"{row['mode']} · {row['variant']}  (n={int(row['loss_n_pairs'])})",
                    (row["token_savings"], row["quality_loss"]), textcoords="offset points", xytext=(6, 5), fontsize=8)
    front = points[points["on_frontier"]].sort_values("token_savings")
    if len(front) > 1:
        ax.plot(front["token_savings"], front["quality_loss"], color="black", linewidth=0.8, linestyle="--",
                zorder=2, label="frontier")
        ax.legend(fontsize=8, loc="best")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("token savings vs the baseline run (mean of per-case prompt savings)")
    ax.set_ylabel(f"quality loss ({metrics[0]}: baseline − variant)")
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_title(title or f"{metrics[0]}: savings against loss, 95 % paired intervals (filled = on the frontier)")
    return ax
