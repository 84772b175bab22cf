"""The prompt-cache arithmetic on hand-made request sequences (agentlab.model.prompt_caching, prices)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlab.events import Message, ToolCall
from agentlab.model import prompt_caching as pc
from agentlab.model.prices import Price, PriceFileError, load_prices, net_cost, price_for, raw_cost
from agentlab.model.tokens import count_messages

_next_id = [1000]


def seg(n: int) -> tuple[int, ...]:
    """A message segment of ``n`` fresh token ids (never equal to another call's)."""
    start = _next_id[0]
    _next_id[0] += n
    return tuple(range(start, start + n))


def request(*messages: tuple[int, ...], tools: tuple[int, ...] = ()) -> pc.RequestTokens:
    return pc.RequestTokens((tools, *messages, pc.PRIMING_MARKERS))


PRIMING = len(pc.PRIMING_MARKERS)


def test_sequence_length_is_the_projects_token_count() -> None:
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    messages = [Message.system("You read meetings."), Message.user("What was decided?"),
                Message.assistant("", [ToolCall(id="c1", name="read", arguments='{"part": 1}')]),
                Message.tool("c1", "read", "The budget was approved after a long debate.")]
    r = pc.request_tokens(messages, tools)
    assert r.n_tokens == count_messages(messages, tools)
    assert r.n_messages == 4
    assert r.breakpoint_tokens == r.n_tokens - PRIMING
    # An appended request shares exactly the earlier one's tools and messages, not its priming.
    longer = pc.request_tokens([*messages, Message.assistant("Approved.")], tools)
    assert pc.common_prefix(r, longer) == r.breakpoint_tokens
    # The marker ids are not real token ids.
    assert all(t < 0 for t in (*pc.MESSAGE_MARKERS, *pc.NAME_MARKER, *pc.PRIMING_MARKERS))


def test_openai_prefix_kept_is_served_in_128_token_steps_without_busts() -> None:
    a, b, c = seg(1500), seg(300), seg(200)
    results = pc.replay([request(a), request(a, b), request(a, b, c)], "openai")
    assert [r.cached_tokens for r in results] == [0, 1408, 1792]  # 1500 -> 11*128; 1800 -> 14*128
    assert [r.bust for r in results] == [False, False, False]
    assert results[1].uncached_tokens == 1800 + PRIMING - 1408
    assert [r.cache_write_tokens for r in results] == [0, 0, 0]  # OpenAI bills no write


def test_openai_minimum_is_1024_tokens() -> None:
    short, tail = seg(1000), seg(500)
    results = pc.replay([request(short), request(short, tail)], "openai")
    assert results[1].cached_tokens == 0  # a shared prefix of 1,000 tokens is under the minimum
    exact = seg(1024)
    results = pc.replay([request(exact), request(exact, seg(10))], "openai")
    assert results[1].cached_tokens == 1024
    results = pc.replay([request(seg(1023)), request(seg(1023))], "openai")
    assert results[1].cached_tokens == 0


def test_openai_step_is_128_tokens() -> None:
    shared = seg(1300)
    results = pc.replay([request(shared), request(shared, seg(50))], "openai")
    assert results[1].cached_tokens == 1280  # not 1300: rounded down to 10 * 128


def test_prefix_broken_at_message_k_busts_and_keeps_only_what_comes_before() -> None:
    m0, m1, m2, m3 = seg(600), seg(700), seg(800), seg(100)
    cleared = seg(20)  # message 1 replaced by a placeholder at the third request
    results = pc.replay([request(m0, m1), request(m0, m1, m2), request(m0, cleared, m2, m3)], "openai")
    assert results[1].cached_tokens == 1280  # 1300 shared
    assert results[2].cached_tokens == 0  # only message 0 (600 tokens) is shared: under the minimum
    assert results[2].bust and not results[1].bust
    # Broken later: messages 0 and 1 stay, so the cache serves their 1,300 tokens (rounded) and still busts,
    # since the previous request held 2,048 (2,100 rounded down).
    results = pc.replay([request(m0, m1, m2), request(m0, m1, seg(800), m3)], "openai")
    assert results[0].held_tokens == 2048
    assert results[1].cached_tokens == 1280
    assert results[1].bust


def test_a_broken_message_shares_its_tokens_up_to_the_change() -> None:
    head = seg(1100)
    original = seg(400)
    rewritten = original[:200] + seg(200)  # the same first 200 tokens
    results = pc.replay([request(head, original), request(head, rewritten)], "openai")
    assert results[1].cached_tokens == 1280  # 1,300 shared tokens, rounded down


def test_anthropic_writes_at_the_breakpoint_and_reads_earlier_entries() -> None:
    a, b = seg(2000), seg(500)
    results = pc.replay([request(a), request(a, b), request(a, b)], "anthropic")
    assert results[0].cached_tokens == 0 and results[0].cache_write_tokens == 2000
    assert results[1].cached_tokens == 2000 and results[1].cache_write_tokens == 500
    assert results[2].cached_tokens == 2500 and results[2].cache_write_tokens == 0  # same request again
    assert not any(r.bust for r in results)
    # Under the minimum nothing is written, and nothing can be read.
    small = pc.replay([request(seg(900)), request(seg(50))], "anthropic")
    assert [r.cache_write_tokens for r in small] == [0, 0]


def test_anthropic_reads_only_whole_entries() -> None:
    a, b = seg(2000), seg(500)
    # The second request changes the end of message b: the entry at the end of b is not a prefix of it,
    # and no other entry exists, so nothing is read (OpenAI would serve the shared tokens).
    changed = b[:400] + seg(100)
    results = pc.replay([request(a, b), request(a, changed)], "anthropic")
    assert results[1].cached_tokens == 0 and results[1].cache_write_tokens == 2500 and results[1].bust
    assert pc.replay([request(a, b), request(a, changed)], "openai")[1].cached_tokens == 2304


def test_anthropic_lookback_is_20_messages() -> None:
    head = seg(1500)
    later = [seg(5) for _ in range(21)]
    results = pc.replay([request(head), request(head, *later[:20]), request(head, *later)], "anthropic")
    assert results[1].cached_tokens == 1500  # the entry is 20 messages back: found
    # Without request 2's entry the third request's only candidate would be 21 messages back.
    results = pc.replay([request(head), request(head, *later)], "anthropic")
    assert results[1].cached_tokens == 0


def test_none_profile_caches_nothing() -> None:
    a = seg(3000)
    results = pc.replay([request(a), request(a)], "none")
    assert [(r.cached_tokens, r.cache_write_tokens, r.bust) for r in results] == [(0, 0, False), (0, 0, False)]


def test_fork_leaves_the_original_replay_unchanged() -> None:
    a = seg(2000)
    cache = pc.CacheReplay(pc.OPENAI)
    cache.add(request(a))
    branch = cache.fork()
    branch.add(request(a, seg(10)))
    assert len(cache.results) == 1 and len(branch.results) == 2


def test_write_premium_in_the_net_cost() -> None:
    price = Price("m", input=3.0, cached_input=0.3, cache_write=3.75, output=15.0, source_kind="provider",
                  sources=("https://example.invalid/pricing",), read_on="2026-12-02")
    a, b = seg(2000), seg(500)
    results = pc.replay([request(a), request(a, b)], "anthropic")
    t = pc.totals(results)
    assert (t.cached_tokens, t.cache_write_tokens, t.uncached_tokens) == (2000, 2500, 2506)
    # 2,500 written at 3.75, 2,000 read at 0.30, the 6 priming tokens at 3.00, 100 output tokens at 15.
    expected = (2500 * 3.75 + 2000 * 0.30 + 6 * 3.00 + 100 * 15.0) / 1e6
    assert net_cost(t, price, output_tokens=100) == pytest.approx(expected)
    # A single request that writes costs more than the same request uncached: the premium.
    one = pc.totals(results[:1])
    assert net_cost(one, price) > raw_cost(one.prompt_tokens, price)


def test_totals_add_and_count_busts() -> None:
    m0, m1 = seg(1500), seg(200)
    results = pc.replay([request(m0, m1), request(seg(10), m1)], "openai")
    t = pc.totals(results)
    assert t.n_busts == 1 and t.n_requests == 2
    assert (t + t).n_busts == 2 and (t + t).prompt_tokens == 2 * t.prompt_tokens
    assert t.as_dict()["uncached_tokens"] == t.prompt_tokens


def test_price_file_lists_sources_and_dates() -> None:
    prices = load_prices()
    assert prices, "data/prices.toml lists no model"
    for p in prices.values():
        assert p.sources and all(s.startswith("https://") for s in p.sources)
        assert len(p.read_on) == 10 and p.source_kind in ("provider", "secondary")
        assert p.cached_input < p.input
    assert price_for("no-such-model") is None and price_for(None) is None


def test_price_file_errors_name_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "prices.toml"
    bad.write_text('[models."x"]\ninput = 1.0\n', encoding="utf-8")
    with pytest.raises(PriceFileError, match="models.x"):
        load_prices(bad)
    price = Price("gpt", 2.0, 0.5, None, 8.0, "secondary", ("https://example.invalid",), "2026-12-02")
    with pytest.raises(PriceFileError, match="cache_write"):
        net_cost(pc.CacheTotals(1, 2000, 0, 2000, 0), price)


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="openai, anthropic, none"):
        pc.get_profile("gemini")
