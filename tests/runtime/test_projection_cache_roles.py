"""The projection cache mirrors a step by its declared role, not its class."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from agentlab.compaction import protected_units, unit_of
from agentlab.core import COMPACT, ContextMechanism, EventsRole, Invocation, RequestDraft, StagedProcessor
from agentlab.events import Event, Message, ToolCall, user_event
from agentlab.model.scripted import ScriptedModel
from agentlab.model.tokens import event_tokens
from agentlab.runtime import LLMAgent
from agentlab.runtime.projection_cache import plan_or_reason
from agentlab.session.inmemory import InMemorySessionService


class ClearOldResults:
    """A compaction step of its own: every tool result outside the protected units becomes "[cleared]"."""

    name = "clear_old_results"
    events_role: ClassVar[EventsRole] = EventsRole.COMPACTION
    keep_recent_requests = 1

    def signature(self, draft: RequestDraft) -> tuple[Any, ...]:
        return ("clear", len(draft.tools))

    def decide(self, e: Event, *, historical: bool, has_current: bool,
               draft_signature: tuple[Any, ...]) -> tuple[Event, str] | None:
        if not historical or e.message is None:
            return None
        return e.copy_with(choices=[e.message.with_content("[cleared]")], metadata={**e.metadata, "compacted": "pass0"},
                           token_count=None), "pass0"

    def stat(self, results: int, tokens_before: int, tokens_after: int, passes: dict[str, int]) -> dict[str, Any]:
        return {"kind": "cleared", "results": results, "tokens_before": tokens_before, "tokens_after": tokens_after,
                **passes}

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        events = draft.events
        protected = protected_units(events, inv.request_id or None, self.keep_recent_requests)
        out, replaced = [], 0
        for e in events:
            decision = self.decide(e, historical=e.is_tool_result() and unit_of(e) not in protected,
                                   has_current=True, draft_signature=self.signature(draft))
            out.append(decision[0] if decision else e)
            replaced += decision is not None
        if replaced:
            before = sum(event_tokens(e) for e in events)
            draft.events = out
            draft.stats.append(self.stat(replaced, before, sum(event_tokens(e) for e in out), {"pass0": replaced}))


class ClearOldResultsMechanism(ContextMechanism):
    def request_processors(self) -> list[StagedProcessor]:
        return [StagedProcessor(COMPACT, ClearOldResults())]


async def test_a_compaction_step_of_another_class_is_mirrored_and_equals_the_full_chain(caplog: Any) -> None:
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    agent = LLMAgent("a", ScriptedModel([]), mechanisms=[ClearOldResultsMechanism()])
    plan, reason = plan_or_reason(agent.processors)
    assert plan is not None and isinstance(plan.compaction, ClearOldResults) and reason == ""
    for turn in range(6):
        run = f"run-{turn}"
        call = ToolCall(f"c{turn}", "lookup", "{}")
        for event in (user_event(f"q{turn}", invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.assistant("", [call])], invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.tool(call.id, "lookup", f"payload {turn} " * 50)],
                            invocation_id=run, request_id=run),
                      Event(author="a", choices=[Message.assistant(f"a{turn}")], invocation_id=run, request_id=run)):
            await svc.append_event(session, event)
        current = user_event(f"next {turn}", invocation_id=f"now-{turn}", request_id=f"now-{turn}")
        inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=agent,
                         message=current.message, id=f"now-{turn}", user_event=current)  # type: ignore[arg-type]
        agent.incremental_projection = True
        fast = await agent.build_draft(inv)
        agent.incremental_projection = False
        full = await agent.build_draft(inv)
        assert fast.to_model_request().messages == full.to_model_request().messages
        assert fast.stats == full.stats
        cleared = sum(1 for m in fast.to_model_request().messages if m.content == "[cleared]")
        assert cleared == max(0, turn)  # all but the most recent completed unit
    assert agent.projection_cache.counts["full_chain"] == 0 and agent.projection_cache.counts["incremental"] >= 4


def test_a_chain_the_cache_cannot_mirror_is_logged_with_the_reason(caplog: Any) -> None:
    class Untyped:
        name = "untyped_compaction"

        async def process(self, inv: Invocation, draft: RequestDraft) -> None:
            return None

    class Twice(ContextMechanism):
        def request_processors(self) -> list[StagedProcessor]:
            return [StagedProcessor(COMPACT, ClearOldResults()), StagedProcessor(COMPACT, ClearOldResults())]

    class NoRole(ContextMechanism):
        def request_processors(self) -> list[StagedProcessor]:
            return [StagedProcessor(COMPACT, Untyped())]

    twice = LLMAgent("a", ScriptedModel([]), mechanisms=[Twice()])
    assert plan_or_reason(twice.processors)[1].startswith("two processors declare EventsRole.COMPACTION")
    untyped = LLMAgent("a", ScriptedModel([]), mechanisms=[NoRole()])
    from agentlab.runtime.projection_cache import plan_for

    with caplog.at_level(logging.DEBUG, logger="agentlab.runtime.projection_cache"):
        assert plan_for(untyped.processors) is None
    assert "processor 'untyped_compaction' declares no events_role" in caplog.text
