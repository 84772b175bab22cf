"""Extraction passes: only the delta since the last pass, tolerant parsing, errors on record."""

from __future__ import annotations

import json

import pytest

from agentlab.events import Event, Message, ToolCall, user_event
from agentlab.memory import (
    LAST_ERROR_KEY,
    LAST_EXTRACTED_AT_KEY,
    InMemoryMemoryService,
    MemoryExtractor,
    MemoryPolicy,
)
from agentlab.memory.extractor import OPERATIONS_SCHEMA, ExtractionParseError, parse_operations
from agentlab.model.base import ServerError
from agentlab.model.scripted import ScriptedModel
from agentlab.session.inmemory import InMemorySessionService


def ops(*operations: dict) -> str:
    return json.dumps({"operations": list(operations)})


def conversation_part(request) -> str:
    return request.messages[1].content.split("New conversation messages:", 1)[1]


def existing_part(request) -> str:
    return request.messages[1].content.split("New conversation messages:", 1)[0]


async def say(svc, session, role: str, text: str, ts: float) -> None:
    if role == "user":
        event = user_event(text, timestamp=ts)
    else:
        event = Event(author="agent", choices=[Message.assistant(text)], timestamp=ts)
    await svc.append_event(session, event)


async def make_session():
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u1", "s1")
    await say(svc, session, "user", "I moved to Porto last month.", 1000.0)
    await say(svc, session, "assistant", "Nice, Porto is lovely in spring.", 1001.0)
    await svc.append_event(session, Event(author="agent", timestamp=1002.0, choices=[
        Message.assistant("", tool_calls=(ToolCall("c1", "weather", '{"city": "TOOLARGS-Porto"}'),))]))
    await svc.append_event(session, Event(author="agent", timestamp=1003.0,
                                          choices=[Message.tool("c1", "weather", "TOOLRESULT 18C sunny")]))
    await svc.append_event(session, Event(author="agent", timestamp=1003.5, partial=True,
                                          choices=[Message.assistant("PARTIALCHUNK")]))
    await say(svc, session, "assistant", "It is 18C and sunny there today.", 1004.0)
    return svc, session


async def test_pass_reads_only_user_and_assistant_text_and_then_only_the_delta():
    svc, session = await make_session()
    memories = InMemoryMemoryService()
    model = ScriptedModel([
        ops({"op": "add", "text": "The user lives in Porto", "kind": "fact", "topics": ["home"]}),
        ops({"op": "add", "text": "The user adopted a dog called Rex on 1970-01-01", "kind": "episode",
             "event_time": "1970-01-01", "participants": ["Rex"]}),
    ])
    extractor = MemoryExtractor(model, MemoryPolicy())

    first = await extractor.extract(session, memories, svc)
    assert first.status == "extracted" and first.messages_read == 3
    sent = conversation_part(model.requests[0])
    assert "I moved to Porto last month." in sent and "18C and sunny" in sent and "Porto is lovely" in sent
    for hidden in ("TOOLRESULT", "TOOLARGS", "PARTIALCHUNK"):
        assert hidden not in sent
    assert model.requests[0].purpose == "memory" and model.requests[0].config.response_format == "json"
    assert model.requests[0].config.json_schema == OPERATIONS_SCHEMA
    stored = await svc.get_session("app", "u1", "s1")
    assert stored.state[LAST_EXTRACTED_AT_KEY] == 1004.0
    assert [m.text for m in await memories.list("app", "u1")] == ["The user lives in Porto"]
    assert (await memories.list("app", "u1"))[0].source_session_id == "s1"

    await say(svc, session, "user", "Yesterday I adopted a dog called Rex.", 2000.0)
    await say(svc, session, "assistant", "Congratulations on Rex!", 2001.0)
    second = await extractor.extract(session, memories, svc)
    assert second.status == "extracted" and second.messages_read == 2
    sent = conversation_part(model.requests[1])
    assert "adopted a dog called Rex" in sent and "Congratulations" in sent
    assert "Porto" not in sent  # the first delta is not read again ...
    assert "The user lives in Porto" in existing_part(model.requests[1])  # ... but its memory is shown
    episode = (await memories.search("app", "u1", "dog Rex"))[0].memory
    assert episode.kind == "episode" and episode.event_time == "1970-01-01" and episode.participants == ("Rex",)

    third = await extractor.extract(session, memories, svc)
    assert third.status == "skipped" and "no new messages" in third.reason
    assert model.calls == 2  # no model call without a delta


