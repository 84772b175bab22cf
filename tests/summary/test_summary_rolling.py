"""The rolling update: delta-only input, atomic writes, failure safety, budgets, locks, the pool."""

from __future__ import annotations

import asyncio
import logging

from summary_helpers import GatedModel, answer, call, result, seeded, turns, user

from agentlab.model import tokens
from agentlab.model.base import ContextLengthError, ModelError, ModelInfo, ServerError
from agentlab.model.scripted import ScriptedModel
from agentlab.session.base import Summary, SummaryBoundary
from agentlab.summary import (
    FORK_PROMPT_VERSION,
    PREVIOUS_SUMMARY_LABEL,
    Summarizer,
    SummaryPolicy,
    SummaryWorker,
)


def worker_with(model, svc, **policy_kwargs) -> SummaryWorker:
    policy = SummaryPolicy(**policy_kwargs)
    return SummaryWorker(svc, Summarizer(model, policy), policy)


def prompt_of(model, i: int = -1) -> str:
    return model.requests[i].messages[-1].content


async def test_rolling_update_reads_only_the_delta_with_previous_summary_in_front(svc):
    session = await seeded(svc, turns(2))
    model = ScriptedModel(["first summary", "second summary"])
    worker = worker_with(model, svc)
    assert await worker.summarize(session)
    first = await svc.get_summary(session)
    assert first.text == "first summary" and first.boundary.last_event_id == session.events[-1].id

    for e in turns(1, start=2):
        await svc.append_event(session, e)
    assert await worker.summarize(session)
    prompt = prompt_of(model)
    assert "question-2" in prompt and "answer-2" in prompt
    assert "question-0" not in prompt and "question-1" not in prompt  # covered events never re-read
    # the previous summary is the synthetic system line in front of the delta
    conversation = prompt.split("<conversation>")[1]
    assert conversation.lstrip().startswith(f"system: {PREVIOUS_SUMMARY_LABEL}\nfirst summary")
    assert conversation.index("first summary") < conversation.index("question-2")
    assert model.requests[-1].purpose == "summary"
    assert (await svc.get_summary(session)).boundary.last_event_id == session.events[-1].id


async def test_no_delta_and_no_force_means_no_model_call(svc):
    session = await seeded(svc, turns(1))
    model = ScriptedModel(["s1"])
    worker = worker_with(model, svc)
    assert await worker.summarize(session)
    assert not await worker.summarize(session)
    assert model.calls == 1 and worker.stats.skipped_no_delta == 1


async def test_text_and_boundary_are_written_together_and_only_after_text(svc):
    session = await seeded(svc, turns(2))
    old = Summary("old text", updated_at=1.0,
                  boundary=SummaryBoundary("", session.events[1].timestamp, session.events[1].id))
    await svc.write_summary(session, "", old)
    seen_during_call = {}

    def reply(request):
        seen_during_call["stored"] = svc._sessions[session.key].summaries[""]
        return "new text"

    writes = []
    original_write = svc.write_summary

    async def spy(s, key, summary):
        writes.append(summary)
        await original_write(s, key, summary)

    svc.write_summary = spy
    worker = worker_with(ScriptedModel([reply]), svc)
    assert await worker.summarize(session)
    assert seen_during_call["stored"] is old  # nothing moved while the model was working
    assert len(writes) == 1  # one write carries both text and boundary
    assert writes[0].text == "new text" and writes[0].boundary.last_event_id == session.events[-1].id


async def test_model_error_leaves_old_summary_untouched(svc, caplog):
    session = await seeded(svc, turns(2))
    old = Summary("old", updated_at=1.0, boundary=SummaryBoundary("", 0.0, session.events[1].id))
    await svc.write_summary(session, "", old)
    worker = worker_with(ScriptedModel([ServerError("summary backend down")]), svc)
    with caplog.at_level(logging.WARNING):
        assert not await worker.summarize(session)
    assert await svc.get_summary(session) is old
    assert "old summary kept" in caplog.text and worker.stats.failed == 1


async def test_empty_text_after_retry_leaves_old_summary_untouched(svc):
    session = await seeded(svc, turns(2))
    old = Summary("old", updated_at=1.0, boundary=SummaryBoundary("", 0.0, session.events[1].id))
    await svc.write_summary(session, "", old)
    model = ScriptedModel(["", "   "])
    worker = worker_with(model, svc)
    assert not await worker.summarize(session)
    assert model.calls == 2  # the one retry at half budget, then give up
    assert await svc.get_summary(session) is old


