"""The summary package's coverage accessor: the one place other components read a summary's reach."""

from __future__ import annotations

from agentlab.events import Message
from agentlab.model.scripted import ScriptedModel
from agentlab.recall.search import resolve_summary_boundary
from agentlab.runtime import Invocation, LLMAgent
from agentlab.session.base import Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import coverage_boundary
from agentlab.summary.coverage import STATE_LAST_INCLUDED_EVENT_ID, STATE_LAST_INCLUDED_TS


async def test_exact_key_then_parents_then_the_full_session() -> None:
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    assert await coverage_boundary(session, svc, "a/b/c") is None
    full = SummaryBoundary("", 1.0, "e-full")
    await svc.write_summary(session, "", Summary("whole", 1.0, full))
    assert await coverage_boundary(session, svc, "a/b/c") == full
    parent = SummaryBoundary("a", 2.0, "e-parent")
    await svc.write_summary(session, "a", Summary("branch a", 2.0, parent))
    assert await coverage_boundary(session, svc, "a/b/c") == parent
    await svc.write_summary(session, "a/b/c", Summary("", 3.0, SummaryBoundary("a/b/c", 3.0, "e-empty")))
    assert await coverage_boundary(session, svc, "a/b/c") == parent  # a summary without text covers nothing
    exact = SummaryBoundary("a/b/c", 4.0, "e-exact")
    await svc.write_summary(session, "a/b/c", Summary("leaf", 4.0, exact))
    assert await coverage_boundary(session, svc, "a/b/c") == exact
    assert await coverage_boundary(session, svc, "") == full


async def test_legacy_state_keys_are_the_last_resort_and_recall_reads_through_the_accessor() -> None:
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    session.state[STATE_LAST_INCLUDED_EVENT_ID] = " e-7 "
    session.state[STATE_LAST_INCLUDED_TS] = "2024-01-02T03:04:05Z"
    boundary = await coverage_boundary(session, svc, "x")
    assert boundary == SummaryBoundary("", 1704164645.0, "e-7")
    inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc,
                     agent=LLMAgent("a", ScriptedModel([])), message=Message.user("q"), filter_key="x")
    assert await resolve_summary_boundary(inv) == boundary
    session.state[STATE_LAST_INCLUDED_TS] = "not a time"
    session.state[STATE_LAST_INCLUDED_EVENT_ID] = ""
    assert await coverage_boundary(session, svc, "x") is None
