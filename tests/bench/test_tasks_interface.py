from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentlab.bench.store.results import CompactionRow
from agentlab.bench.tasks import CaseError, Task, UnknownBenchmark, collect_run, get_task, register
from agentlab.events import OBJ_COMPACTION, Event, Message, ToolCall, user_event


async def stream(*events: Event) -> AsyncIterator[Event]:
    for e in events:
        yield e


async def test_collect_run_final_answer_tools_and_compactions() -> None:
    outcome = await collect_run(stream(
        user_event("q"),
        Event("agent", [], object=OBJ_COMPACTION, metadata={"compaction": {"results_compacted": 2,
                                                                            "tokens_before": 900, "tokens_after": 300}}),
        Event("agent", [Message.assistant("", [ToolCall("c1", "session_search", "{}")])]),
        Event("agent", [Message.tool("c1", "session_search", "[]")]),
        Event("agent", [Message.assistant("par")], partial=True, done=False),
        Event("agent", [Message.assistant("  the answer  ")]),
    ))
    assert outcome.answer == "the answer"
    assert outcome.tool_calls == {"session_search": 1}
    assert outcome.compactions == [CompactionRow(2, 900, 300)]


async def test_collect_run_raises_with_the_error_code() -> None:
    with pytest.raises(CaseError) as err:
        await collect_run(stream(user_event("q"), Event("agent", [], error="prompt too long",
                                                        error_code="context_length")))
    assert err.value.code == "context_length" and "prompt too long" in str(err.value)
    with pytest.raises(CaseError, match="without a final answer") as err:
        await collect_run(stream(user_event("q")))
    assert err.value.code == "no_answer"


def test_registry_rejects_bad_tasks_and_names_known_ones() -> None:
    with pytest.raises(TypeError, match="default_mode"):
        @register
        class Bad(Task):  # noqa: F841 - the decorator is what is tested
            name = "bad"
            modes = ("a",)
            default_mode = "b"

            def load_cases(self, settings):  # type: ignore[no-untyped-def]
                raise NotImplementedError

            async def run_case(self, case, mode, ctx):  # type: ignore[no-untyped-def]
                raise NotImplementedError
    with pytest.raises(UnknownBenchmark, match="known benchmarks"):
        get_task("definitely-not-a-benchmark")