async def test_events_over_is_strict_in_the_worker(svc):
    session = await seeded(svc, turns(2))  # 4 delta events
    model = ScriptedModel(["s"])
    worker = worker_with(model, svc, events_over=4)
    assert not await worker.summarize(session)
    assert model.calls == 0 and worker.stats.skipped_by_trigger == 1
    await svc.append_event(session, user("one more", "r9"))
    assert await worker.summarize(session)
    assert model.calls == 1


async def test_all_of_versus_any_of_in_the_worker(svc):
    session = await seeded(svc, turns(2))
    strict = worker_with(ScriptedModel(["s"]), svc, events_over=10, tokens_over=5)
    assert not await strict.summarize(session)
    lenient = worker_with(ScriptedModel(["s"]), svc, events_over=10, tokens_over=5, checks_mode="any")
    assert await lenient.summarize(session)


async def test_force_skips_the_trigger_gate(svc):
    session = await seeded(svc, turns(1))
    model = ScriptedModel(["s"])
    worker = worker_with(model, svc, events_over=100)
    assert not await worker.summarize(session)
    assert await worker.summarize(session, force=True)


async def test_context_ratio_uses_the_passed_window(svc):
    session = await seeded(svc, turns(10, words=20))  # ~1,740 tokens of delta
    model = ScriptedModel(["s"])
    worker = worker_with(model, svc, context_ratio=0.5, context_floor_tokens=100)
    assert not await worker.summarize(session, context_window=8192)
    assert not await worker.summarize(session, context_window=3480)  # threshold 1,740: strict
    assert await worker.summarize(session, context_window=3000)


async def test_safe_prefix_advances_the_boundary_only_as_far_as_it_read(svc):
    session = await seeded(svc, turns(12, words=30))  # ~24 events of ~70 tokens
    model = ScriptedModel(default_reply="rolling summary")
    model.info = ModelInfo("tiny", 1000)  # budget 700 tokens
    worker = worker_with(model, svc)
    events = session.events
    assert await worker.summarize(session)
    boundary = (await svc.get_summary(session)).boundary
    covered = next(i for i, e in enumerate(events) if e.id == boundary.last_event_id) + 1
    assert 0 < covered < len(events)
    prompt = prompt_of(model)
    assert events[covered - 1].text.split()[0] in prompt
    assert events[covered].text.split()[0] not in prompt
    assert tokens.count_messages(model.requests[-1].messages) <= 700
    # rolling steps finish the job, each continuing where the last stopped
    steps = 1
    while (await svc.get_summary(session)).boundary.last_event_id != events[-1].id:
        assert await worker.summarize(session)
        steps += 1
        assert steps < 20
    assert steps >= 3
    assert all(tokens.count_messages(r.messages) <= 700 for r in model.requests)


async def test_single_event_larger_than_the_budget_goes_in_truncated(svc):
    huge = "log line with details " * 600  # ~3,000 tokens
    session = await seeded(svc, [user("fetch the logs", "r1"), call("logs", "c1", "r1"),
                                 result("logs", "c1", huge, "r1"), answer("done", "r1")])
    model = ScriptedModel(default_reply="summary")
    model.info = ModelInfo("tiny", 1000)
    worker = worker_with(model, svc)
    while (await svc.get_summary(session)) is None or \
            (await svc.get_summary(session)).boundary.last_event_id != session.events[-1].id:
        assert await worker.summarize(session)
    assert any("characters omitted" in prompt_of(model, i) for i in range(model.calls))
    assert all(tokens.count_messages(r.messages) <= 700 for r in model.requests)


