"""session_search over a real in-memory session service: scopes, fallbacks, hits, the index."""

from __future__ import annotations

from recall_helpers import APP, USER, Ledger, invocation, policy, summarise_up_to

from agentlab.events import Message
from agentlab.recall.embed import HashEmbedder
from agentlab.recall.search import index_for, session_search
from agentlab.session.base import Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService


async def test_current_hidden_returns_only_events_at_or_before_the_boundary():
    svc = InMemorySessionService()
    led = Ledger(svc)
    s = await led.session("cur")
    e0 = await led.user(s, "the alpha token is 111")
    await led.assistant(s, "noted the alpha token")
    e2 = await led.user(s, "correction: alpha token is 222")
    await led.assistant(s, "ok")
    e4 = await led.user(s, "and now the alpha token is 333")
    inv = invocation(svc, s)

    # no summary -> no hidden history -> nothing, and the result says why
    none = await session_search(inv, policy(), "alpha token", scope="current_hidden")
    assert none["count"] == 0 and "no summary" in none["hidden_history"]

    await summarise_up_to(svc, s, e2)
    got = await session_search(inv, policy(), "alpha token", scope="current_hidden")
    ids = [r["event_id"] for r in got["results"]]
    assert e0.id in ids and e2.id in ids and e4.id not in ids
    assert all(r["scope"] == "current_hidden" for r in got["results"])
    # the whole session scope does see the visible event
    whole = await session_search(inv, policy(), "alpha token 333", scope="current_session")
    assert whole["results"][0]["event_id"] == e4.id and whole["results"][0]["scope"] == "current_session"
    # an unknown scope is treated as current_hidden
    assert (await session_search(inv, policy(), "alpha token", scope="everything"))["scope"] == "current_hidden"


async def test_current_hidden_boundary_lookup_order_and_time_cutoff():
    svc = InMemorySessionService()
    led = Ledger(svc)
    s = await led.session("cur")
    a = await led.user(s, "kiwi harvest plan", filter_key="farm/orchard")
    b = await led.user(s, "kiwi export plan", filter_key="farm/orchard")
    c = await led.user(s, "kiwi pricing plan", filter_key="farm/orchard")
    await led.user(s, "kiwi plan for the barn", filter_key="barn")  # another branch: never visible
    inv = invocation(svc, s, filter_key="farm/orchard")

    async def hidden_ids():
        got = await session_search(inv, policy(), "kiwi plan", scope="current_hidden")
        return {r["event_id"] for r in got["results"]}

    await summarise_up_to(svc, s, a)  # full-session summary: the last resort
    assert await hidden_ids() == {a.id}
    await summarise_up_to(svc, s, b, filter_key="farm")  # a parent key beats the full session
    assert await hidden_ids() == {a.id, b.id}
    await summarise_up_to(svc, s, c, filter_key="farm/orchard")  # the exact key beats both
    assert await hidden_ids() == {a.id, b.id, c.id}
    # a boundary whose event id is unknown falls back to its cutoff time
    gone = SummaryBoundary("farm/orchard", a.timestamp, "ev-gone")
    await svc.write_summary(s, "farm/orchard", Summary(text="x", boundary=gone))
    assert await hidden_ids() == {a.id}
    # a summary without text does not count
    await svc.write_summary(s, "farm/orchard", Summary(text=" ", boundary=gone))
    assert await hidden_ids() == {a.id, b.id}


async def test_scopes_other_and_all_sessions():
    svc = InMemorySessionService()
    led = Ledger(svc)
    old = await led.session("old")
    o1 = await led.user(old, "the invoice number is INV-778")
    cur = await led.session("cur")
    c1 = await led.user(cur, "invoice for march is INV-901")
    await led.user(cur, "newer visible invoice text")
    stranger = await led.session("other-user-session", user_id="u2")
    await led.user(stranger, "invoice secret of another user")
    await summarise_up_to(svc, cur, c1)
    inv = invocation(svc, cur)

    other = await session_search(inv, policy(), "invoice", scope="other_sessions")
    assert [r["event_id"] for r in other["results"]] == [o1.id]
    assert other["results"][0]["scope"] == "other_sessions"
    both = await session_search(inv, policy(), "invoice", scope="all_sessions")
    assert {r["event_id"] for r in both["results"]} == {o1.id, c1.id}  # hidden + other, never u2's
    assert {r["scope"] for r in both["results"]} == {"other_sessions", "current_hidden"}
    assert (await session_search(inv, policy(), "   ", scope="all_sessions"))["count"] == 0


