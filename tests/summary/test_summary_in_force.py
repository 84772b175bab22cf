"""One rule for which summary is in force: the request and recall's hidden scope agree.

Under filter key ``a/b`` with a summary only at ``a``, the request used to show the full history
(the injection tried the exact key, then the full session) while ``session_search(scope=current_hidden)``
searched the same events as hidden (the coverage accessor also tried parent keys).
"""

from __future__ import annotations

from agentlab.core import Invocation, project
from agentlab.events import Event, Message, user_event
from agentlab.model.base import ModelInfo
from agentlab.model.scripted import ScriptedModel
from agentlab.recall import RecallPolicy
from agentlab.recall.search import session_search
from agentlab.runtime import LLMAgent
from agentlab.session.base import Summary, SummaryBoundary
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import SummaryPolicy, coverage_boundary, pick_summary, summary_in_force

WORDS = ["zebra", "walrus", "narwhal", "ocelot"]


async def _branch_session(summary_key: str) -> tuple[InMemorySessionService, object, list[Event]]:
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    events: list[Event] = []
    for turn, word in enumerate(WORDS):
        run = f"run-{turn}"
        for event in (user_event(f"tell me about the {word}", invocation_id=run, request_id=run, filter_key="a/b"),
                      Event(author="a", choices=[Message.assistant(f"the {word} is an animal")], invocation_id=run,
                            request_id=run, filter_key="a/b")):
            await svc.append_event(session, event)
            events.append(event)
    anchor = events[3]  # the answer of turn 1: turns 0 and 1 are covered
    await svc.write_summary(session, summary_key, Summary("zebras and walruses were discussed", anchor.timestamp,
                                                          SummaryBoundary(summary_key, anchor.timestamp, anchor.id)))
    return svc, session, events


async def test_a_parent_key_summary_is_in_force_for_the_child_key_in_the_request_and_in_recall() -> None:
    svc, session, events = await _branch_session("a")
    assert pick_summary(session, "a/b") is session.summaries["a"]  # type: ignore[attr-defined]
    current = user_event("and the ocelot?", invocation_id="now", request_id="now", filter_key="a/b")
    await svc.append_event(session, current)  # type: ignore[arg-type]
    agent = LLMAgent("a", ScriptedModel([], info=ModelInfo("m", 100_000)), summary=SummaryPolicy(),
                     recall=RecallPolicy())
    inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=agent,  # type: ignore[arg-type]
                     message=current.message, id="now", user_event=current, filter_key="a/b")  # type: ignore[arg-type]
    request, draft = await agent.build_request(inv)
    in_request = {e.id for e in draft.events}
    assert "zebras and walruses were discussed" in request.messages[0].content
    assert in_request == {e.id for e in events[4:]} | {current.id}
    # recall's hidden scope searches exactly what the request left out
    boundary = await coverage_boundary(session, svc, "a/b")  # type: ignore[arg-type]
    assert boundary is not None and boundary.last_event_id == events[3].id
    found: set[str] = set()
    for word in WORDS:
        result = await session_search(inv, RecallPolicy(), word, scope="current_hidden")
        found |= {hit["event_id"] for hit in result["results"]}
    assert found == {e.id for e in events[:4]}
    assert not found & in_request
    # and project() agrees with the agent
    projected = await project(session, agent.context_mechanisms(), current, ModelInfo("m", 100_000),  # type: ignore[arg-type]
                              session_service=svc, filter_key="a/b")
    assert projected.request.messages == request.messages
    assert set(projected.report("summary").hidden_event_ids) == {e.id for e in events[:4]}


async def test_the_nearest_summary_with_text_wins() -> None:
    def summary(text: str) -> Summary:
        return Summary(text, 1.0, SummaryBoundary("", 1.0, "e"))

    summaries = {"": summary("whole"), "a": summary("branch a"), "a/b/c": summary("   ")}
    assert summary_in_force(summaries, "a/b/c").text == "branch a"  # type: ignore[union-attr]  # blank text is no summary
    assert summary_in_force(summaries, "a/b").text == "branch a"  # type: ignore[union-attr]
    assert summary_in_force(summaries, "x/y").text == "whole"  # type: ignore[union-attr]
    assert summary_in_force(summaries, "").text == "whole"  # type: ignore[union-attr]
    assert summary_in_force({"a/b": summary("child")}, "a") is None  # a child's summary never covers its parent


def test_the_walk_over_parent_keys_visits_exactly_the_covering_keys() -> None:
    from agentlab.summary import covering_keys

    class Recording(dict):  # type: ignore[type-arg]
        def __init__(self) -> None:
            super().__init__()
            self.visited: list[str] = []

        def get(self, k: str, default: object = None) -> object:
            self.visited.append(k)
            return default

    for key in ("", "a", "a/b", "a/b/c", " a /b ", "x/y/z/w"):
        recording = Recording()
        assert summary_in_force(recording, key) is None
        assert recording.visited == covering_keys(key), key