async def test_context_length_error_retries_once_at_half_budget(svc):
    session = await seeded(svc, turns(12, words=30))
    model = ScriptedModel([ContextLengthError("prompt too long for n_ctx"), "retried summary"])
    model.info = ModelInfo("small", 2000)  # budget 1,400, retry budget 700
    worker = worker_with(model, svc)
    assert await worker.summarize(session)
    assert model.calls == 2
    assert tokens.count_messages(model.requests[0].messages) > 700
    assert tokens.count_messages(model.requests[1].messages) <= 700
    summary = await svc.get_summary(session)
    assert summary.text == "retried summary"
    # the boundary is the end of what the retry actually read
    covered = session.event_index(summary.boundary.last_event_id)
    assert session.events[covered].text.split()[0] in prompt_of(model, 1)
    assert session.events[covered + 1].text.split()[0] not in prompt_of(model, 1)
    assert worker.stats.runs[-1]["retried"] is True


async def test_second_failure_propagates_and_keeps_state(svc):
    session = await seeded(svc, turns(2))
    model = ScriptedModel([ContextLengthError("too long"), ContextLengthError("still too long")])
    worker = worker_with(model, svc)
    assert not await worker.summarize(session)
    assert model.calls == 2 and await svc.get_summary(session) is None


async def test_large_previous_summary_is_trimmed_in_the_middle(svc):
    session = await seeded(svc, turns(1))
    big = "HEAD " + "filler " * 2000 + " TAIL"
    await svc.write_summary(session, "", Summary(big, 1.0, SummaryBoundary("", 0.0, "gone")))
    session2 = await svc.get_session("app", "u", "s")
    for e in turns(1, start=5):
        await svc.append_event(session2, e)
    model = ScriptedModel(["short"])
    model.info = ModelInfo("tiny", 1000)
    worker = worker_with(model, svc)
    assert await worker.summarize(session2)
    prompt = prompt_of(model)
    assert "HEAD" in prompt and "TAIL" in prompt and "characters omitted" in prompt
    assert "question-5" in prompt


async def test_skip_recent_leaves_the_last_events_raw(svc):
    session = await seeded(svc, turns(3))
    model = ScriptedModel(["s"])
    worker = worker_with(model, svc, skip_recent=2)
    assert await worker.summarize(session)
    assert "question-2" not in prompt_of(model) and "question-1" in prompt_of(model)
    assert (await svc.get_summary(session)).boundary.last_event_id == session.events[-3].id


async def test_nothing_to_summarise_without_user_text(svc):
    session = await seeded(svc, [answer("hello from the agent", "r1")])
    model = ScriptedModel(["s"])
    worker = worker_with(model, svc)
    assert not await worker.summarize(session)
    assert model.calls == 0


async def test_custom_template_gets_previous_summary_in_its_own_slot(svc):
    session = await seeded(svc, turns(1))
    template = "Old: {previous_summary}\nWords: {max_summary_words}\nNew:\n{conversation_text}"
    model = ScriptedModel(["one", "two"])
    worker = worker_with(model, svc, prompt=template, max_summary_words=40)
    assert await worker.summarize(session)
    for e in turns(1, start=1):
        await svc.append_event(session, e)
    assert await worker.summarize(session)
    prompt = prompt_of(model)
    assert prompt.startswith("Old: one\nWords: 40\nNew:\n") and PREVIOUS_SUMMARY_LABEL not in prompt


async def test_nine_section_prompt_strips_analysis_and_unwraps_summary(svc):
    session = await seeded(svc, turns(1))
    reply = "<analysis>thinking</analysis>\n<summary>\n1. Primary request: q0\n</summary>"
    model = ScriptedModel([reply])
    worker = worker_with(model, svc, prompt="nine_section")
    assert await worker.summarize(session)
    assert (await svc.get_summary(session)).text == "1. Primary request: q0"
    assert "All user messages" in prompt_of(model)


async def test_word_limit_is_stated(svc):
    session = await seeded(svc, turns(1))
    model = ScriptedModel(["s"])
    await worker_with(model, svc, max_summary_words=77).summarize(session)
    assert "under 77 words" in prompt_of(model)


async def test_concurrent_updates_of_one_scope_are_serialised(svc):
    session = await seeded(svc, turns(2))
    model = GatedModel()
    worker = worker_with(model, svc)
    first = asyncio.create_task(worker.summarize(session))
    second = asyncio.create_task(worker.summarize(session))
    await asyncio.sleep(0.01)
    assert model.in_flight == 1  # the second waits for the lock, not for the model
    model.gate.set()
    results = await asyncio.gather(first, second)
    # the second read the boundary the first wrote: nothing left, so no second model call
    assert sorted(results) == [False, True]
    assert len(model.requests) == 1 and model.max_in_flight == 1


