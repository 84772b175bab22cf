"""Notebook 04's league view: running and reading leagues, the Pareto plot, and one case's requests per arm.

The plot and text helpers are checked on hand-made rows; the rest on a real league (QMSum, two
cases, three arms, an 8,192-token budget) against the project's OpenAI-compatible test server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from agentlab.events import Message
from agentlab.notebooks import league_view

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


def rows(**arms: tuple[float, float]) -> pd.DataFrame:
    """League rows of one metric: arm -> (savings, delta); the first arm is the baseline."""
    out = []
    for i, (arm, (saving, delta)) in enumerate(arms.items()):
        out.append({"arm": arm, "role": "baseline" if i == 0 else "lossy", "metric": "rougeL",
                    "prompt_savings": saving, "savings_ci_low": saving - 0.001, "savings_ci_high": saving + 0.001,
                    "delta": delta, "ci_low": None if i == 0 else delta - 0.01,
                    "ci_high": None if i == 0 else delta + 0.01, "pareto": i != 0, "n_cases": 4})
    return pd.DataFrame(out)


def test_shorten_cuts_the_middle_and_keeps_both_ends() -> None:
    text = "start " + "x" * 500 + " end"
    short = league_view.shorten(text, 60)
    assert len(short) <= 60 and short.startswith("start") and short.endswith("end") and "[…]" in short
    assert league_view.shorten("a  short\n text") == "a short text"


def test_message_rows_show_the_first_and_last_messages_and_count_the_others() -> None:
    messages = [Message.system("instruction"), *(Message.user(f"turn {i}") for i in range(19))]
    shown = league_view.message_rows(messages, head=3, tail=4)
    assert [r[1] for r in shown[:3]] == ["instruction", "turn 0", "turn 1"]
    assert shown[3] == ("…", "13 more messages")
    assert [r[1] for r in shown[4:]] == ["turn 15", "turn 16", "turn 17", "turn 18"]
    assert league_view.message_rows(messages[:5]) == [(m.role, m.content) for m in messages[:5]]


def test_the_league_plot_tells_close_savings_apart_and_labels_coincident_arms_once() -> None:
    import matplotlib.pyplot as plt

    frame = rows(long_context=(0.0, 0.0), a=(0.990, 0.02), b=(0.990, 0.02), c=(0.993, -0.01))
    fig, ax = plt.subplots()
    league_view.plot_league(frame, ax=ax)
    fig.canvas.draw()
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert len(set(ticks)) == len(ticks) > 2, f"savings ticks repeat: {ticks}"
    labels = [t.get_text() for t in ax.texts]
    assert sum("a" in lab.split("\n") for lab in labels) == 1 and "2 arms at one point:\na\nb" in labels
    assert "c" in labels and "long_context" in labels
    legend = ax.get_legend()
    assert legend is not None and legend.get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1, (
        "the legend sits inside the axes, over the points")
    plt.close(fig)


def test_the_league_plot_draws_one_metric() -> None:
    frame = pd.concat([rows(base=(0.0, 0.0), a=(0.5, 0.1)), rows(base=(0.0, 0.0), a=(0.5, 0.1)).assign(metric="f1")])
    with pytest.raises(ValueError, match="one metric"):
        league_view.plot_league(frame)


def test_requests_html_names_each_arm_with_its_counts() -> None:
    requests = [league_view.ArmRequest("long_context", [Message.user("<b>all</b> " * 5)] * 9, 1234, 1231, {}),
                league_view.ArmRequest("letta_sliding_window", [Message.user("recent")], 12, None,
                                       {"LettaSlidingWindow": "hid 8 events"})]
    page = league_view.requests_html(requests)
    assert "9 messages, 1,234 prompt tokens (its run: 1,231)" in page
    assert "1 messages, 12 prompt tokens<" in page and "LettaSlidingWindow: hid 8 events" in page
    assert "&lt;b&gt;all&lt;/b&gt;" in page and "<b>all</b>" not in page  # message text is escaped
    assert list(league_view.requests_summary(requests)["messages"]) == [9, 1]


# ------------------------------------------------------------------------------ on the test server

ARMS = ["inspect_trim", "letta_sliding_window", "inspect_trim+recall"]
BUDGET = 8192


@pytest.fixture(scope="module")
def league(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data_dir = os.environ.get("AGENTLAB_DATA_DIR", "")
    if not (Path(data_dir) / "qmsum" / "test.jsonl").is_file() and not (Path(data_dir) / "qmsum" / "test").is_dir():
        pytest.skip("needs AGENTLAB_DATA_DIR with the QMSum test split")
    from agentlab.testing.openai_server import OpenAITestServer

    tmp = tmp_path_factory.mktemp("league")
    previous = os.environ.get("AGENTLAB_CACHE_DB")
    os.environ["AGENTLAB_CACHE_DB"] = str(tmp / "calls.duckdb")
    try:
        with OpenAITestServer(context_window=131_072) as server:
            db = tmp / "league.duckdb"
            first = league_view.ensure_league("qmsum", ARMS, model=server.model_spec, limit=2, db=db,
                                              context_budget=BUDGET, echo=False)
            yield {"db": db, "model": server.model_spec, "first": first}
    finally:
        if previous is None:
            os.environ.pop("AGENTLAB_CACHE_DB", None)
        else:
            os.environ["AGENTLAB_CACHE_DB"] = previous


def test_a_league_is_stored_and_a_second_call_sends_no_model_call(league: dict[str, Any],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert league["first"]["calls_made"] > 0
    again = league_view.ensure_league("qmsum", ARMS, model=league["model"], limit=2, db=league["db"],
                                      context_budget=BUDGET)
    assert again["league_id"] == league["first"]["league_id"] and again["calls_made"] == 0
    assert "0 model calls sent" in capsys.readouterr().out
    stored = league_view.stored_leagues(league["db"], model=league["model"])
    assert list(stored["league_id"]) == [again["league_id"]] and list(stored["context_budget"]) == [BUDGET]
    with pytest.raises(LookupError, match="qmsum at 8192"):
        league_view.find_league(league["db"], "qmsum", 4096, model=league["model"])


def test_the_view_shows_arms_that_differ(league: dict[str, Any]) -> None:
    view = league_view.LeagueView(league["db"], model=league["model"])
    assert view.benchmarks == ["qmsum"] and view.budgets("qmsum") == [BUDGET]
    assert "rougeL" in view.metrics("qmsum", BUDGET)
    shown = view.render("qmsum", BUDGET, "rougeL")
    table = shown["table"].set_index("arm")
    assert list(table.index) == ["long_context", *ARMS] and table.loc["long_context", "role"] == "baseline"
    assert list(shown["table"].columns) == league_view.TABLE_COLUMNS
    savings = table["prompt_savings"]
    assert savings["long_context"] == 0 and 0 < savings["inspect_trim"] < savings["letta_sliding_window"] < 1
    assert table.loc["inspect_trim+recall", "partner"] == "inspect_trim"
    assert not table.loc[ARMS, "unchanged"].any(), "an arm sent the baseline's prompts: it does not act here"
    assert len(shown["figure"].axes[0].texts) == 4  # one label per arm: none coincide here
    assert view.cases("qmsum", BUDGET) == ["Bed003_specific_01", "Bed008_specific_01"]


def test_the_case_view_projects_what_each_arm_sent(league: dict[str, Any]) -> None:
    view = league_view.LeagueView(league["db"], model=league["model"])
    shown = view.render_case("qmsum", BUDGET, "Bed003_specific_01")
    by_arm = {r.arm: r for r in shown["requests"]}
    assert list(by_arm) == ["long_context", *ARMS]
    assert len(by_arm["letta_sliding_window"].messages) < len(by_arm["inspect_trim"].messages) \
        < len(by_arm["long_context"].messages)
    assert "hid" in by_arm["inspect_trim"].actions["InspectTrim"]
    for request in by_arm.values():
        # The projection is the request the run sent: the two token counts differ by a few template tokens.
        assert request.stored_prompt_tokens is not None
        assert abs(request.stored_prompt_tokens - request.prompt_tokens) <= 8, request.arm
    assert all(f"<b>{arm}</b>" in shown["html"] for arm in by_arm)


def test_the_metric_dropdown_defaults_to_the_league_s_primary_metric(league: dict[str, Any]) -> None:
    view = league_view.LeagueView(league["db"], model=league["model"])
    assert view.primary_metric("qmsum", BUDGET) == "rougeL"
    assert view.primary_metric("qmsum", 4096) is None


def test_the_widget_redraws_the_case_view_for_another_case(league: dict[str, Any],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ipywidgets")
    view = league_view.LeagueView(league["db"], model=league["model"])
    box = view.widget(context_budget=BUDGET)
    controls = {c.description: c for row in box.children if hasattr(row, "children") for c in row.children}
    controls.update({c.description: c for c in box.children if getattr(c, "description", "")})
    assert (controls["budget"].value, controls["metric"].value) == (BUDGET, "rougeL")
    assert controls["case"].options == ("Bed003_specific_01", "Bed008_specific_01")
    capsys.readouterr()
    controls["case"].value = "Bed008_specific_01"  # outside a kernel the Output's display goes to stdout
    shown = capsys.readouterr().out
    assert "letta_sliding_window" in shown and "run_answer_prompt_tokens" in shown


def test_a_task_mode_whose_answer_needs_model_output_is_named_not_projected(league: dict[str, Any]) -> None:
    requests = league_view.case_requests("qmsum", "Bed003_specific_01", ["long_context", "summary"],
                                         context_budget=BUDGET, model=league["model"])
    baseline, summary = requests
    assert baseline.prompt_tokens and len(baseline.messages) > 100
    assert summary.prompt_tokens is None and summary.messages == []
    assert "not projected" in summary.actions["summary mode"]
    assert "answer request not projected" in league_view.requests_html(requests)


def test_a_missing_results_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run ensure_league"):
        league_view.LeagueView(tmp_path / "none.duckdb", model="openai:m")
