"""Scanning from the summary boundary gives exactly the request a full-ledger scan gives."""

from __future__ import annotations

import pytest

from agentlab.core import steps as steps_module
from agentlab.core.invocation import Invocation
from agentlab.events import Event, Message, ToolCall
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import LLMAgent
from agentlab.session.base import Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import SummaryPolicy


@pytest.mark.parametrize("boundary_at", [0, 6, 7, 11, 13, 18, 21, 29])
async def test_boundary_scan_matches_full_scan(monkeypatch, boundary_at):
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    for turn in range(6):
        inv_id = f"inv-{turn}"
        call = ToolCall(f"c{turn}", "lookup", "{}")
        for ev in (
            Event(author="user", choices=[Message.user(f"question {turn}")], invocation_id=inv_id),
            Event(author="a", choices=[Message.assistant("", [call])], invocation_id=inv_id),
            Event(author="a", choices=[Message.tool(call.id, "lookup", f"result {turn}")], invocation_id=inv_id),
            Event(author="a", choices=[Message.assistant(f"answer {turn}")], invocation_id=inv_id),
            Event(author="a", choices=[Message.assistant("", [ToolCall(f"d{turn}", "lookup", "{}")])],
                  invocation_id=inv_id),
        ):
            await svc.append_event(session, ev)
    anchor = session.events[boundary_at]
    await svc.write_summary(session, "", Summary("the story so far", anchor.timestamp,
                                                 SummaryBoundary("", anchor.timestamp, anchor.id)))
    agent = LLMAgent("a", ScriptedModel([]), instruction="hi", summary=SummaryPolicy())
    inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=agent,
                     message=Message.user("question 5"), id="inv-5", user_event=session.events[25])

    fast = (await agent.build_draft(inv)).to_model_request().messages
    assert steps_module.projection_start(inv) > 0 or boundary_at == 0
    monkeypatch.setattr(steps_module, "projection_start", lambda inv: 0)
    full = (await agent.build_draft(inv)).to_model_request().messages
    assert fast == full
