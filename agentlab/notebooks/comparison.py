"""The policy-comparison widget of ``notebooks/03_policy_comparison.ipynb``.

It reads a results file through :mod:`agentlab.bench.analysis` and draws the Pareto plot of
token savings against quality loss with the rows behind it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from agentlab.notebooks.plots import plot_pareto
from agentlab.notebooks.provenance import captioned, titled


class PolicyComparison:
    """Pick benchmark, metric and variants; see the Pareto plot and the per-variant tables.

    Reads ``db`` through :mod:`agentlab.bench.analysis` (rebuild it first: :func:`ensure_sweep`
    does). ``render`` is what the widgets call, so code (and the tests) can drive it directly.
    """

    def __init__(self, db: str | os.PathLike[str], *, model: str | None = None) -> None:
        from agentlab.bench import analysis

        self.db = Path(db)
        self.model = model
        runs = analysis.runs_df(db=self.db)
        self.benchmarks = sorted(set(runs["benchmark"])) if len(runs) else []
        if not self.benchmarks:
            raise ValueError(f"no runs in {db}: run a sweep first (ensure_sweep)")

    def _frames(self, benchmark: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        from agentlab.bench import analysis

        loss = analysis.quality_loss_df(benchmark, db=self.db)
        savings = analysis.token_savings_df(benchmark, level="aggregate", db=self.db)
        pareto = analysis.pareto_df(benchmark, db=self.db)
        if self.model is not None:
            loss, savings, pareto = (f[f["model"] == self.model] if len(f) else f for f in (loss, savings, pareto))
        return loss, savings, pareto

    def metrics(self, benchmark: str) -> list[str]:
        """The metrics some compared run of ``benchmark`` has a quality loss for (the metric dropdown)."""
        return sorted(set(self._frames(benchmark)[0].get("metric", [])))

    def variants(self, benchmark: str) -> list[str]:
        """The variants of ``benchmark`` compared with a baseline (the variant multi-select)."""
        return sorted(set(self._frames(benchmark)[0].get("variant", [])))

    def render(self, benchmark: str, metric: str, variants: Sequence[str] | None = None) -> dict[str, Any]:
        """The Pareto points of ``metric`` for the chosen variants, their loss and savings rows, and a figure."""
        import matplotlib.pyplot as plt

        loss, savings, pareto = self._frames(benchmark)
        chosen = list(variants) if variants else self.variants(benchmark)
        pick = pareto[(pareto["metric"] == metric) & pareto["variant"].isin(chosen)] if len(pareto) else pareto
        loss_rows = loss[(loss["metric"] == metric) & loss["variant"].isin(chosen)] if len(loss) else loss
        savings_rows = savings[savings["variant"].isin(chosen)] if len(savings) else savings
        fig, ax = plt.subplots(figsize=(8, 4.5))
        if len(pick) and pick["model"].nunique() > 1:
            raise ValueError("several models in the database: pass model= to PolicyComparison")
        # plot_pareto lays the figure out itself before it places the labels.
        plot_pareto(pick, ax=ax, title=titled(f"{benchmark} · {metric}: token savings against quality delta "
                                              "(95 % paired CIs)", self.model))
        loss_columns = ["mode", "variant", "baseline_variant", "n_cases", "n_pairs", "baseline_mean", "mode_mean", "delta",
                        "ci_low", "ci_high", "p_value", "stats_note"]
        savings_columns = ["mode", "variant", "baseline_variant", "n_cases", "n_pairs", "prompt_savings", "ci_low",
                           "ci_high", "p_value", "prompt_savings_with_summary"]
        return {"pareto": pick.reset_index(drop=True), "figure": fig,
                "quality_loss": loss_rows[[c for c in loss_columns if c in loss_rows.columns]].reset_index(drop=True),
                "token_savings": savings_rows[[c for c in savings_columns if c in savings_rows.columns]].reset_index(drop=True)}

    def widget(self, *, metric: str | None = None) -> Any:
        """Dropdowns for benchmark and metric, a multi-select of variants, and the drawn result."""
        import ipywidgets as w
        import matplotlib.pyplot as plt
        from IPython.display import display

        benchmark = w.Dropdown(options=self.benchmarks, description="benchmark")
        metrics = self.metrics(benchmark.value)
        metric_box = w.Dropdown(options=metrics, value=metric if metric in metrics else (metrics[0] if metrics else None),
                                description="metric")
        variant_box = w.SelectMultiple(options=self.variants(benchmark.value), description="variants",
                                       layout=w.Layout(width="520px", height="110px"))
        variant_box.value = tuple(variant_box.options)
        output = w.Output()

        def draw(change: Any = None) -> None:
            output.clear_output(wait=True)
            with output:
                if metric_box.value is None:
                    print("no compared runs for this benchmark")
                    return
                shown = self.render(benchmark.value, metric_box.value, list(variant_box.value))
                display(shown["figure"])
                plt.close(shown["figure"])
                display(*(captioned(shown[name], name, self.model) for name in ("quality_loss", "token_savings")))

        def new_benchmark(change: Any) -> None:
            metric_box.options = self.metrics(benchmark.value)
            variant_box.options = self.variants(benchmark.value)
            variant_box.value = tuple(variant_box.options)
            draw()

        benchmark.observe(new_benchmark, names="value")
        metric_box.observe(draw, names="value")
        variant_box.observe(draw, names="value")
        draw()
        return w.VBox([w.HBox([benchmark, metric_box]), variant_box, output])