async def test_unrelated_sessions_do_not_wait_on_each_other(svc):
    a = await seeded(svc, turns(1), session_id="a")
    b = await seeded(svc, turns(1), session_id="b")
    model = GatedModel()
    worker = worker_with(model, svc)
    tasks = [asyncio.create_task(worker.summarize(s)) for s in (a, b)]
    await asyncio.sleep(0.01)
    assert model.in_flight == 2
    model.gate.set()
    assert await asyncio.gather(*tasks) == [True, True]


async def test_background_queue_full_runs_the_job_in_the_caller(svc):
    sessions = [await seeded(svc, turns(1, start=i * 10), session_id=f"s{i}") for i in range(3)]
    model = GatedModel(block_when="question-0 ")  # only session s0's job blocks
    worker = worker_with(model, svc, workers=1, queue_size=1)
    await worker.enqueue(sessions[0])  # the worker picks it up and blocks in the model
    await asyncio.sleep(0.01)
    await worker.enqueue(sessions[1])  # fills the queue
    await worker.enqueue(sessions[2])  # queue full: runs here, now
    assert worker.stats.ran_in_caller == 1
    assert (await svc.get_summary(sessions[2])) is not None
    assert (await svc.get_summary(sessions[1])) is None  # still queued behind the blocked job
    model.gate.set()
    await worker.drain()
    assert (await svc.get_summary(sessions[1])) is not None
    assert worker.stats.enqueued == 2
    await worker.close()


async def test_background_job_timeout_keeps_old_state(svc):
    session = await seeded(svc, turns(1))
    model = GatedModel()  # never released
    worker = worker_with(model, svc, job_timeout=0.05)
    await worker.enqueue(session)
    await worker.drain()
    assert worker.stats.timed_out == 1 and await svc.get_summary(session) is None
    await worker.close()


async def test_close_drains_queued_jobs(svc):
    session = await seeded(svc, turns(1))
    worker = worker_with(ScriptedModel(["bg"]), svc)
    await worker.enqueue(session)
    await worker.close()
    assert (await svc.get_summary(session)).text == "bg"


async def test_persistence_failure_keeps_the_advance_in_memory(svc, caplog):
    session = await seeded(svc, turns(1))

    async def broken(*args, **kwargs):
        raise OSError("disk full")

    svc.write_summary = broken
    worker = worker_with(ScriptedModel(["in memory"]), svc)
    with caplog.at_level(logging.WARNING):
        assert await worker.summarize(session)
    assert session.summaries[""].text == "in memory"
    assert "could not be persisted" in caplog.text


async def test_branch_key_summarises_only_its_events_and_cascades(svc):
    events = [user("branch a question", "r1", filter_key="app/a"), answer("a answer", "r1", filter_key="app/a"),
              user("branch b question", "r2", filter_key="app/b"), answer("b answer", "r2", filter_key="app/b")]
    session = await seeded(svc, events)
    model = ScriptedModel(default_reply="s")
    worker = worker_with(model, svc, cascade_full_session=True)
    assert await worker.summarize(session, "app/a")
    prompts = [prompt_of(model, i) for i in range(model.calls)]
    assert model.calls == 2  # branch and full session, in parallel
    assert any("branch a" in p and "branch b" not in p for p in prompts)
    assert any("branch a" in p and "branch b" in p for p in prompts)
    assert session.summaries["app/a"].boundary.filter_key == "app/a"
    assert session.summaries[""].boundary.last_event_id == events[-1].id


async def test_cascade_generates_once_when_the_branch_sees_everything(svc):
    events = [user("q", "r1", filter_key="app/a"), answer("a", "r1", filter_key="app/a")]
    session = await seeded(svc, events)
    model = ScriptedModel(["only once"])
    worker = worker_with(model, svc, cascade_full_session=True)
    assert await worker.summarize(session, "app/a")
    assert model.calls == 1
    assert session.summaries[""].text == session.summaries["app/a"].text == "only once"
    assert session.summaries[""].boundary.filter_key == ""