@pytest.mark.parametrize("reply, expected", [
    ("Sure! I will remember that the user lives in Porto.", "reply is not JSON"),
    ('{"result": []}', "no 'operations' list"),
    ('{"operations": [{"op": "explode", "text": "x"}, {"op": "add"}]}', "no usable operation"),
    ("", "reply is empty"),
])
async def test_malformed_output_is_an_error_on_record_and_the_cursor_stays(reply, expected):
    svc, session = await make_session()
    memories = InMemoryMemoryService()
    model = ScriptedModel([reply, ops({"op": "add", "text": "The user lives in Porto"})])
    extractor = MemoryExtractor(model, MemoryPolicy())

    failed = await extractor.extract(session, memories, svc)
    assert failed.status == "error" and not failed.ok
    assert "malformed extraction output" in failed.error and expected in failed.error
    state = (await svc.get_session("app", "u1", "s1")).state
    assert LAST_EXTRACTED_AT_KEY not in state
    assert expected in state[LAST_ERROR_KEY]["error"]
    assert await memories.list("app", "u1") == []

    retried = await extractor.extract(session, memories, svc)
    assert retried.status == "extracted" and retried.messages_read == failed.messages_read == 3
    state = (await svc.get_session("app", "u1", "s1")).state
    assert state[LAST_EXTRACTED_AT_KEY] == 1004.0 and state[LAST_ERROR_KEY] is None


async def test_model_failure_is_an_error_too():
    svc, session = await make_session()
    extractor = MemoryExtractor(ScriptedModel([ServerError("upstream 503")]), MemoryPolicy())
    result = await extractor.extract(session, InMemoryMemoryService(), svc)
    assert result.status == "error" and "model call failed: upstream 503" in result.error


async def test_bad_entries_are_dropped_with_a_note_and_good_ones_applied():
    svc, session = await make_session()
    memories = InMemoryMemoryService()
    reply = ops({"op": "add", "text": "The user lives in Porto"}, {"op": "update", "text": "no id"},
                {"op": "delete", "id": "mem-unknown"})
    result = await MemoryExtractor(ScriptedModel([reply]), MemoryPolicy()).extract(session, memories, svc)
    assert result.status == "extracted"
    assert any("operation 2: update without an id" in p for p in result.problems)
    assert any("unknown memory id 'mem-unknown'" in p for p in result.problems)
    assert result.counts() == {"add": 1, "error": 1}
    assert len(await memories.list("app", "u1")) == 1


def test_parser_tolerates_fences_prose_lists_and_tool_calls():
    fenced = Message.assistant('Here you go:\n```json\n{"operations": [{"op": "add", "text": "A"}]}\n```')
    assert [o.text for o in parse_operations(fenced)[0]] == ["A"]
    bare_list = Message.assistant('[{"type": "memory_add", "memory": "B", "kind": "event", "topics": "x, y"}]')
    (op,), problems = parse_operations(bare_list)
    assert (op.op, op.text, op.kind, op.topics, problems) == ("add", "B", "episode", ("x", "y"), [])
    calls = Message.assistant("", tool_calls=(ToolCall("1", "memory_update", '{"memory_id": "m1", "memory": "C"}'),
                                              ToolCall("2", "memory_delete", '{"memory_id": "m2"}')))
    parsed, _ = parse_operations(calls)
    assert [(o.op, o.memory_id) for o in parsed] == [("update", "m1"), ("delete", "m2")]
    assert parse_operations(Message.assistant('{"operations": []}')) == ([], [])
    with pytest.raises(ExtractionParseError):
        parse_operations(Message.assistant('{"operations": "add A"}'))


