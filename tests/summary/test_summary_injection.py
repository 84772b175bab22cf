"""Summary injection into the request, and the Runner's summary trigger."""

from __future__ import annotations

from summary_helpers import answer, call, result, seeded, turns, user

from agentlab.events import Message
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import FunctionTool, Invocation, LLMAgent, Runner
from agentlab.session.base import Summary, SummaryBoundary
from agentlab.summary import SummaryPolicy, SummaryWorker


def agent_with(policy: SummaryPolicy | None = None, model=None, **kwargs) -> LLMAgent:
    return LLMAgent("agent", model or ScriptedModel(["ok"]), instruction="Be helpful.",
                    summary=policy or SummaryPolicy(), **kwargs)


def invocation(session, svc, agent, text="current question", req="r-now", filter_key=""):
    inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=agent,
                     message=Message.user(text), filter_key=filter_key, id=req)
    return inv


async def with_current_input(svc, session, text="current question", req="r-now"):
    current = user(text, req)
    await svc.append_event(session, current)
    return current


def boundary_at(event, key=""):
    return SummaryBoundary(key, event.timestamp, event.id)


async def test_system_injection_keeps_only_events_after_the_boundary(svc):
    session = await seeded(svc, turns(3))
    await svc.write_summary(session, "", Summary("they discussed q0 and q1", 1.0, boundary_at(session.events[3])))
    agent = agent_with()
    inv = invocation(session, svc, agent)
    inv.user_event = await with_current_input(svc, session)
    draft = await agent.build_draft(inv)
    texts = [e.text.split()[0] for e in draft.events]
    assert texts == ["question-2", "answer-2", "current"]
    assert draft.summary.text == "they discussed q0 and q1"
    system = draft.messages()[0].content
    assert system.startswith("Be helpful.")
    assert "<summary_of_previous_interactions>\nthey discussed q0 and q1\n</summary_of_previous_interactions>" in system
    assert "may be out of date" in system and "trust the conversation" in system


async def test_user_injection_prefixes_the_first_user_message(svc):
    session = await seeded(svc, turns(2))
    await svc.write_summary(session, "", Summary("S", 1.0, boundary_at(session.events[1])))
    agent = agent_with(SummaryPolicy(injection="user"))
    inv = invocation(session, svc, agent)
    inv.user_event = await with_current_input(svc, session)
    messages = (await agent.build_draft(inv)).messages()
    assert "summary_of_previous_interactions" not in messages[0].content
    first_user = next(m for m in messages if m.role == "user")
    assert first_user.content.startswith("Context carried over from earlier interactions:")
    assert "this conversation wins" in first_user.content and first_user.content.endswith("question-1 "
                                                                                          + " ".join(f"w1x{j}" for j in range(8)))


async def test_no_summary_means_full_history(svc):
    session = await seeded(svc, turns(2))
    agent = agent_with()
    inv = invocation(session, svc, agent)
    inv.user_event = await with_current_input(svc, session)
    draft = await agent.build_draft(inv)
    assert len(draft.events) == 5 and draft.summary is None


async def test_branch_key_falls_back_to_the_full_session_summary(svc):
    session = await seeded(svc, turns(2))
    await svc.write_summary(session, "", Summary("full", 1.0, boundary_at(session.events[1])))
    agent = agent_with()
    inv = invocation(session, svc, agent, filter_key="app/a")
    inv.user_event = await with_current_input(svc, session)
    assert (await agent.build_draft(inv)).summary.text == "full"
    await svc.write_summary(session, "app/a", Summary("branch", 2.0, boundary_at(session.events[1], "app/a")))
    assert (await agent.build_draft(inv)).summary.text == "branch"


async def test_current_input_comes_back_when_the_summary_covered_it(svc):
    session = await seeded(svc, turns(1))
    agent = agent_with()
    inv = invocation(session, svc, agent)
    inv.user_event = await with_current_input(svc, session)
    await svc.write_summary(session, "", Summary("all of it", 1.0, boundary_at(inv.user_event)))
    draft = await agent.build_draft(inv)
    assert [e.id for e in draft.events] == [inv.user_event.id]


