"""The agent works its projection plan out once per chain, and again whenever the chain changes."""

from __future__ import annotations

from agentlab.compaction import CompactionPolicy
from agentlab.core import EventsRole
from agentlab.events import user_event
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import Invocation, LLMAgent
from agentlab.runtime.projection_cache import PlanMemo, plan_for
from agentlab.session.inmemory import InMemorySessionService


def test_the_memo_answers_as_plan_for_and_follows_every_change_of_the_chain() -> None:
    agent = LLMAgent("a", ScriptedModel([]), compaction=CompactionPolicy(enabled=True))
    memo = PlanMemo()
    first = memo.plan(agent.processors)
    assert first is not None and first == plan_for(agent.processors)
    assert memo.plan(agent.processors) is first  # same chain: not worked out again
    assert memo.plan(list(agent.processors)) is first  # an equal list of the same objects is the same chain

    history = first.history
    history.events_role = None  # type: ignore[attr-defined]  # an instance now declaring no role
    try:
        assert memo.plan(agent.processors) is None and plan_for(agent.processors) is None
    finally:
        del history.events_role  # type: ignore[attr-defined]
    assert history.events_role is EventsRole.HISTORY
    again = memo.plan(agent.processors)
    assert again is not None and again is not first and again.history is history

    # Another chain of the same shape: the plan names the new objects, not the old ones.
    other = LLMAgent("b", ScriptedModel([]), compaction=CompactionPolicy(enabled=True))
    swapped = memo.plan(other.processors)
    assert swapped is not None and swapped.history is other.processors[1] and swapped.history is not history
    assert memo.plan(other.processors[:-1]) == plan_for(other.processors[:-1])  # compaction step removed


async def test_an_agent_whose_chain_is_replaced_builds_through_the_new_chain() -> None:
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    agent = LLMAgent("a", ScriptedModel([]), instruction="first instruction")
    current = user_event("hello", invocation_id="r1", request_id="r1")
    await svc.append_event(session, current)
    inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=agent,
                     message=current.message, id="r1", user_event=current)
    request, _ = await agent.build_request(inv)
    assert request.messages[0].content == "first instruction"
    assert agent.projection_cache.counts["full_chain"] == 0
    # A processor declaring no role: the cache cannot mirror the chain, so the full chain runs it.
    agent.processors = [*agent.processors, _Unroled()]
    request, _ = await agent.build_request(inv)
    assert request.messages[-1].content == "hello [tagged]"
    assert agent.projection_cache.counts["full_chain"] == 0  # a chain the cache cannot mirror never reaches it
    assert agent._plan_memo.plan(agent.processors) is None


class _Unroled:
    """A processor that declares no ``events_role`` (it tags the last message)."""

    name = "unroled"

    async def process(self, inv: Invocation, draft: object) -> None:
        events = draft.events  # type: ignore[attr-defined]
        last = events[-1]
        events[-1] = last.copy_with(choices=[last.message.with_content(last.message.content + " [tagged]")])
