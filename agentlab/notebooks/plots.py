"""The charts the analysis notebooks share, one colour per mode in all of them.

matplotlib is imported inside each function, so this module loads without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from agentlab.notebooks.results import published_savings_column

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: One colour per mode, the same in every notebook.
MODE_COLOURS: dict[str, str] = {
    "long_context": "#4c72b0", "baseline": "#4c72b0", "summary": "#dd8452", "recall": "#55a868",
    "session_recall": "#55a868", "memory": "#8172b3", "memory_original": "#937860",
}


#: Axis labels of the metrics the notebooks plot (a metric not listed is labelled with its own name).
METRIC_LABELS: dict[str, str] = {
    "rouge1": "ROUGE-1 F1", "rouge2": "ROUGE-2 F1", "rougeL": "ROUGE-L F1", "bleu1": "BLEU-1",
    "f1": "token F1", "exact_match": "exact match", "llm_score": "LLM-judge score",
    "locomo_f1": "F1 (LoCoMo's official scorer)", "consistency": "consistency (0.4 + 0.6 × judge)",
    "prompt_savings": "prompt savings (all answer calls)", "prompt_savings_last": "prompt savings (last answer call)",
    "total_savings": "total-token savings",
}


def metric_label(metric: str) -> str:
    """A readable axis label for ``metric`` (:data:`METRIC_LABELS`), else the metric's name."""
    return METRIC_LABELS.get(metric, metric.replace("_", " "))


