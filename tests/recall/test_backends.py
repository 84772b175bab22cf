"""The recall tools give the same answers on both session backends, and hybrid search embeds
each event once."""

from __future__ import annotations

import pytest
from recall_helpers import APP, USER, Ledger, invocation, policy

from agentlab.recall.embed import HashEmbedder
from agentlab.recall.search import index_for, session_search
from agentlab.recall.tools import session_load
from agentlab.session.base import Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService


@pytest.fixture(params=["inmemory", "duckdb"])
async def svc(request, tmp_path):
    if request.param == "inmemory":
        service = InMemorySessionService()
    else:
        from agentlab.session.duckdb import DuckDBSessionService

        service = DuckDBSessionService(tmp_path / "sessions.duckdb")
    yield service
    await service.close()


async def test_search_and_load_agree_across_backends(svc):
    led = Ledger(svc)
    old = await led.session("old")
    await led.user(old, "fetch the ledger for account 4411")
    _, result = await led.tool_round(old, "t1", "ledger", "balance for account 4411: 9,250.75 EUR")
    cur = await led.session("cur")
    early = await led.user(cur, "my favourite colour is teal")
    await led.user(cur, "what else?")
    await svc.write_summary(cur, "", Summary("colour discussed", boundary=SummaryBoundary("", early.timestamp, early.id)))
    cur = await svc.get_session(APP, USER, "cur")
    inv = invocation(svc, cur)

    other = await session_search(inv, policy(), "account 4411 balance", scope="other_sessions")
    assert other["results"][0]["event_id"] == result.id and other["results"][0]["tool_call_id"] == "t1"
    hidden = await session_search(inv, policy(), "favourite colour", scope="current_hidden")
    assert [r["event_id"] for r in hidden["results"]] == [early.id]
    loaded = await session_load(inv, policy(), session_id="old", event_id="stale", tool_call_id="t1")
    assert loaded["event_id"] == result.id
    assert loaded["messages"][-1]["content"] == "ledger: balance for account 4411: 9,250.75 EUR"


async def test_hybrid_search_embeds_each_event_once():
    svc = InMemorySessionService()
    led = Ledger(svc)
    old = await led.session("old")
    for i in range(6):
        await led.user(old, f"ferry timetable note {i}")
    inv = invocation(svc, await led.session("cur"))
    hybrid = policy(embedder="hash")
    index = index_for(svc, APP, USER, HashEmbedder())
    for _ in range(3):
        got = await session_search(inv, hybrid, "ferry timetable", scope="other_sessions")
        assert got["search_mode"] == "hybrid" and got["count"] == 5
    assert index.index.dense is not None and index.index.dense.embedded_count == 6
    await led.user(old, "ferry cancelled tomorrow")
    await session_search(inv, hybrid, "ferry cancelled", scope="other_sessions")
    assert index.index.dense.embedded_count == 7


async def test_index_registry_does_not_keep_a_service_alive():
    import gc
    import weakref

    svc = InMemorySessionService()
    index_for(svc, APP, USER)
    ref = weakref.ref(svc)
    del svc
    gc.collect()
    assert ref() is None
