"""The run path against a fake OpenAI-compatible server on 127.0.0.1 (issue: foundation acceptance)."""

from __future__ import annotations

import sys
from pathlib import Path

from agentlab.model.base import CallRecord, observe_calls
from agentlab.model.cache import CachedModel, CallCache
from agentlab.model.openai_compat import OpenAICompatModel
from agentlab.runtime import LLMAgent, Runner
from agentlab.session.inmemory import InMemorySessionService

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from fake_openai_server import Answer, FakeOpenAIServer, completion, error_body  # noqa: E402


def _model(server: FakeOpenAIServer, **kw) -> OpenAICompatModel:
    return OpenAICompatModel("fake", base_url=server.base_url, api_key="test", timeout=5.0,
                             backoff_base=0.001, backoff_max=0.01, **kw)


async def test_always_500_ends_run_with_clear_error_event_and_keeps_input():
    svc = InMemorySessionService()
    with FakeOpenAIServer([Answer(500, error_body("kaboom", type_="server_error"))]) as server:
        runner = Runner("app", LLMAgent("a", _model(server, max_attempts=3)), svc)
        events = [e async for e in runner.run("u", "s", "hello there")]
    assert len(server.requests) == 3
    error = next(e for e in events if e.error)
    assert error.error_code == "server_error"
    assert "answered 500 three times" in error.error and "kaboom" in error.error
    assert events[-1].metadata["status"] == "error"
    session = await svc.get_session("app", "u", "s")
    assert [e.text for e in session.events] == ["hello there"]


async def test_429_429_200_succeeds_in_three_attempts_through_the_runner():
    svc = InMemorySessionService()
    answers = [Answer(429, error_body("slow down")), Answer(429, error_body("slow down")),
               Answer(body=completion("third time lucky"))]
    with FakeOpenAIServer(answers) as server:
        runner = Runner("app", LLMAgent("a", _model(server)), svc)
        answer, _ = await runner.ask("u", "s", "hi")
    assert answer == "third time lucky" and len(server.requests) == 3


async def test_malformed_body_is_a_clear_error_event_not_a_traceback():
    svc = InMemorySessionService()
    with FakeOpenAIServer([Answer(body="this is not json {")]) as server:
        runner = Runner("app", LLMAgent("a", _model(server)), svc)
        answer, events = await runner.ask("u", "s", "hi")
    error = next(e for e in events if e.error)
    assert error.error_code == "malformed_response"
    assert "Traceback" not in error.error and len(error.error.splitlines()) == 1
    assert answer.startswith("error: ")


async def test_same_request_twice_reaches_the_model_once_and_is_recorded_as_a_hit():
    records: list[CallRecord] = []
    with FakeOpenAIServer([Answer(body=completion("cached answer"))]) as server:
        model = CachedModel(_model(server), CallCache(None))
        with observe_calls(records.append):
            for session_id in ("s1", "s2"):  # identical requests: same instruction, same message
                runner = Runner("app", LLMAgent("a", model, instruction="be brief"), InMemorySessionService())
                answer, _ = await runner.ask("u", session_id, "what is cached?")
                assert answer == "cached answer"
    assert len(server.requests) == 1
    assert [r.cache_hit for r in records] == [False, True]