async def test_current_run_tool_round_absorbed_by_summary_is_reprojected_without_payload(svc):
    session = await seeded(svc, turns(1))
    agent = agent_with()
    inv = invocation(session, svc, agent)
    inv.user_event = await with_current_input(svc, session)
    tool_call = call("lookup", "c1", "r-now")
    tool_result = result("lookup", "c1", "BIG PAYLOAD " * 50, "r-now")
    for e in (tool_call, tool_result):
        await svc.append_event(session, e)
    ledger_before = [e.to_json() for e in session.events]
    await svc.write_summary(session, "", Summary("looked it up", 1.0, boundary_at(tool_result)))
    draft = await agent.build_draft(inv)
    roles = [m.role for m in draft.messages()]
    assert roles == ["system", "user", "assistant", "tool"]
    tool_msg = draft.messages()[-1]
    assert "BIG PAYLOAD" not in tool_msg.content and "current_invocation_summary" in tool_msg.content
    assert "arguments omitted" in draft.messages()[-2].tool_calls[0].arguments
    assert [e.to_json() for e in session.events] == ledger_before  # copies only


async def test_boundary_between_a_call_and_its_result_keeps_the_round_well_formed(svc):
    tool_call = call("lookup", "c1", "r1")
    tool_result = result("lookup", "c1", "the result", "r1")
    session = await seeded(svc, [user("q", "r1"), tool_call, tool_result, answer("a", "r1")])
    await svc.write_summary(session, "", Summary("partial", 1.0, boundary_at(tool_call)))
    agent = agent_with()
    inv = invocation(session, svc, agent)
    inv.user_event = await with_current_input(svc, session)
    messages = (await agent.build_draft(inv)).messages()
    assert [m.role for m in messages] == ["system", "assistant", "tool", "assistant", "user"]
    assert messages[2].content == "the result"


# ------------------------------------------------------------------------------ runner trigger


class RecordingWorker(SummaryWorker):
    """Records which appended event each enqueue followed."""

    def __init__(self, svc, model, policy):
        from agentlab.summary import Summarizer

        super().__init__(svc, Summarizer(model, policy), policy)
        self.enqueued_after: list[str] = []

    async def enqueue(self, session, filter_key="", **kwargs):
        last = session.events[-1]
        kind = "tool_result" if last.is_tool_result() else "final" if last.is_final_response() else last.role
        self.enqueued_after.append(kind)
        await super().enqueue(session, filter_key, **kwargs)


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


async def test_runner_enqueues_only_after_qualifying_appends(svc):
    two_calls = ScriptedModel.tool_call("lookup", {"key": "a"}, id="c1")
    two_calls = Message.assistant("", tuple(two_calls.tool_calls) + tuple(
        ScriptedModel.tool_call("lookup", {"key": "b"}, id="c2").tool_calls))
    model = ScriptedModel([two_calls, "final answer"])
    policy = SummaryPolicy()
    agent = agent_with(policy, model=model, tools=[FunctionTool(lookup)], summary_model=ScriptedModel(default_reply="s"))
    worker = RecordingWorker(svc, agent.summary_model, policy)
    runner = Runner("app", agent, svc, summary_worker=worker)
    await runner.ask("u", "s", "look up a and b")
    # user input: no; bare tool call: no; first of two results (round incomplete): no;
    # second result: yes; final answer: yes
    assert worker.enqueued_after == ["tool_result", "final"]
    await runner.close()


async def test_runner_does_not_enqueue_after_errors(svc):
    from agentlab.model.base import ServerError

    policy = SummaryPolicy()
    agent = agent_with(policy, model=ScriptedModel([ServerError("down")]))
    worker = RecordingWorker(svc, ScriptedModel(default_reply="s"), policy)
    runner = Runner("app", agent, svc, summary_worker=worker)
    await runner.ask("u", "s", "hello")
    assert worker.enqueued_after == []
    await runner.close()


async def test_skip_summarization_marker_is_respected(svc):
    session = await seeded(svc, [user("q", "r1")])
    marked = answer("a", "r1")
    marked.metadata["skip_summarization"] = True
    assert not SummaryWorker.qualifies(session, marked)
    assert SummaryWorker.qualifies(session, answer("a", "r1"))


async def test_runner_builds_the_worker_and_the_next_run_sees_the_summary(svc):
    summary_model = ScriptedModel(default_reply="User asked about apples; agent answered.")
    model = ScriptedModel(["apples are red", "yes, red"])
    agent = agent_with(SummaryPolicy(), model=model, summary_model=summary_model)
    runner = Runner("app", agent, svc)
    assert isinstance(runner.summary_worker, SummaryWorker)
    await runner.ask("u", "s", "what colour are apples?")
    await runner.summary_worker.drain()
    await runner.ask("u", "s", "sure?")
    second = model.requests[1].messages
    assert "User asked about apples" in second[0].content
    assert [m.content for m in second[1:]] == ["sure?"]  # covered turns are not resent raw
    await runner.close()
