from agentlab.events import Event, Message, ToolCall, user_event
from agentlab.model import tokens
from agentlab.model.tokens import count_event, count_message, count_messages, count_text


def test_count_text_basic() -> None:
    assert count_text("") == 0
    assert count_text("hello world") == 2
    # special-token text is counted as ordinary text instead of raising
    assert count_text("<|endoftext|>") > 1


def test_message_overhead_follows_cookbook_rule() -> None:
    m = Message.user("hello world")
    # 3 per message + role ("user" = 1) + content (2)
    assert count_message(m) == 3 + 1 + 2
    # +3 reply priming for a request
    assert count_messages([m]) == count_message(m) + 3
    assert count_messages([m, m]) == 2 * count_message(m) + 3


def test_name_and_tool_calls_add_tokens() -> None:
    result = Message.tool("call_1", "lookup", "42")
    assert count_message(result) == 3 + count_text("tool") + count_text("42") + 1 + count_text("lookup")
    plain = Message.assistant("")
    call = Message.assistant("", [ToolCall(id="c", name="lookup", arguments='{"q": "weather in Paris"}')])
    assert count_message(call) == count_message(plain) + count_text("lookup") + count_text(
        '{"q": "weather in Paris"}'
    )


def test_tools_schema_adds_tokens() -> None:
    msgs = [Message.user("what is the weather?")]
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    without = count_messages(msgs)
    with_tools = count_messages(msgs, [tool])
    assert with_tools > without + 10
    assert count_messages(msgs, []) == without


def test_count_event() -> None:
    ev = user_event("hello world")
    assert count_event(ev) == count_message(Message.user("hello world"))
    assert count_event(Event(author="x", choices=[])) == 0


def test_unknown_or_unloadable_encoding_falls_back_to_offline_default() -> None:
    default = tokens.get_encoding()
    assert default.name == tokens.DEFAULT_ENCODING
    assert tokens.get_encoding("cl100k_base").name == tokens.DEFAULT_ENCODING
    assert tokens.get_encoding("gpt-4").name == tokens.DEFAULT_ENCODING
    assert tokens.get_encoding("some-local-model").name == tokens.DEFAULT_ENCODING
    assert count_text("hello world", encoding="gpt-4") == count_text("hello world")


def test_the_message_count_cache_keeps_no_message_alive_and_tells_messages_apart() -> None:
    import gc
    import weakref

    big = Message.user("word " * 50_000)
    n = tokens.count_message(big)
    assert n == tokens.count_message(Message.user("word " * 50_000))  # served from the cache, same count
    ref = weakref.ref(big)
    del big
    gc.collect()
    assert ref() is None  # a proxy's evicted conversation is not held in memory by the counter
    plain = Message.assistant("ok")
    called = Message.assistant("ok", (ToolCall("c1", "search_logs", '{"query": "Lisbon visits"}'),))
    assert tokens.count_message(called) > tokens.count_message(plain)


def test_a_counted_message_keeps_its_count_and_stays_equal_to_an_uncounted_copy() -> None:
    counted = Message.assistant("three words here", (ToolCall("c1", "grep", '{"pattern": "x"}'),))
    twin = Message.assistant("three words here", (ToolCall("c1", "grep", '{"pattern": "x"}'),))
    n = tokens.count_message(counted)
    assert tokens.count_message(counted) == n == tokens._count_message(twin, None)
    assert counted == twin and hash(counted) == hash(twin)  # the kept count is not a field
    other = counted.with_content("a different and longer text than before")
    assert tokens.count_message(other) == tokens._count_message(other, None) != n
