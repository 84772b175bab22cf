"""Per-branch summaries (each under its filter key, over its branch's view) and the full-session cascade."""

from __future__ import annotations

from summary_helpers import answer, seeded, ts, user

from agentlab.events import OBJ_STATE, Event
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import LLMAgent, Runner
from agentlab.runtime.composition import ParallelAgent
from agentlab.summary import Summarizer, SummaryPolicy, SummaryWorker
from agentlab.summary.coverage import summary_in_force


def worker_with(model, svc, **kwargs) -> SummaryWorker:
    policy = SummaryPolicy(**kwargs)
    return SummaryWorker(svc, Summarizer(model, policy), policy)


def marker(states: dict) -> Event:
    return Event(author="fan", object=OBJ_STATE, state_delta=states, filter_key="main", timestamp=ts())


def prompt(model, i=-1) -> str:
    return model.requests[i].messages[-1].content


async def test_a_branch_summary_covers_its_view_never_a_sibling(svc):
    session = await seeded(svc, [
        user("root question", "r0", "main"),
        marker({"branch:main/a": "open", "branch:main/b": "open"}),
        user("alpha task", "r1", "main/a"), answer("alpha result", "r1", "main/a"),
        user("beta task", "r2", "main/b"), answer("beta result", "r2", "main/b"),
    ])
    model = ScriptedModel(["summary of a", "summary of b"])
    worker = worker_with(model, svc)
    assert await worker.summarize(session, "main/a", force=True)
    assert "root question" in prompt(model) and "alpha result" in prompt(model) and "beta" not in prompt(model)
    assert await worker.summarize(session, "main/b", force=True)
    assert "beta result" in prompt(model) and "alpha" not in prompt(model)
    assert session.summaries["main/a"].text == "summary of a"
    assert session.summaries["main/b"].text == "summary of b"
    # each branch's request shows its own summary; the parent has none of its own
    assert summary_in_force(session.summaries, "main/a").text == "summary of a"
    assert summary_in_force(session.summaries, "main") is None


async def test_the_full_session_summary_advances_only_over_joined_branches(svc):
    session = await seeded(svc, [
        user("root question", "r0", "main"),
        marker({"branch:main/a": "open", "branch:main/b": "open"}),
        user("alpha task", "r1", "main/a"), answer("alpha result", "r1", "main/a"),
    ])
    model = ScriptedModel(["before the fork", "after the join"])
    worker = worker_with(model, svc)
    assert await worker.summarize(session, "", force=True)
    first = prompt(model)
    assert "root question" in first and "alpha" not in first  # branch a is still open
    assert session.summaries[""].boundary.last_event_id == session.events[0].id
    await svc.append_event(session, marker({"branch:main/a": "joined", "branch:main/b": "joined"}))
    assert await worker.summarize(session, "", force=True)
    assert "alpha result" in prompt(model)
    assert session.summaries[""].boundary.last_event_id == session.events[3].id


async def test_cascade_from_an_open_branch_keeps_the_full_session_behind(svc):
    session = await seeded(svc, [
        user("root question", "r0", ""),
        marker({"branch:main/a": "open"}),
        user("alpha task", "r1", "main/a"), answer("alpha result", "r1", "main/a"),
    ])
    model = ScriptedModel(default_reply="s")
    worker = worker_with(model, svc, cascade_full_session=True)
    assert await worker.summarize(session, "main/a", force=True)
    # the branch sees every event, but it is open: no copy to the full session, which stops at the fork
    assert model.calls == 2
    assert session.summaries["main/a"].boundary.last_event_id == session.events[-1].id
    assert session.summaries[""].boundary.last_event_id == session.events[0].id


async def test_a_parallel_run_writes_one_summary_per_branch(svc):
    summarizer = ScriptedModel(default_reply="branch summary")
    policy = SummaryPolicy(events_over=1)
    worker = SummaryWorker(svc, Summarizer(summarizer, policy), policy)
    fan = ParallelAgent("fan", [LLMAgent("a", ScriptedModel(["A"]), summary=policy),
                                LLMAgent("b", ScriptedModel(["B"]), summary=policy)])
    runner = Runner("app", fan, svc, summary_worker=worker)
    [e async for e in runner.run("u", "s", "go", filter_key="main")]
    await runner.close()
    session = await svc.get_session("app", "u", "s")
    assert {"main/a", "main/b"} <= set(session.summaries)
    for key, own in (("main/a", "A"), ("main/b", "B")):
        assert session.summaries[key].boundary.filter_key == key
        covered = [e for e in session.events if e.id == session.summaries[key].boundary.last_event_id]
        # it covers the branch's own answer, not the parent's joined report of both branches
        assert covered and covered[0].filter_key == key and covered[0].text == own
    assert "main" in session.summaries  # the parent's key summarises its own view (the joined reports)
