import json

import pytest

from agentlab.events import Message, Usage
from agentlab.model import (
    CallRecord,
    ModelError,
    ModelRequest,
    ScriptedModel,
    observe_calls,
    tokens,
)


def _request(text: str = "hi", purpose: str = "answer") -> ModelRequest:
    return ModelRequest(messages=[Message.system("be brief"), Message.user(text)], purpose=purpose)  # type: ignore[arg-type]


async def test_plays_script_in_order_and_records_requests() -> None:
    model = ScriptedModel(["first", Message.assistant("second"), lambda r: f"echo {r.messages[-1].content}"])
    r1, r2, r3 = _request("a"), _request("b"), _request("c")
    assert (await model.generate(r1)).message.content == "first"
    assert (await model.generate(r2)).message.content == "second"
    assert (await model.generate(r3)).message.content == "echo c"
    assert model.requests == [r1, r2, r3]
    assert model.remaining == 0


async def test_usage_is_token_counted() -> None:
    model = ScriptedModel(["hello world"])
    req = _request()
    resp = await model.generate(req)
    assert resp.usage == Usage(prompt_tokens=tokens.count_messages(req.messages), completion_tokens=2)
    assert resp.finish_reason == "stop"
    assert resp.model == "scripted"


async def test_usage_fn_overrides() -> None:
    model = ScriptedModel(["x"], usage_fn=lambda req, msg: Usage(100, 7, 50))
    assert (await model.generate(_request())).usage == Usage(100, 7, 50)


async def test_exception_entry_is_raised_and_reported() -> None:
    records: list[CallRecord] = []
    model = ScriptedModel([RuntimeError("boom"), "ok"])
    with observe_calls(records.append):
        with pytest.raises(RuntimeError, match="boom"):
            await model.generate(_request())
        assert (await model.generate(_request())).message.content == "ok"
    assert [r.error is not None for r in records] == [True, False]
    assert "boom" in (records[0].error or "")


async def test_exhausted_script_raises_clear_error_or_repeats_default() -> None:
    model = ScriptedModel(["only"])
    await model.generate(_request())
    with pytest.raises(ModelError, match="exhausted"):
        await model.generate(_request())
    repeating = ScriptedModel([], default_reply="again")
    for _ in range(3):
        assert (await repeating.generate(_request())).message.content == "again"
    assert repeating.calls == 3


async def test_tool_call_helper() -> None:
    msg = ScriptedModel.tool_call("lookup", {"q": "Paris"}, id="call_x")
    assert msg.role == "assistant"
    (call,) = msg.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_x", "lookup", {"q": "Paris"})
    auto1, auto2 = ScriptedModel.tool_call("a", {}), ScriptedModel.tool_call("a", {})
    assert auto1.tool_calls[0].id != auto2.tool_calls[0].id
    resp = await ScriptedModel([msg]).generate(_request())
    assert resp.finish_reason == "tool_calls"
    assert resp.usage.completion_tokens > 0


async def test_stream_yields_chunks_then_final_response() -> None:
    records: list[CallRecord] = []
    model = ScriptedModel(["the quick brown fox"])
    with observe_calls(records.append):
        chunks = [c async for c in model.stream(_request(purpose="summary"))]
    assert len(chunks) >= 3
    assert all(c.response is None for c in chunks[:-1])
    final = chunks[-1].response
    assert final is not None and final.message.content == "the quick brown fox"
    assert "".join(c.delta for c in chunks) == "the quick brown fox"
    assert len(records) == 1 and records[0].purpose == "summary" and not records[0].cache_hit
