"""Query expansion, broadening rules and the lexical scan score (pure functions)."""

from __future__ import annotations

import pytest

from agentlab.recall.search import (
    EventHit,
    EventRef,
    clause_queries,
    expand_query,
    keyword_fallbacks,
    keyword_tokens,
    lexical_event_score,
    merge_hits,
    search_with_fallback,
)


def test_keyword_tokens_drop_stopwords_and_short_words_but_keep_digits():
    assert keyword_tokens("What did the team say about the Q3 budget in session 7?") == ["team", "q3", "budget", "7"]
    assert keyword_tokens("is it on or to") == []


def test_clause_queries_split_strip_lead_ins_and_add_keyword_forms():
    assert clause_queries("single clause only") == []
    got = clause_queries("What was the launch date, and who said the price was final?")
    assert got == ["the launch date", "launch date", "the price was final", "price final"]


def test_keyword_fallbacks_trim_long_queries_and_slide_windows():
    # 10 keywords -> first 4 + last 4; window of 4 because >= 5 keywords; at most 4 fallbacks.
    q = "alpha bravo charlie delta echo foxtrot golf hotel india juliet"
    got = keyword_fallbacks(q)
    assert got[0] == "alpha bravo charlie delta golf hotel india juliet"
    assert got[1:] == ["alpha bravo charlie delta", "bravo charlie delta golf", "charlie delta golf hotel"]
    assert len(got) == 4
    # 3 keywords -> window of 3 equals the keyword string and is deduplicated away
    assert keyword_fallbacks("the red fox jumped") == ["red fox jumped"]
    # a query that already is its keyword form has no fallback
    assert keyword_fallbacks("red fox jumped") == []


def test_expand_query_order_and_dedupe():
    got = expand_query("  what did  we decide about pricing;   rollout dates ")
    assert got[0] == "what did we decide about pricing; rollout dates"
    assert "we decide about pricing" in got and "decide pricing" in got and "rollout dates" in got
    assert len(got) == len(set(got))
    assert expand_query("   ") == []


def test_lexical_scan_score_matches_the_reference_formula():
    kws = ["deploy", "keys"]
    assert lexical_event_score("deploy keys", kws, "Deployment keyset rotated") == pytest.approx(1.0 + 0.15)
    assert lexical_event_score("deploy keys", kws, "the deploy keys are here") == pytest.approx(1.0 + 0.75 + 0.15)
    # one keyword of two: 0.5 >= 0.45 survives; one of three: 0.33 is discarded
    assert lexical_event_score("deploy keys", kws, "deploy only") == pytest.approx(0.5)
    assert lexical_event_score("a b c", ["alpha", "beta", "gamma"], "alpha only") == 0.0
    # a single keyword: matched >= min(2, 1) earns the bonus
    assert lexical_event_score("zeta", ["zeta"], "zeta") == pytest.approx(1 + 0.75 + 0.15)


def _hit(event_id: str, score: float, ts: float) -> EventHit:
    return EventHit(EventRef("s", event_id, int(ts), ts, "user", "", "", None, None), score, event_id)


def test_merge_keeps_max_score_and_newest_first_on_ties():
    merged = merge_hits([_hit("a", 0.5, 1), _hit("b", 0.9, 2)], [_hit("a", 0.7, 1), _hit("c", 0.5, 3)])
    assert [(h.ref.event_id, h.score) for h in merged] == [("b", 0.9), ("a", 0.7), ("c", 0.5)]
    tie = merge_hits([], [_hit("old", 0.5, 1), _hit("new", 0.5, 9)])
    assert [h.ref.event_id for h in tie] == ["new", "old"]


class Canned:
    """A fake per-query search that records which queries were run."""

    def __init__(self, answers: dict[str, list[EventHit]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, query: str) -> list[EventHit]:
        self.asked.append(query)
        return self.answers.get(query, [])


async def test_primary_that_fills_top_k_stops_broadening():
    run = Canned({"budget, risks": [_hit(f"e{i}", 1.0, i) for i in range(3)]})
    assert len(await search_with_fallback("budget, risks", 3, run)) == 3
    assert run.asked == ["budget, risks"]


async def test_empty_primary_stops_at_the_first_query_that_finds_anything():
    query = "what did we decide about the zeppelin budget and the marmalade vendor"
    queries = expand_query(query)
    run = Canned({queries[2]: [_hit("x", 0.3, 1)], queries[3]: [_hit("y", 0.9, 2)]})
    found = await search_with_fallback(query, 5, run)
    assert [h.ref.event_id for h in found] == ["x"]
    assert run.asked == queries[:3]


async def test_single_weak_primary_broadens_but_two_hits_do_not():
    one = Canned({"the zeppelin budget approval": [_hit("a", 1.0, 1)]})
    # not compound and 1 < min(2, top_k): broaden into the keyword fallback
    await search_with_fallback("the zeppelin budget approval", 5, one)
    assert one.asked == ["the zeppelin budget approval", "zeppelin budget approval"]
    two = Canned({"the zeppelin budget approval": [_hit("a", 1.0, 1), _hit("b", 0.9, 2)]})
    await search_with_fallback("the zeppelin budget approval", 5, two)
    assert two.asked == ["the zeppelin budget approval"]


async def test_compound_query_broadens_until_top_k_is_merged():
    query = "pricing, rollout"
    queries = expand_query(query)
    answers = {queries[0]: [_hit("a", 1.0, 1), _hit("b", 0.9, 2)], queries[1]: [_hit("c", 0.5, 3)],
               queries[2]: [_hit("d", 0.5, 4)]}
    run = Canned(answers)
    found = await search_with_fallback(query, 3, run)
    assert [h.ref.event_id for h in found] == ["a", "b", "c"]
    assert run.asked == queries[:2]  # stopped once 3 were merged
