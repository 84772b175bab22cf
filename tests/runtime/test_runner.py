"""The run path: what the Runner persists, streams, cancels, and how the tool loop behaves."""

from __future__ import annotations

import asyncio

from agentlab.events import OBJ_CHUNK, OBJ_RUN_DONE, Message
from agentlab.model.base import ServerError
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import FunctionTool, LLMAgent, Runner, RunOptions, ToolContext
from agentlab.session.inmemory import InMemorySessionService


def read_certificate(host: str) -> str:
    """Read the TLS certificate of a host.

    Args:
        host: The host name to inspect.
    """
    return f"certificate for {host}: expires 2026-12-01, issuer ExampleCA"


def make_runner(replies, tools=(), **agent_kwargs):
    model = ScriptedModel(list(replies))
    agent = LLMAgent("support", model, instruction="You are a support agent.",
                     tools=[FunctionTool(t) for t in tools], **agent_kwargs)
    svc = InMemorySessionService()
    return Runner("app", agent, svc), model, svc


async def test_one_tool_call_persists_input_call_result_answer_in_order():
    runner, model, svc = make_runner(
        [ScriptedModel.tool_call("read_certificate", {"host": "api.example.com"}, id="call-1"),
         "The certificate expires on 2026-12-01."],
        tools=[read_certificate],
    )
    events = [e async for e in runner.run("u1", "s1", "Why does TLS fail?")]
    assert events[-1].object == OBJ_RUN_DONE and events[-1].metadata["status"] == "completed"

    session = await svc.get_session("app", "u1", "s1")
    kinds = [(e.role, bool(e.message.tool_calls), e.message.tool_call_id) for e in session.events]
    assert kinds == [("user", False, None), ("assistant", True, None), ("tool", False, "call-1"),
                     ("assistant", False, None)]
    assert "expires 2026-12-01" in session.events[2].text
    assert session.events[3].text == "The certificate expires on 2026-12-01."
    # the second model call saw the tool result
    second = model.requests[1].messages
    assert second[0].role == "system" and second[-1].role == "tool"
    assert model.requests[0].tools[0]["function"]["name"] == "read_certificate"


async def test_user_input_is_persisted_before_the_agent_starts():
    seen = {}

    def reply(request):
        seen["persisted"] = [e.text for e in svc_holder[0].sessions_snapshot()]
        return "ok"

    svc_holder = []
    runner, model, svc = make_runner([reply])

    class Probe:
        def sessions_snapshot(self):
            return session_ref[0].events

    session_ref = []
    orig_append = svc.append_event

    async def spy(session, event):
        session_ref[:] = [session]
        return await orig_append(session, event)

    svc.append_event = spy
    svc_holder.append(Probe())
    await runner.ask("u", "s", "hello")
    assert seen["persisted"] == ["hello"]


async def test_streamed_chunks_are_streamed_but_not_persisted():
    runner, model, svc = make_runner(["a fairly long streamed answer text"])
    events = [e async for e in runner.run("u", "s", "hi", options=RunOptions(stream=True))]
    chunks = [e for e in events if e.object == OBJ_CHUNK]
    assert chunks and all(e.partial for e in chunks)
    session = await svc.get_session("app", "u", "s")
    assert [e.role for e in session.events] == ["user", "assistant"]
    assert session.events[-1].text == "a fairly long streamed answer text"


async def test_tool_exception_becomes_error_result_not_crash():
    def broken(x: int) -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    runner, model, svc = make_runner(
        [ScriptedModel.tool_call("broken", {"x": 1}, id="c1"), "sorry, the tool failed"], tools=[broken]
    )
    answer, events = await runner.ask("u", "s", "go")
    assert answer == "sorry, the tool failed"
    tool_event = next(e for e in events if e.is_tool_result())
    assert "RuntimeError: disk on fire" in tool_event.text
    assert tool_event.metadata["tool_error"] == "RuntimeError"


async def test_unknown_tool_and_bad_arguments_are_reported_to_the_model():
    runner, model, svc = make_runner(
        [ScriptedModel.tool_call("nope", {}, id="c1"),
         ScriptedModel.tool_call("read_certificate", {"hostname": "x"}, id="c2"),
         "done"],
        tools=[read_certificate],
    )
    answer, events = await runner.ask("u", "s", "go")
    results = [e.text for e in events if e.is_tool_result()]
    assert "no tool named 'nope'" in results[0]
    assert "unknown argument(s) for read_certificate: hostname" in results[1]
    assert answer == "done"


