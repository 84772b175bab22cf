"""The pre-model pressure path: synchronous summary at >= 70 % of the window, then one rebuild."""

from __future__ import annotations

import logging

from agentlab.compaction import CompactionPolicy, relieve_context_pressure
from agentlab.events import Event, Message, user_event
from agentlab.model import tokens
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import Invocation, LLMAgent, Runner, RunOptions
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import SummaryPolicy, summary_worker_for

WINDOW = 4000  # threshold = 0.7 x 4000 = 2800 tokens


def old_turns(n: int = 20) -> list[Event]:
    out = []
    for i in range(n):
        filler = " ".join(f"detail{i}-{j}" for j in range(30))
        out.append(user_event(f"old question {i}: {filler}", invocation_id=f"old{i}", request_id=f"old{i}"))
        out.append(Event(author="agent", choices=[Message.assistant(f"old answer {i}: {filler}")],
                         invocation_id=f"old{i}", request_id=f"old{i}"))
    return out


async def seeded_runner(summary_model, *, summary=True, compaction=True):
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    for e in old_turns():
        await svc.append_event(session, e)
    model = ScriptedModel(default_reply=lambda request: _answer(summary_model))
    agent = LLMAgent(
        "agent", model, instruction="Answer briefly.",
        summary=SummaryPolicy() if summary else None,
        summary_model=summary_model,
        compaction=CompactionPolicy(enabled=compaction),
    )
    return Runner("app", agent, svc), model, svc


def _answer(summary_model) -> str:
    # Background summary jobs run after the answer; record what happened *before* the model call.
    _answer.seen.append(summary_model.calls)
    return "the answer"


_answer.seen = []


def summary_calls_before_answer() -> int:
    return _answer.seen[-1]


def history_tokens() -> int:
    return sum(tokens.count_event(e) for e in old_turns())


async def test_the_seeded_history_is_over_the_threshold():
    assert history_tokens() > CompactionPolicy().sync_threshold(WINDOW) == 2800


async def test_advancing_boundary_rebuilds_the_request_from_summary_and_tail():
    summary_model = ScriptedModel(["Twenty old questions about details were answered."], default_reply="later")
    runner, model, svc = await seeded_runner(summary_model)
    answer, events = await runner.ask("u", "s", "new question", options=RunOptions(context_window=WINDOW))
    assert answer == "the answer"
    assert summary_calls_before_answer() == 1 and summary_model.requests[0].purpose == "summary"
    sent = model.requests[0]
    assert "Twenty old questions" in sent.messages[0].content
    assert [m.content for m in sent.messages[1:]] == ["new question"]
    assert tokens.count_messages(sent.messages) < 2800
    sync = [e.metadata["compaction"] for e in events if e.object == "context.compaction"]
    assert sync and sync[0]["kind"] == "sync_summary"
    assert sync[0]["tokens_before"] >= 2800 > sync[0]["tokens_after"]
    # the ledger keeps every old turn
    session = await svc.get_session("app", "u", "s")
    assert sum(1 for e in session.events if e.text.startswith("old question")) == 20
    await runner.close()


async def test_no_advance_sends_the_original_request():
    summary_model = ScriptedModel(["", ""])  # empty twice: no update
    runner, model, svc = await seeded_runner(summary_model)
    await runner.ask("u", "s", "new question", options=RunOptions(context_window=WINDOW))
    assert summary_calls_before_answer() == 2
    sent = model.requests[0]
    assert sum(1 for m in sent.messages if m.content.startswith("old question")) == 20
    assert "summary_of_previous_interactions" not in sent.messages[0].content
    await runner.close()


async def test_original_objects_are_returned_untouched_when_nothing_advances():
    summary_model = ScriptedModel([RuntimeError("summariser crashed")])
    runner, model, svc = await seeded_runner(summary_model)
    session = await svc.get_session("app", "u", "s")
    current = user_event("new question", invocation_id="now", request_id="now")
    await svc.append_event(session, current)
    inv = Invocation(app_name="app", user_id="u", session=session, session_service=svc, agent=runner.agent,
                     message=Message.user("new question"), options=RunOptions(context_window=WINDOW),
                     id="now", user_event=current, summary_worker=runner.summary_worker)
    draft = await runner.agent.build_draft(inv)
    request = draft.to_model_request()
    out_request, out_draft = await relieve_context_pressure(runner.agent, inv, request, draft, allow_tools=True)
    assert out_request is request and out_draft is draft
    assert summary_model.calls == 1


async def test_below_the_threshold_no_summary_runs():
    summary_model = ScriptedModel(default_reply="background only")
    runner, model, svc = await seeded_runner(summary_model)
    await runner.ask("u", "s", "new question", options=RunOptions(context_window=100_000))
    assert summary_calls_before_answer() == 0


async def test_window_comes_from_the_model_when_the_run_does_not_override_it():
    summary_model = ScriptedModel(["short"], default_reply="later")
    runner, model, svc = await seeded_runner(summary_model)
    model.info = type(model.info)("small-window", WINDOW)
    await runner.ask("u", "s", "new question")
    assert summary_calls_before_answer() == 1


async def test_without_a_summary_policy_the_request_goes_as_it_is():
    summary_model = ScriptedModel(["never"])
    runner, model, svc = await seeded_runner(summary_model, summary=False)
    assert runner.summary_worker is None
    await runner.ask("u", "s", "new question", options=RunOptions(context_window=WINDOW))
    assert summary_calls_before_answer() == 0
    assert sum(1 for m in model.requests[0].messages if m.content.startswith("old question")) == 20


async def test_persistence_error_after_in_memory_advance_still_uses_the_rebuilt_request(caplog):
    summary_model = ScriptedModel(["Kept only in memory."])
    runner, model, svc = await seeded_runner(summary_model)

    async def failing_write(*args, **kwargs):
        raise OSError("database is locked")

    svc.write_summary = failing_write
    runner.summary_worker = summary_worker_for(runner.agent, svc)
    with caplog.at_level(logging.WARNING):
        await runner.ask("u", "s", "new question", options=RunOptions(context_window=WINDOW))
    sent = model.requests[0]
    assert "Kept only in memory." in sent.messages[0].content
    assert [m.content for m in sent.messages[1:]] == ["new question"]
    assert "could not be persisted" in caplog.text
    session = await svc.get_session("app", "u", "s")
    assert session.summaries == {}  # nothing reached the store


async def test_cache_safe_fork_gets_the_parent_request():
    summary_model = ScriptedModel(["forked summary"])
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u", "s")
    for e in old_turns():
        await svc.append_event(session, e)
    model = ScriptedModel(default_reply="ok")
    agent = LLMAgent("agent", model, instruction="Answer briefly.",
                     summary=SummaryPolicy(cache_safe_fork=True),
                     summary_model=summary_model, compaction=CompactionPolicy(enabled=True))
    runner = Runner("app", agent, svc)
    await runner.ask("u", "s", "new question", options=RunOptions(context_window=WINDOW))
    fork = summary_model.requests[0].messages
    assert fork[0].content == "Answer briefly." and fork[-2].content == "new question"
    assert "Now summarise" in fork[-1].content
    assert "forked summary" in model.requests[0].messages[0].content
    await runner.close()