def plot_grouped_bars(frame: pd.DataFrame, category: str, columns: Sequence[str], *, ax: Axes | None = None,
                      title: str = "", ylabel: str = "mean over cases", percent: bool = False,
                      colours: Sequence[str] | None = None) -> Axes:
    """One group of bars per ``category`` value, one bar per column.

    A bar without a value (NaN: not reached) is marked "–" on the zero line, a bar of exactly 0 is
    marked "0", so the two are never both an empty slot; a panel whose every value is 0 or missing
    says so in its middle.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    ax = ax or plt.subplots()[1]
    x = np.arange(len(frame))
    width = 0.8 / max(1, len(columns))
    for i, column in enumerate(columns):
        values = frame[column].astype(float).to_numpy()
        colour = colours[i] if colours else MODE_COLOURS.get(column)
        where = x + (i - (len(columns) - 1) / 2) * width
        ax.bar(where, np.nan_to_num(values, nan=0.0), width, label=column, color=colour, alpha=0.9)
        for position, value in zip(where, values, strict=True):
            if not np.isfinite(value) or value == 0:
                ax.annotate("–" if not np.isfinite(value) else "0", (position, 0.0), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", fontsize=7, color=colour)
    finite = [float(v) for c in columns for v in frame[c].astype(float) if np.isfinite(v)]
    if not any(finite):
        ax.text(0.5, 0.55, "no values (– = not reached)" if not finite else "every value is 0",
                transform=ax.transAxes, ha="center", va="center", color="dimgrey")
    ax.set_xticks(x, [str(v) for v in frame[category]])
    ax.set_ylabel(ylabel)
    if percent:
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.axhline(0, color="black", linewidth=0.8)
    drawn = [float(v) for c in columns for v in frame[c].astype(float) if np.isfinite(v)]
    low, high = ax.get_ylim()
    # From the data as well as the current limits: on an axis shared with a panel drawn before
    # (sharey), the limits that panel set must not clip these bars.
    low, high = min(low, *drawn, 0.0), max(high, *drawn, 0.0)
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
    ax.set_ylabel(metric_label(column))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_title(title or f"{column.replace('_', ' ')} per case vs the baseline")
    if not len(cases) or cases[column].dropna().empty:
        ax.text(0.5, 0.5, "no case is ok in both modes: no per-case savings", transform=ax.transAxes,
                ha="center", va="center", color="dimgrey")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return ax


def plot_quality_vs_savings(ours: pd.DataFrame, metric: str, *, published_frame: pd.DataFrame | None = None,
                            published_savings: str = "prompt_savings", published_metric: str | None = None,
                            ax: Axes | None = None, title: str = "", ylabel: str = "") -> Axes:
    """Quality (y) against prompt savings (x) per mode: ours filled, published hollow.

    ``ylabel`` defaults to the metric's readable name (:func:`metric_label`).
    """
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots()[1]
    anchors: list[tuple[float, float]] = []
    labels: list[str] = []
    for _, row in ours.iterrows():
        colour = MODE_COLOURS.get(row["mode"], "grey")
        ax.scatter(row["prompt_savings"], row[metric], s=80, color=colour, zorder=3)
        anchors.append((float(row["prompt_savings"]), float(row[metric])))
        labels.append(f"{row['mode']} (ours)")
    if published_frame is not None and len(published_frame):
        column = published_metric or metric
        for _, row in published_frame.iterrows():
            x = row[published_savings]
            x = 0.0 if pd.isna(x) else x
            colour = MODE_COLOURS.get(row["mode"], "grey")
            ax.scatter(x, row[column], s=80, facecolor="none", edgecolor=colour, linewidth=2, zorder=3)
            anchors.append((float(x), float(row[column])))
            labels.append(f"{row['mode']} (published)")
    low, high = ax.get_xlim()
    ax.set_xlim(min(low, -0.05), max(high, 1.15))  # room for the labels right of the points
    ax.set_xlabel("prompt savings vs the baseline mode (mean per case)")
    ax.set_ylabel(ylabel or f"{metric_label(metric)} (mean)")
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_title(title or f"{metric} against savings: filled = ours, hollow = published")
    figure = ax.get_figure(root=True)
    if figure is not None:
        figure.tight_layout()  # the labels are placed in display pixels: lay the figure out first
    finite = [(a, lab) for a, lab in zip(anchors, labels, strict=True) if all(v == v for v in a)]
    label_points(ax, [a for a, _ in finite], [lab for _, lab in finite])
    return ax


#: Two Pareto points closer than this on both axes are one point: drawn once, labelled together.
COINCIDENT_TOLERANCE = 1e-9

#: A box on the display: (x0, y0, x1, y1) in pixels, y upwards.
Box = tuple[float, float, float, float]


def percent_decimals(values: Sequence[float], *, most: int = 6) -> int:
    """The fewest decimals (of a percentage) that print the tick ``values`` as distinct labels.

    ``[0.99, 0.991, 0.992]`` needs one (``99.0%``, ``99.1%``, ``99.2%``); ``[0, 0.5, 1]`` none.
    """
    finite = sorted({float(v) for v in values if v == v})
    for decimals in range(most + 1):
        labels = [f"{100 * v:.{decimals}f}" for v in finite]
        if len(set(labels)) == len(labels):
            return decimals
    return most


def percent_labels(values: Sequence[float]) -> list[str]:
    """Tick labels of ``values`` (fractions) as percentages, with :func:`percent_decimals` decimals."""
    decimals = percent_decimals(values)
    return [f"{100 * float(v):.{decimals}f}%" for v in values]


def coincident_groups(xs: Sequence[float], ys: Sequence[float], *,
                      tolerance: float = COINCIDENT_TOLERANCE) -> list[list[int]]:
    """Indices of the points that sit on the same spot (within ``tolerance`` on both axes), in input order."""
    groups: list[list[int]] = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        for group in groups:
            first = group[0]
            if abs(xs[first] - x) <= tolerance and abs(ys[first] - y) <= tolerance:
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def pareto_label(names: Sequence[str], pairs: Sequence[int]) -> str:
    """The label of one drawn point: its run, or every run at that spot and that they coincide."""
    if len(names) == 1:
        return f"{names[0]}  (n={pairs[0]})"
    same_n = len(set(pairs)) == 1
    head = f"{len(names)} runs at the same point" + (f" (n={pairs[0]} each):" if same_n else ":")
    lines = [name if same_n else f"{name}  (n={n})" for name, n in zip(names, pairs, strict=True)]
    return "\n".join([head, *lines])


def _overlap(a: Box, b: Box) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return width * height if width > 0 and height > 0 else 0.0


def _outside(box: Box, bounds: Box) -> float:
    area = (box[2] - box[0]) * (box[3] - box[1])
    return area - _overlap(box, bounds)


def place_labels(anchors: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]], bounds: Box, *,
                 obstacles: Sequence[Box] = (), distances: Sequence[float] = (8, 16, 30, 50, 80, 120)) -> list[Box]:
    """Boxes for labels of ``sizes`` near their ``anchors`` (display pixels), overlapping each other least.

    Tries each anchor's eight compass positions at growing distances and keeps the first whose box
    stays inside ``bounds`` and clear of the labels placed before it and of ``obstacles`` (the
    markers); when none is clear, the one that overlaps least.
    """
    directions = [(1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1)]
    placed: list[Box] = []
    for (ax_, ay), (width, height) in zip(anchors, sizes, strict=True):
        best: tuple[float, Box] | None = None
        for distance in distances:
            for dx, dy in directions:
                x0 = ax_ + distance if dx > 0 else ax_ - distance - width if dx < 0 else ax_ - width / 2
                y0 = ay + distance if dy > 0 else ay - distance - height if dy < 0 else ay - height / 2
                box = (x0, y0, x0 + width, y0 + height)
                cost = 10 * _outside(box, bounds) + sum(_overlap(box, other) for other in [*placed, *obstacles])
                if best is None or cost < best[0]:
                    best = (cost, box)
                if cost == 0:
                    break
            if best is not None and best[0] == 0:
                break
        assert best is not None
        placed.append(best[1])
    return placed


def _percent_formatter() -> Any:
    """A tick formatter printing fractions as percentages with as many decimals as the ticks need."""
    from matplotlib.ticker import Formatter

    class PercentTicks(Formatter):
        decimals = 0

        def set_locs(self, locs: list[float]) -> None:
            super().set_locs(locs)
            self.decimals = percent_decimals(locs)

        def __call__(self, x: float, pos: int | None = None) -> str:
            return f"{100 * x:.{self.decimals}f}%"

    return PercentTicks()


def _widen(low: float, high: float, least: float) -> tuple[float, float]:
    """``(low, high)`` widened about its centre to at least ``least``, plus 8 % on each side."""
    centre, half = (low + high) / 2, max(high - low, least) / 2
    return centre - 1.08 * half, centre + 1.08 * half


def label_points(ax: Axes, anchors: Sequence[tuple[float, float]], labels: Sequence[str], *,
                 fontsize: float = 8, color: str | None = None) -> list[Any]:
    """Annotate each data point ``anchors[i]`` with ``labels[i]``, placed so that labels overlap least.

    The labels are drawn, measured in display pixels and moved by :func:`place_labels` (clear of the
    other labels and of the markers, inside the axes), each joined to its point by a thin line.
    Lay the figure out (``tight_layout``) before calling, so the measured pixels hold.
    """
    figure = ax.get_figure(root=True)
    assert figure is not None
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    texts = [ax.annotate(label, anchor, textcoords="offset points", xytext=(0, 0), fontsize=fontsize,
                         color=color, ha="left", va="bottom", zorder=4,
                         bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
                         arrowprops={"arrowstyle": "-", "color": "grey", "linewidth": 0.6})
             for anchor, label in zip(anchors, labels, strict=True)]
    pixels = [tuple(ax.transData.transform(a)) for a in anchors]
    sizes = []
    for text in texts:
        extent = text.get_window_extent(renderer)
        sizes.append((extent.width + 4, extent.height + 4))
    frame = ax.get_window_extent(renderer)
    markers = [(px - 7, py - 7, px + 7, py + 7) for px, py in pixels]
    boxes = place_labels(pixels, sizes, (frame.x0, frame.y0, frame.x1, frame.y1), obstacles=markers)
    to_points = 72 / figure.dpi
    for text, (px, py), box in zip(texts, pixels, boxes, strict=True):
        text.xyann = ((box[0] + 2 - px) * to_points, (box[1] + 2 - py) * to_points)
    return texts


def plot_pareto(points: pd.DataFrame, *, ax: Axes | None = None, title: str = "") -> Axes:
    """Quality delta (y, variant − baseline, higher is better) against token savings (x, higher is
    better), one point per (mode, variant) run with its 95 % intervals as error bars; frontier points
    filled and joined.

    ``points`` is :func:`agentlab.bench.analysis.pareto_df` for one benchmark, model and metric. Its
    ``quality_loss`` is baseline − variant; the plot draws its negation, so the y axis reads like the
    ``delta`` column of ``quality_loss_df`` (and of the league) printed beside it.
    An empty interval (too few pairs) draws no bar; the point is still shown. Runs whose savings and
    loss coincide are drawn as one marker with one label naming all of them; labels are placed where
    they overlap neither each other nor a marker, and the savings ticks carry as many decimals as
    the range needs to tell them apart.
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
    points = points.reset_index(drop=True).copy()
    # delta = variant − baseline = −loss; the loss interval [low, high] becomes [−high, −low].
    points["delta"] = -points["quality_loss"].astype(float)
    points["delta_ci_low"] = -points["loss_ci_high"].astype(float)
    points["delta_ci_high"] = -points["loss_ci_low"].astype(float)

    def half_widths(centre: pd.Series, low: pd.Series, high: pd.Series) -> list[list[float]]:
        below = (centre - low).where(low.notna(), 0.0).clip(lower=0.0)
        above = (high - centre).where(high.notna(), 0.0).clip(lower=0.0)
        return [below.tolist(), above.tolist()]

    groups = coincident_groups(points["token_savings"].astype(float).tolist(),
                               points["delta"].tolist())
    for _, row in points.iterrows():
        colour = MODE_COLOURS.get(row["mode"], "grey")
        one = points.loc[[_]]
        ax.errorbar(row["token_savings"], row["delta"],
                    xerr=half_widths(one["token_savings"], one["savings_ci_low"], one["savings_ci_high"]),
                    yerr=half_widths(one["delta"], one["delta_ci_low"], one["delta_ci_high"]),
                    fmt="o", color=colour, markerfacecolor=colour if row["on_frontier"] else "white",
                    markersize=8, capsize=3, zorder=3)
    # One frontier vertex per drawn point: runs that coincide (to float noise) are one vertex, not a zero-length line.
    front = points.loc[[g[0] for g in groups if points.loc[g, "on_frontier"].any()]].sort_values("token_savings")
    if len(front) > 1:
        ax.plot(front["token_savings"], front["delta"], color="black", linewidth=0.8, linestyle="--",
                zorder=2, label="frontier")
    ax.axhline(0, color="grey", linewidth=0.8)
    low, high = ax.get_xlim()
    ax.set_xlim(*_widen(low, high, 0.01))  # at least one percentage point of savings across
    low, high = ax.get_ylim()
    ax.set_ylim(*_widen(low, high, 0.01))
    ax.set_xlabel("token savings (% of the baseline's prompt tokens, mean per case)")
    ax.set_ylabel(f"quality delta (Δ {metrics[0]}, in its units:\nvariant − baseline; higher is better)")
    ax.xaxis.set_major_formatter(_percent_formatter())
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_title(title or f"{metrics[0]}: savings against delta, 95 % paired intervals (filled = on the frontier)")

    # Labels go where they are clear, which needs the axes laid out in display pixels first.
    figure = ax.get_figure(root=True)
    assert figure is not None
    if len(figure.axes) == 1:  # a figure of its own: lay it out now, so the pixels measured below hold
        figure.tight_layout()
    anchors, labels = [], []
    for group in groups:
        rows = points.loc[group]
        names = [f"{m} · {v}" for m, v in zip(rows["mode"], rows["variant"], strict=True)]
        pairs = [int(n) for n in rows["loss_n_pairs"]]
        anchors.append((float(rows["token_savings"].iloc[0]), float(rows["delta"].iloc[0])))
        labels.append(pareto_label(names, pairs))
    label_points(ax, anchors, labels)
    if len(front) > 1:
        ax.legend(fontsize=8, loc="best")
    return ax
