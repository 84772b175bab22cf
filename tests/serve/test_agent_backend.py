"""The agent back end: an LLMAgent served through a Runner, the caller's tools run by the caller."""

from __future__ import annotations

import openai
import pytest
from serve_helpers import SEARCH_TOOL

from agentlab.serve import start_server


@pytest.fixture
def agent_server(upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTLAB_SERVE_TEST_UPSTREAM", upstream.base_url)
    with start_server(agent="serve_agent_factory:make_agent", db=str(tmp_path / "agent.duckdb")) as server:
        yield server


def _session(server, user, session_id):
    return server.run(server.app.sessions.get_session("office-agent", user, session_id))


def test_three_turns_with_a_caller_tool(upstream, agent_server) -> None:
    client = openai.OpenAI(base_url=agent_server.base_url, api_key="k", max_retries=0,
                           default_headers={"X-Session-ID": "s-1"})
    assert [m.id for m in client.models.list().data] == ["office-agent"]
    messages = [{"role": "system", "content": "ignored: the agent has its own instruction"},
                {"role": "user", "content": "Where is the Lisbon office?"}]
    first = client.chat.completions.create(model="office-agent", messages=messages, tools=[SEARCH_TOOL], user="ana")
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "search_docs"
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "The Lisbon office is by the river."}]
    second = client.chat.completions.create(model="office-agent", messages=messages, tools=[SEARCH_TOOL], user="ana")
    assert second.choices[0].message.content == upstream.reply_message(upstream.received[-1])["content"]
    assert "by the river" in second.choices[0].message.content
    # The model saw the tool round the caller closed, under the agent's own instruction.
    sent = upstream.received[-1]["messages"]
    assert sent[0] == {"role": "system", "content": "You answer questions about the company's offices."}
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "tool"]
    messages += [{"role": "assistant", "content": second.choices[0].message.content},
                 {"role": "user", "content": "Is it by the river?"}]
    stream = client.chat.completions.create(model="office-agent", messages=messages, stream=True, user="ana",
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == upstream.reply_message(upstream.received[-1])["content"]
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
    calls = agent_server.calls()
    assert list(calls["arm"]) == ["agent:office-agent"] * 3 and list(calls["status"]) == [200] * 3
    assert list(calls["finish_reason"]) == ["tool_calls", "stop", "stop"]
    assert (calls["usage_prompt_tokens"] > 0).all() and calls["conversation_id"].eq("s-1").all()
    session = _session(agent_server, "ana", "s-1")
    # The re-sent history was not appended again: the ledger has each turn once.
    assert [e.role for e in session.events if e.role] == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def test_history_seeds_a_new_session_once(upstream, agent_server) -> None:
    client = openai.OpenAI(base_url=agent_server.base_url, api_key="k", max_retries=0)
    history = [{"role": "user", "content": "The Porto office has 12 people."},
               {"role": "assistant", "content": "Noted."},
               {"role": "user", "content": "How many people work in Porto?"}]
    raw = client.chat.completions.with_raw_response.create(model="office-agent", messages=history)
    session_id = raw.headers["x-session-id"]
    assert "12 people" in raw.parse().choices[0].message.content
    roles = [e.role for e in _session(agent_server, "default", session_id).events if e.role]
    assert roles == ["user", "assistant", "user", "assistant"]
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client.chat.completions.create(model="office-agent", messages=history, tools=[SEARCH_TOOL],
                                       tool_choice="required")
