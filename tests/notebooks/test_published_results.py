"""data/published_results.toml: every table loads, names its source, and holds the published reports' numbers."""

from __future__ import annotations

import math
import re

import pytest

from agentlab.notebooks import papers


def test_every_table_loads_with_a_complete_source() -> None:
    tables = papers.published_tables()
    assert len(tables) >= 15
    for table_id in tables:
        df = papers.published(table_id)
        assert len(df) >= 1, table_id
        attrs = df.attrs
        assert attrs["benchmark"] in {"qmsum", "mtbench101", "longmemeval", "locomo"}, table_id
        assert "/" in attrs["repo"] and attrs["path"].endswith("REPORT.md"), table_id
        assert re.fullmatch(r"[0-9a-f]{40}", attrs["commit"]), table_id
        assert attrs["report_part"] and attrs["model"], table_id
        assert attrs["docs"].startswith("docs/sources.md#"), table_id
        assert table_id in papers.published_source(df) or attrs["repo"] in papers.published_source(df)


@pytest.mark.parametrize("benchmark", ["qmsum", "mtbench101", "longmemeval", "locomo"])
def test_each_benchmark_has_published_tables(benchmark: str) -> None:
    assert papers.published_tables(benchmark)


def test_spot_values_match_the_published_reports() -> None:
    qmsum = papers.published("qmsum_modes").set_index("mode")
    assert qmsum.loc["recall", "rougeL"] == 0.177047
    assert qmsum.loc["summary", "avg_prompt_tokens"] == 888.16
    assert math.isnan(qmsum.loc["long_context", "prompt_savings_mean_per_case"])
    recovery = papers.published("qmsum_recovery").set_index("metric")
    assert recovery.loc["rougeL", "recovery"] == 0.615
    # The published recovery follows from the published means.
    computed = (qmsum.loc["recall", "rougeL"] - qmsum.loc["summary", "rougeL"]) / (
        qmsum.loc["long_context", "rougeL"] - qmsum.loc["summary", "rougeL"])
    assert round(computed, 3) == 0.615
    mt = papers.published("mtbench101_token_efficiency").set_index("task")
    assert mt["cases"].sum() == 917
    assert mt.loc["SC", "prompt_savings"] == -0.0050
    overall = papers.published("mtbench101_overall").iloc[0]
    assert round(1 - overall["summary_prompt_tokens"] / overall["baseline_prompt_tokens"], 4) == overall["prompt_savings"]
    lme = papers.published("longmemeval_modes").set_index("mode")
    assert lme.loc["recall", "llm_score"] == 0.9000 and lme.loc["long_context", "avg_prompt_tokens"] == 103565
    locomo = papers.published("locomo_f1_by_category")
    assert locomo["n"].sum() == 1986
    weighted = (locomo["n"] * locomo["session_recall"]).sum() / locomo["n"].sum()
    assert round(weighted, 3) == papers.published("locomo_weighted_f1").set_index("weighting").loc["5-category",
                                                                                                     "session_recall"]
    assert papers.published("locomo_f1_by_sample")["questions"].sum() == 1986


def test_an_unknown_table_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="no table 'nope'"):
        papers.published("nope")