async def test_tool_iteration_limit_forces_an_answer_without_tools():
    loop_call = ScriptedModel.tool_call("read_certificate", {"host": "h"})
    runner, model, svc = make_runner([loop_call, loop_call, "final"], tools=[read_certificate],
                                     max_tool_iterations=2)
    answer, _ = await runner.ask("u", "s", "go")
    assert answer == "final"
    assert model.requests[2].tools == []
    assert "budget" in model.requests[2].messages[0].content


async def test_model_error_ends_run_with_error_event_and_keeps_input():
    runner, model, svc = make_runner([ServerError("model server answered 500 four times")])
    events = [e async for e in runner.run("u", "s", "hello")]
    errors = [e for e in events if e.error]
    assert errors and errors[0].error_code == "server_error"
    assert events[-1].metadata["status"] == "error"
    session = await svc.get_session("app", "u", "s")
    assert [e.text for e in session.events] == ["hello"]


async def test_cancel_keeps_what_was_persisted_before():
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(host: str) -> str:
        """Slow lookup."""
        started.set()
        await release.wait()
        return "late result"

    runner, model, svc = make_runner(
        [ScriptedModel.tool_call("slow", {"host": "h"}, id="c1"), "never reached"], tools=[slow]
    )
    collected = []

    async def consume():
        async for e in runner.run("u", "s", "investigate"):
            collected.append(e)

    task = asyncio.create_task(consume())
    await started.wait()
    inv_id = runner.active_runs[0]
    assert runner.cancel(inv_id)
    release.set()
    await task
    session = await svc.get_session("app", "u", "s")
    # user input and the tool call were persisted before the cancel; the late tool result is the
    # step in flight when the cancel landed and is the last thing kept; no further model call
    assert [e.role for e in session.events][:2] == ["user", "assistant"]
    assert model.calls == 1
    assert collected[-1].metadata["status"] == "cancelled"


async def test_task_cancellation_keeps_persisted_events():
    started = asyncio.Event()

    async def hang(host: str) -> str:
        """Never returns."""
        started.set()
        await asyncio.sleep(3600)
        return ""

    runner, model, svc = make_runner([ScriptedModel.tool_call("hang", {"host": "h"}, id="c1")], tools=[hang])

    async def consume():
        async for _ in runner.run("u", "s", "investigate"):
            pass

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    session = await svc.get_session("app", "u", "s")
    assert [e.role for e in session.events] == ["user", "assistant"]
    assert runner.active_runs == []


async def test_second_run_sees_first_runs_history():
    runner, model, svc = make_runner(["first answer", "second answer"])
    await runner.ask("u", "s", "one")
    await runner.ask("u", "s", "two")
    contents = [m.content for m in model.requests[1].messages]
    assert contents[1:] == ["one", "first answer", "two"]


def test_function_tool_schema_from_signature_and_docstring():
    async def search(query: str, top_k: int = 5, scope: str | None = None, ctx: ToolContext | None = None) -> str:
        """Search the history.

        Args:
            query: What to look for.
            top_k: How many hits.
        """
        return query

    t = FunctionTool(search)
    decl = t.declaration()["function"]
    assert decl["name"] == "search" and decl["description"] == "Search the history."
    props = decl["parameters"]["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["top_k"]["type"] == "integer" and "ctx" not in props
    assert decl["parameters"]["required"] == ["query"]


def test_tool_round_sanitising_drops_orphans():
    from agentlab.core.mechanism import events_to_messages
    from agentlab.events import Event, ToolCall

    orphan_result = Event(author="a", choices=[Message.tool("gone", "t", "x")])
    unanswered = Event(author="a", choices=[Message.assistant("let me check", [ToolCall("c9", "t")])])
    user = Event(author="u", choices=[Message.user("hi")])
    msgs = events_to_messages([orphan_result, user, unanswered])
    assert [(m.role, m.content, m.tool_calls) for m in msgs] == [("user", "hi", ()), ("assistant", "let me check", ())]
