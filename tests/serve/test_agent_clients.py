"""Agent frameworks through the proxy: the OpenAI Agents SDK and LangChain's ChatOpenAI, three turns each.

Both re-send the whole history every call and re-serialise what they were sent, so these tests
also check that their echo of an answer still matches the conversation's ledger (one
conversation, no duplicated events) and that the arm's projection reaches the upstream with
every tool call paired with its result.
"""

from __future__ import annotations

from typing import Any

import agents
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI
from serve_helpers import BIG_RESULT

from agentlab.compaction import RECOVERABLE_HEADER
from agentlab.serve.wire import pairing_problem

QUESTIONS = ("Where is the Lisbon office?", "How many people work in Lisbon?", "When did the Lisbon office open?")


def _check_upstream(upstream: Any) -> None:
    for body in upstream.received:
        assert pairing_problem(body["messages"]) is None
    last = upstream.received[-1]["messages"]
    results = [m for m in last if m["role"] == "tool"]
    assert results[0]["content"].startswith(RECOVERABLE_HEADER)  # the first turn's big result, compacted
    assert not results[-1]["content"].startswith(RECOVERABLE_HEADER)  # the current turn's, whole


def _check_calls(server: Any, n_calls: int) -> str:
    calls = server.calls()
    assert len(calls) == n_calls and list(calls["status"]) == [200] * n_calls
    assert calls["conversation_id"].nunique() == 1
    assert list(calls["key_source"]) == ["new"] + ["prefix"] * (n_calls - 1)
    assert calls["ledger_mode"].eq("append").all()
    assert calls.iloc[-1]["upstream_prompt_tokens"] < calls.iloc[-1]["client_prompt_tokens"] - 1500
    assert calls.iloc[-1]["usage_prompt_tokens"] < calls.iloc[-1]["client_prompt_tokens"]
    return str(calls.iloc[0]["conversation_id"])


async def test_openai_agents_sdk_chat_completions_model(upstream, proxy) -> None:
    agents.set_tracing_disabled(True)  # tracing would call api.openai.com
    server = proxy("compaction")
    searched: list[str] = []

    @agents.function_tool
    def search_docs(query: str) -> str:
        """Search the company documentation.

        Args:
            query: What to look for.
        """
        searched.append(query)
        return BIG_RESULT if len(searched) == 1 else f"Result {len(searched)}: Lisbon has 42 people since 1931."

    client = AsyncOpenAI(base_url=server.base_url, api_key="sdk-caller", max_retries=0)
    agent = agents.Agent(
        name="offices", instructions="You answer questions about the company's offices.", tools=[search_docs],
        model=agents.OpenAIChatCompletionsModel(model="test-model", openai_client=client),
        model_settings=agents.ModelSettings(include_usage=True))
    history: list[Any] = []
    for i, question in enumerate(QUESTIONS):
        items = [*history, {"role": "user", "content": question}]
        if i == 1:
            streamed = agents.Runner.run_streamed(agent, items)
            async for _ in streamed.stream_events():
                pass
            result: Any = streamed
        else:
            result = await agents.Runner.run(agent, items)
        assert result.final_output == upstream.reply_message(upstream.received[-1])["content"]
        history = result.to_input_list()
    assert len(searched) == 3 and len(upstream.received) == 6
    _check_upstream(upstream)
    conversation = _check_calls(server, 6)
    roles = [e.role for e in server.ledger(conversation)]
    assert roles == ["system"] + ["user", "assistant", "tool", "assistant"] * 3


def test_langchain_chat_openai_with_tools(upstream, proxy) -> None:
    @tool
    def search_docs(query: str) -> str:
        """Search the company documentation."""
        return BIG_RESULT

    server = proxy("compaction")
    llm = ChatOpenAI(model="test-model", base_url=server.base_url, api_key="lc-caller", max_retries=0,
                     use_responses_api=False, stream_usage=True).bind_tools([search_docs])
    messages: list[Any] = [SystemMessage("You answer questions about the company's offices.")]
    for i, question in enumerate(QUESTIONS):
        messages.append(HumanMessage(question))
        if i == 1:  # streamed: LangChain assembles the tool call from the deltas (needs their index)
            call: Any = None
            for piece in llm.stream(messages):
                call = piece if call is None else call + piece
        else:
            call = llm.invoke(messages)
        assert [c["name"] for c in call.tool_calls] == ["search_docs"]
        assert call.tool_calls[0]["args"] == {"query": question}
        messages += [AIMessage(content=call.content, tool_calls=call.tool_calls),
                     ToolMessage(search_docs.invoke(call.tool_calls[0]["args"]),
                                 tool_call_id=call.tool_calls[0]["id"])]
        answer = llm.invoke(messages)
        assert answer.content == upstream.reply_message(upstream.received[-1])["content"]
        assert answer.usage_metadata["input_tokens"] == server.calls().iloc[-1]["usage_prompt_tokens"]
        messages.append(answer)
    _check_upstream(upstream)
    conversation = _check_calls(server, 6)
    assert [e.role for e in server.ledger(conversation)] == ["system"] + ["user", "assistant", "tool", "assistant"] * 3
