"""The league plot with net cost on the x axis (``plot_league(x="net_cost_usd")``)."""

from __future__ import annotations

import pandas as pd
import pytest

from agentlab.notebooks import league_view

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


def rows(costs: dict[str, float | None]) -> pd.DataFrame:
    out = []
    for i, (arm, cost) in enumerate(costs.items()):
        out.append({"arm": arm, "role": "baseline" if i == 0 else "lossy", "metric": "rougeL",
                    "prompt_savings": 0.1 * i, "savings_ci_low": 0.1 * i - 0.01, "savings_ci_high": 0.1 * i + 0.01,
                    "delta": -0.01 * i, "ci_low": None if i == 0 else -0.01 * i - 0.005,
                    "ci_high": None if i == 0 else -0.01 * i + 0.005, "pareto": True, "n_cases": 4,
                    "net_cost_usd": cost})
    return pd.DataFrame(out)


def test_net_cost_axis_places_the_arms_by_cost() -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    league_view.plot_league(rows({"long_context": 0.12, "a": 0.10, "b": 0.15}), ax=ax, x="net_cost_usd")
    assert "net cost per case" in ax.get_xlabel()
    assert "against net cost" in ax.get_title()
    low, high = ax.get_xlim()
    assert low < 0.10 and high > 0.15  # the cost values, not the savings (0 .. 0.2)
    assert not [line for line in ax.lines if line.get_linestyle() == "--"]  # the savings frontier is not joined
    plt.close(fig)


def test_net_cost_axis_needs_a_cost_for_every_arm() -> None:
    with pytest.raises(ValueError, match="no cost"):
        league_view.plot_league(rows({"long_context": 0.12, "a": None}), x="net_cost_usd")
    with pytest.raises(ValueError, match="with_run_costs"):
        league_view.plot_league(rows({"long_context": 0.12}).drop(columns=["net_cost_usd"]), x="net_cost_usd")