async def test_current_session_excludes_the_running_invocation_and_scans_when_bm25_misses():
    svc = InMemorySessionService()
    led = Ledger(svc)
    s = await led.session("cur")
    old = await led.user(s, "Deployment keyset rotated on Monday")
    inv = invocation(svc, s, text="deploy keys?")
    await led.user(s, "deploy keys?", invocation_id=inv.id)
    # BM25 has no token in common (deploy != deployment): the substring scan finds it
    got = await session_search(inv, policy(), "deploy keys", scope="current_session")
    assert [r["event_id"] for r in got["results"]] == [old.id]
    assert got["results"][0]["score"] == 1.15


async def test_dense_search_broadens_from_a_long_query_to_a_clause():
    svc = InMemorySessionService()
    led = Ledger(svc)
    old = await led.session("old")
    await led.user(old, "the zeppelin budget was approved at 40k")
    vendor = await led.user(old, "marmalade vendor contract renewal signed")
    cur = await led.session("cur")
    inv = invocation(svc, cur)
    p = policy(embedder="hash", search_mode="dense")
    query = "what did we decide about the zeppelin budget and the marmalade vendor contract renewal"
    index = index_for(svc, APP, USER, HashEmbedder())
    # the full query alone is below the similarity floor ...
    assert await index.search(query, 5, mode="dense", min_score=0.6) == []
    # ... the tool broadens to the clause queries and stops at the first one that finds something
    got = await session_search(inv, p, query, scope="other_sessions", min_score=0.6)
    assert [r["event_id"] for r in got["results"]] == [vendor.id]
    assert got["search_mode"] == "dense" and got["results"][0]["score"] >= 0.6


async def test_top_hits_carry_a_marked_bounded_window_and_tool_hits_carry_tool_fields():
    svc = InMemorySessionService()
    led = Ledger(svc)
    old = await led.session("old")
    await led.user(old, "please fetch the quarterly revenue figures " + "x" * 200)
    _, result = await led.tool_round(old, "call-9", "fetch_revenue", "quarterly revenue: " + "1234 " * 4000)
    await led.assistant(old, "Revenue was fetched; the quarterly total is large.")
    for i in range(3):
        await led.user(old, f"unrelated revenue chatter {i}")
    inv = invocation(svc, await led.session("cur"))
    got = await session_search(inv, policy(), "quarterly revenue", scope="other_sessions", top_k=4)
    hits = got["results"]
    assert len(hits) == 4
    top = hits[0]
    assert "context" in top and "context" in hits[1] and "context" not in hits[2]
    for hit in hits:
        assert len(hit["snippet"]) <= 280
    windowed = top["snippet"].splitlines()
    assert sum(line.startswith("[match] ") for line in windowed) == 1
    assert all(len(line) <= 96 + len("[match] ") for line in windowed)
    tool_hit = next(h for h in hits if h["role"] == "tool")
    assert tool_hit["event_id"] == result.id and tool_hit["tool_call_id"] == "call-9"
    assert tool_hit["tool_name"] == "fetch_revenue"
    assert tool_hit["content_bytes"] == len(result.text.encode()) and tool_hit["content_truncated"] is True
    # windows never show the assistant tool-call message
    assert all(c["role"] != "assistant" or c["content"] for c in top["context"])
    assert got["note"].startswith("Recalled history is historical data")


async def test_index_is_incremental_and_rebuilt_lazily():
    svc = InMemorySessionService()
    led = Ledger(svc)
    old = await led.session("old")
    for i in range(20):
        await led.user(old, f"note {i} about tulips")
    inv = invocation(svc, await led.session("cur"))
    index = index_for(svc, APP, USER)
    assert index is index_for(svc, APP, USER)
    await session_search(inv, policy(), "tulips", scope="other_sessions")
    assert index.indexed_events == 20
    builds = index.index.lexical.builds
    await session_search(inv, policy(), "tulips", scope="other_sessions")
    assert index.index.lexical.builds == builds  # nothing appended: no rebuild
    new = await led.user(old, "a late note about orchids")
    got = await session_search(inv, policy(), "orchids", scope="other_sessions")
    assert [r["event_id"] for r in got["results"]] == [new.id]
    assert index.indexed_events == 21 and index.index.lexical.builds == builds + 1
    await svc.delete_session(APP, USER, "old")
    assert (await session_search(inv, policy(), "orchids", scope="other_sessions"))["count"] == 0


async def test_requested_dense_mode_without_embedder_degrades_to_lexical():
    svc = InMemorySessionService()
    led = Ledger(svc)
    old = await led.session("old")
    await led.add(old, Message.user("llama farm visit"))
    inv = invocation(svc, await led.session("cur"))
    got = await session_search(inv, policy(), "llama", scope="other_sessions", search_mode="dense")
    assert got["search_mode"] == "lexical" and got["count"] == 1
