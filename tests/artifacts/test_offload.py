"""The offload mechanism on hand-made sessions: handles, stability, paging back, a live run, and the measure."""

from __future__ import annotations

import json

import pytest

from agentlab.artifacts import ArtifactService, InMemoryArtifactService
from agentlab.artifacts.offload import ArtifactOffload, ArtifactOffloadPolicy, offload_name, paged_back
from agentlab.artifacts.tools import ARTIFACT_LOAD_NOTE, ArtifactLoadTool
from agentlab.bench.config import Settings
from agentlab.bench.datasets.trajectories import parse_tau_entry
from agentlab.bench.retention.trajectories import measure_trajectory
from agentlab.core import ServiceRegistry, ToolContext, project
from agentlab.events import OBJ_TOOL_RESPONSE, Event, Message, ToolCall
from agentlab.model.base import ModelInfo
from agentlab.model.scripted import ScriptedModel
from agentlab.policies.arms import full_history_arm, get_arm
from agentlab.runtime import FunctionTool, LLMAgent, Runner
from agentlab.session.inmemory import InMemorySessionService

POLICY = ArtifactOffloadPolicy(threshold_tokens=300, preview_head_tokens=40, preview_tail_tokens=20)
INFO = ModelInfo("test", 100_000)


def big_report() -> str:
    lines = ["HEAD-MARKER first line"] + [f"line {i}: value {i * 7}" for i in range(400)] + ["TAIL-MARKER last"]
    lines[200] = "line 199: the hidden fact is MIDDLE-SECRET-77"
    return "\n".join(lines)


def ledger(*results: tuple[str, str]) -> list[Event]:
    """One user turn, then a tool call and its result per (call id, content), then a reply."""
    unit = "unit-1"
    events = [Event(author="user", choices=[Message.user("check the cert")], invocation_id=unit, request_id=unit,
                    id="e-user")]
    for call_id, content in results:
        events.append(Event(author="agent", choices=[Message.assistant("", [ToolCall(call_id, "read_log", "{}")])],
                            invocation_id=unit, request_id=unit, id=f"e-call-{call_id}"))
        events.append(Event(author="agent", object=OBJ_TOOL_RESPONSE,
                            choices=[Message.tool(call_id, "read_log", content)], invocation_id=unit,
                            request_id=unit, id=f"e-result-{call_id}"))
    return events


def tool_contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages if m.role == "tool"]


async def test_a_large_result_becomes_a_handle_with_head_and_tail_and_a_small_one_stays() -> None:
    events = ledger(("c1", big_report()), ("c2", "short result"))
    store = InMemoryArtifactService()
    services = ServiceRegistry()
    services.add(store, as_type=ArtifactService)
    result = await project(events, [ArtifactOffload(POLICY)], None, INFO, services=services)
    big, small = tool_contents(result.request.messages)
    assert small == "short result"
    assert big.startswith("[tool result offloaded to artifact 'tool-results/e-result-c1'")
    assert "HEAD-MARKER" in big and "TAIL-MARKER" in big and "MIDDLE-SECRET-77" not in big
    assert "artifact_load offset" in big
    assert [t["function"]["name"] for t in result.request.tools] == ["artifact_load"]
    assert events[2].message is not None and events[2].message.content == big_report()  # the ledger is untouched
    assert result.draft.stats[-1]["results"] == 1
    assert result.draft.stats[-1]["tokens_after"] < result.draft.stats[-1]["tokens_before"]
    assert paged_back(result.draft) == {"e-result-c1"}
    saved = await store.load("agentlab", "user", result.session.id, "tool-results/e-result-c1")
    assert saved is not None and saved.text == big_report()


async def test_the_handle_is_the_same_text_in_every_later_request() -> None:
    mechanism = ArtifactOffload(POLICY)
    first = await project(ledger(("c1", big_report())), [mechanism], None, INFO)
    later = await project(ledger(("c1", big_report()), ("c2", big_report() + " again")), [mechanism], None, INFO)
    # the earlier request is a prefix of the later one: nothing was rewritten
    assert later.request.messages[:len(first.request.messages)] == first.request.messages
    assert len(tool_contents(later.request.messages)) == 2