async def test_gate_closed_leaves_the_cursor_for_next_time():
    svc, session = await make_session()
    model = ScriptedModel([ops()])
    extractor = MemoryExtractor(model, MemoryPolicy(message_threshold=3))
    result = await extractor.extract(session, InMemoryMemoryService(), svc)
    assert result.status == "skipped" and "gate closed (3 new messages)" in result.reason and model.calls == 0
    await say(svc, session, "user", "One more thing.", 3000.0)
    assert (await extractor.extract(session, InMemoryMemoryService(), svc)).status == "extracted"


async def test_assistant_text_can_be_left_out():
    svc, session = await make_session()
    model = ScriptedModel([ops()])
    await MemoryExtractor(model, MemoryPolicy(include_assistant=False)).extract(session, InMemoryMemoryService(), svc)
    sent = conversation_part(model.requests[0])
    assert "I moved to Porto" in sent and "lovely" not in sent


async def test_the_update_policy_shapes_the_prompt_and_the_outcome():
    svc, session = await make_session()
    memories = InMemoryMemoryService()
    old = await memories.add("app", "u1", "The user lives in Lisbon")
    model = ScriptedModel([ops({"op": "update", "id": old.id, "text": "The user lives in Porto"})])
    result = await MemoryExtractor(model, MemoryPolicy(update_policy="append_only")).extract(session, memories, svc)
    assert "Use only \"add\"" in model.requests[0].messages[0].content
    assert old.id in existing_part(model.requests[0])
    assert [d.action for d in result.decisions] == ["add"]
    assert sorted(m.text for m in await memories.list("app", "u1")) == ["The user lives in Lisbon",
                                                                        "The user lives in Porto"]


def test_unknown_prompt_version_fails_at_construction():
    with pytest.raises(ValueError, match="unknown extraction_prompt_version 'v9'"):
        MemoryExtractor(ScriptedModel([]), MemoryPolicy(extraction_prompt_version="v9"))


async def test_long_delta_is_chunked_and_the_cursor_moves_per_chunk():
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u1", "s1")
    lines = [f"Message number {i}: " + "word " * 30 for i in range(4)]
    for i, line in enumerate(lines):
        await say(svc, session, "user", line, 100.0 + i)
    model = ScriptedModel([ops({"op": "add", "text": "The user sent messages 0 and 1"}), "not json at all",
                           ops({"op": "add", "text": "The user sent messages 2 and 3"})])
    policy = MemoryPolicy(delta_chunk_tokens=110, extract_max_tokens=256)  # ~51 tokens a message
    extractor = MemoryExtractor(model, policy)

    failed = await extractor.extract(session, InMemoryMemoryService(), svc)
    assert failed.status == "error" and failed.error.endswith("(chunk 2 of 2)")
    assert [d.action for d in failed.decisions] == ["add"]  # chunk 1 was applied ...
    state = (await svc.get_session("app", "u1", "s1")).state
    assert state[LAST_EXTRACTED_AT_KEY] == 101.0  # ... and its cursor kept
    first, second = (conversation_part(r) for r in model.requests)
    assert "Message number 1" in first and "Message number 2" not in first
    assert "Message number 2" in second and "Message number 3" in second
    assert model.requests[0].config.max_tokens == 256

    retried = await extractor.extract(session, InMemoryMemoryService(), svc)
    assert retried.status == "extracted" and retried.messages_read == 2
    assert "Message number 1" not in conversation_part(model.requests[2])


def test_operations_schema_bounds_the_reply_and_parses_like_any_reply() -> None:
    schema = json.loads(OPERATIONS_SCHEMA)
    item = schema["properties"]["operations"]["items"]
    assert schema["properties"]["operations"]["maxItems"] == 4 and item["properties"]["text"]["maxLength"] == 200
    assert item["properties"]["op"]["enum"] == ["add", "update", "delete"]
    # A reply in the enforced shape (as the embedded model writes it) goes through the usual parser.
    reply = ('{"operations":[{"op":"add","text":"Caroline went to an LGBTQ support group on 2023-05-07",'
             '"kind":"episode","topics":["support"],"event_time":"2023-05-07"},{"op":"delete","id":"m1"}]}')
    operations, problems = parse_operations(Message.assistant(reply))
    assert [o.op for o in operations] == ["add", "delete"] and not problems
    assert operations[0].event_time == "2023-05-07" and operations[1].memory_id == "m1"