async def test_allowlist_blocks_other_branches(svc):
    session = await seeded(svc, [user("q", "r1", filter_key="app/x"), answer("a", "r1", filter_key="app/x")])
    model = ScriptedModel(["s"])
    worker = worker_with(model, svc, filter_key_allowlist=("app/a",))
    assert not await worker.summarize(session, "app/x")
    assert model.calls == 0


async def test_cache_safe_fork_reuses_the_parent_request(svc):
    from agentlab.events import Message
    from agentlab.model.base import ModelRequest

    session = await seeded(svc, turns(2))
    parent = ModelRequest(messages=[Message.system("You are helpful."), Message.user("question-0"),
                                    Message.assistant("answer-0")],
                          tools=[{"type": "function", "function": {"name": "t", "parameters": {}}}])
    model = ScriptedModel(["forked"])
    worker = worker_with(model, svc, cache_safe_fork=True)
    assert await worker.summarize(session, parent_request=parent)
    sent = model.requests[0]
    assert sent.messages[:-1] == parent.messages and sent.tools == parent.tools
    assert sent.messages[-1].role == "user" and "do not answer the latest request" in sent.messages[-1].content
    assert worker.stats.runs[-1]["prompt_version"] == FORK_PROMPT_VERSION
    assert (await svc.get_summary(session)).boundary.last_event_id == session.events[-1].id


async def test_cache_safe_fork_falls_back_to_standalone_when_it_does_not_fit(svc):
    from agentlab.events import Message
    from agentlab.model.base import ModelRequest

    session = await seeded(svc, turns(2))
    parent = ModelRequest(messages=[Message.system("x " * 3000), Message.user("question-0")])
    model = ScriptedModel(["standalone"])
    model.info = ModelInfo("small", 2000)
    worker = worker_with(model, svc, cache_safe_fork=True)
    assert await worker.summarize(session, parent_request=parent)
    assert "<conversation>" in prompt_of(model)
    assert worker.stats.runs[-1]["mode"] == "standalone"


async def test_cache_safe_fork_drops_tool_payloads_before_giving_up(svc):
    from agentlab.events import Message, ToolCall
    from agentlab.model.base import ModelRequest

    session = await seeded(svc, turns(1))
    parent = ModelRequest(messages=[
        Message.user("question-0"),
        Message.assistant("", [ToolCall("c1", "fetch", '{"q": "x"}')]),
        Message.tool("c1", "fetch", "payload " * 2000),
        Message.assistant("answer-0"),
    ])
    model = ScriptedModel(["forked small"])
    model.info = ModelInfo("small", 2000)
    worker = worker_with(model, svc, cache_safe_fork=True)
    assert await worker.summarize(session, parent_request=parent)
    sent = model.requests[0].messages
    assert "tool result omitted" in sent[2].content and "tool_call_id=c1" in sent[2].content
    assert worker.stats.runs[-1]["mode"] == "fork"


async def test_summary_calls_are_reported_with_purpose_summary(svc):
    from agentlab.model.base import observe_calls

    session = await seeded(svc, turns(1))
    records = []
    worker = worker_with(ScriptedModel(["s"]), svc)
    with observe_calls(records.append):
        await worker.enqueue(session)
        await worker.drain()
    assert [r.purpose for r in records] == ["summary"]
    await worker.close()


async def test_a_model_error_in_a_background_job_is_contained(svc):
    session = await seeded(svc, turns(1))
    worker = worker_with(ScriptedModel([ModelError("boom")]), svc)
    await worker.enqueue(session)
    await worker.drain()
    assert worker.stats.failed == 1 and await svc.get_summary(session) is None
    await worker.close()


async def test_tool_results_can_be_cut_in_the_summariser_input(svc):
    payload = "START " + "row of data " * 500 + " END"
    session = await seeded(svc, [user("fetch", "r1"), call("fetch", "c1", "r1"),
                                 result("fetch", "c1", payload, "r1"), answer("fetched", "r1")])
    model = ScriptedModel(["s"])
    worker = worker_with(model, svc, input_tool_result_max_tokens=40)
    assert await worker.summarize(session)
    prompt = prompt_of(model)
    assert "START" in prompt and "END" in prompt and "of this tool result omitted" in prompt
    assert tokens.count_text(prompt) < 300
    # the whole delta was covered: cutting is not a partial advance
    assert (await svc.get_summary(session)).boundary.last_event_id == session.events[-1].id