async def test_artifact_load_pages_the_offloaded_result_back_whole() -> None:
    store = InMemoryArtifactService()
    services = ServiceRegistry()
    services.add(store, as_type=ArtifactService)
    result = await project(ledger(("c1", big_report())), [ArtifactOffload(POLICY)], None, INFO, services=services)
    handle = tool_contents(result.request.messages)[0]
    offset = int(handle.split("artifact_load offset ")[1].split(" ")[0])
    tool = ArtifactLoadTool(default_limit=500, max_limit=1000)
    ctx = ToolContext(result.invocation, "c9", "artifact_load")
    name = "tool-results/e-result-c1"
    page = await tool.call({"name": name, "offset": offset}, ctx)
    assert page["note"] == ARTIFACT_LOAD_NOTE and page["returned_bytes"] == 500 and page["offset"] == offset
    assert big_report().encode()[:offset].decode() in handle  # the head shown is exactly the bytes before it
    pages, at = [], 0
    while at is not None:
        page = await tool.call({"name": name, "offset": at, "limit": 5000}, ctx)  # over max: 1000 per page
        assert page["returned_bytes"] <= 1000
        pages.append(page["content"])
        at = page["next_offset"]
    assert "".join(pages) == big_report()
    with pytest.raises(ValueError, match="no artifact named 'tool-results/nope'"):
        await tool.call({"name": "tool-results/nope"}, ctx)


async def test_the_artifact_tools_own_results_are_never_offloaded() -> None:
    events = ledger(("c1", big_report()))
    events[-1] = events[-1].copy_with(choices=[Message.tool("c1", "artifact_load", big_report())])
    result = await project(events, [ArtifactOffload(POLICY)], None, INFO)
    assert tool_contents(result.request.messages) == [big_report()]


def test_the_policy_refuses_a_preview_as_large_as_the_threshold() -> None:
    with pytest.raises(ValueError, match="below threshold_tokens"):
        ArtifactOffloadPolicy(threshold_tokens=100, preview_head_tokens=80, preview_tail_tokens=20)


async def test_in_a_live_run_the_result_is_saved_on_arrival_and_the_next_request_shows_the_handle() -> None:
    def read_log() -> str:
        """Read the server log."""
        return big_report()

    model = ScriptedModel([ScriptedModel.tool_call("read_log", {}, id="c1"), "It is the certificate."])
    store = InMemoryArtifactService()
    agent = LLMAgent("support", model, tools=[FunctionTool(read_log)], mechanisms=[ArtifactOffload(POLICY)])
    runner = Runner("desk", agent, InMemorySessionService(), artifact_service=store)
    answer, events = await runner.ask("alice", "s1", "why does TLS fail?")
    assert answer == "It is the certificate."
    shown = tool_contents(model.requests[1].messages)
    assert len(shown) == 1 and shown[0].startswith("[tool result offloaded") and "MIDDLE-SECRET-77" not in shown[0]
    result_event = next(e for e in events if e.is_tool_result())
    listed = await store.list("desk", "alice", "s1")
    assert [i.name for i in listed] == [offload_name(result_event)]
    loaded = await store.load("desk", "alice", "s1", offload_name(result_event))
    assert loaded is not None and loaded.text == big_report()
    await runner.close()


def _entry(report: str) -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": "get_log", "arguments": "{}"}}
    return {"task_id": "t", "reward": 1.0, "trial": 0, "traj": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "What failed?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_log", "content": report},
        {"role": "assistant", "content": "Found MIDDLE-SECRET-77 after HEAD-MARKER."},
    ]}


async def test_the_measure_counts_the_preview_as_supported_and_the_rest_as_recoverable() -> None:
    # tau-bench-like JSON: one value per line, the first and one in the middle used by the reply
    record = {f"l{i}": line for i, line in enumerate(big_report().splitlines())}
    record["l0"], record["l200"] = "HEAD-MARKER", "MIDDLE-SECRET-77"
    traj = parse_tau_entry(_entry(json.dumps(record)), "hand-made")
    settings = Settings({"artifact_offload": POLICY})
    row = await measure_trajectory(traj, get_arm("artifact_offload"), context_window=100_000, settings=settings)
    baseline = await measure_trajectory(traj, full_history_arm("long_context"), context_window=100_000)
    assert baseline.supported == 1.0 and baseline.recoverable is None
    # the reply uses a value from the hidden middle and one from the head the handle shows
    assert row.n_supports == 2 and row.supported == pytest.approx(0.5)
    assert [text for _, text in row.hidden] == ["MIDDLE-SECRET-77"]
    assert row.recoverable == 1.0  # the handle names the artifact: artifact_load pages it back
    assert row.total_prompt_tokens < baseline.total_prompt_tokens
