"""session_search's scopes on branches: this branch, the whole session, what a summary hid."""

from __future__ import annotations

from recall_helpers import Ledger, invocation, policy, summarise_up_to

from agentlab.recall.search import session_search
from agentlab.session.inmemory import InMemorySessionService


async def test_branch_session_and_hidden_scopes():
    svc = InMemorySessionService()
    led = Ledger(svc)
    s = await led.session("cur")
    root = await led.user(s, "kiwi budget for the trip", filter_key="main")
    mine = await led.user(s, "kiwi flights found", filter_key="main/a")
    sibling = await led.user(s, "kiwi hotels found", filter_key="main/b")
    child = await led.user(s, "kiwi seat map", filter_key="main/a/deep")
    inv = invocation(svc, s, filter_key="main/a")

    async def ids(scope):
        got = await session_search(inv, policy(), "kiwi", scope=scope)
        return {r["event_id"] for r in got["results"]}

    assert await ids("current_branch") == {root.id, mine.id}  # ancestors and itself
    assert await ids("current_session") == {root.id, mine.id, sibling.id, child.id}
    await summarise_up_to(svc, s, mine, "main/a")
    assert await ids("current_hidden") == {root.id, mine.id}  # hidden and visible to the branch
