"""session_load: anchors, tool_call_id resolution, stale ids, window rules, UTF-8 paging."""

from __future__ import annotations

import pytest
from recall_helpers import APP, USER, Ledger, invocation, policy

from agentlab.events import Message
from agentlab.recall.tools import normalise_window, session_load, utf8_page
from agentlab.session.inmemory import InMemorySessionService


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (None, None, (1, 1)),
        (0, 0, (1, 1)),      # both zero means "the defaults"
        (-3, -1, (1, 1)),    # negatives become zero, then both zero -> defaults
        (3, 3, (2, 2)),      # after shrinks first while after >= before
        (0, 10, (0, 4)),
        (5, 1, (3, 1)),      # before shrinks when it is the larger side
        (1, 4, (1, 3)),
        (4, 0, (4, 0)),
        (2, None, (2, 1)),
    ],
)
def test_window_normalisation_and_span_shrink_rule(before, after, expected):
    assert normalise_window(before, after, policy()) == expected


async def _session_with_tool_results():
    svc = InMemorySessionService()
    led = Ledger(svc)
    s = await led.session("cur")
    await led.user(s, "check the disk")
    _, first = await led.tool_round(s, "c1", "disk_usage", "disk at 91% (first try)")
    await led.assistant(s, "retrying")
    _, second = await led.tool_round(s, "c1", "disk_usage", "disk at 93% (retry)")
    last = await led.assistant(s, "disk is nearly full")
    return svc, led, s, first, second, last


async def test_tool_call_id_resolves_to_the_latest_result_and_window_skips_tool_call_messages():
    svc, _, s, first, second, last = await _session_with_tool_results()
    got = await session_load(invocation(svc, s), policy(), tool_call_id="c1")
    assert got["event_id"] == second.id
    assert (got["before"], got["after"]) == (1, 1)
    roles = [m["role"] for m in got["messages"]]
    # the window is [assistant tool call, tool result, assistant answer]; the call message is skipped
    assert roles == ["tool", "assistant"]
    anchor = got["messages"][0]
    assert anchor["anchor"] is True and anchor["content"] == "disk_usage: disk at 93% (retry)"
    assert anchor["tool_call_id"] == "c1" and anchor["content_truncated"] is False
    assert got["messages"][1]["event_id"] == last.id
    assert got["note"].startswith("Historical context only")


async def test_stale_event_id_with_tool_call_id_retries_through_the_tool_call():
    svc, _, s, _, second, _ = await _session_with_tool_results()
    got = await session_load(invocation(svc, s), policy(), event_id="ev-stale", tool_call_id="c1")
    assert got["event_id"] == second.id


async def test_clear_errors_for_missing_anchors():
    svc, _, s, *_ = await _session_with_tool_results()
    inv = invocation(svc, s)
    with pytest.raises(ValueError, match="event_id is required unless tool_call_id is provided"):
        await session_load(inv, policy())
    with pytest.raises(ValueError, match="tool_call_id 'zz' not found in session 'cur'"):
        await session_load(inv, policy(), tool_call_id="zz")
    with pytest.raises(ValueError, match="anchor event '7' not found in session 'cur'.*turn numbers"):
        await session_load(inv, policy(), event_id="7")
    with pytest.raises(ValueError, match="session 'nope' not found"):
        await session_load(inv, policy(), session_id="nope", event_id="x")


async def test_tool_call_id_falls_back_to_the_stored_session():
    svc = InMemorySessionService()
    led = Ledger(svc)
    stale_copy = await led.session("cur")          # the invocation's in-memory view ...
    live = await svc.get_session(APP, USER, "cur")  # ... does not see what another writer appends
    _, result = await led.tool_round(live, "c7", "lookup", "value=42")
    assert stale_copy.events == []
    got = await session_load(invocation(svc, stale_copy), policy(), tool_call_id="c7")
    assert got["event_id"] == result.id and "value=42" in got["messages"][0]["content"]


async def test_loads_from_another_session_of_the_same_user_only():
    svc = InMemorySessionService()
    led = Ledger(svc)
    old = await led.session("old")
    e = await led.user(old, "remember the code 5512")
    mine = invocation(svc, await led.session("cur"))
    got = await session_load(mine, policy(), session_id="old", event_id=e.id)
    assert got["messages"][0]["content"] == "remember the code 5512"
    theirs = invocation(svc, await led.session("x", user_id="u2"))
    with pytest.raises(ValueError, match="not found for this user"):
        await session_load(theirs, policy(), session_id="old", event_id=e.id)


def test_utf8_page_never_splits_a_character():
    data = "a€b😀".encode()  # 1 + 3 + 1 + 4 bytes
    assert utf8_page(data, 2, 10) == (1, 9)   # offset inside '€' moves back to its first byte
    assert utf8_page(data, 0, 3) == (0, 1)    # end inside '€' moves back
    assert utf8_page(data, 5, 1) == (5, 9)    # a limit smaller than one character still returns it
    assert utf8_page(data, 99, 10) == (9, 9)


async def test_paging_a_large_multibyte_tool_result_reassembles_exact_bytes():
    svc = InMemorySessionService()
    led = Ledger(svc)
    s = await led.session("cur")
    content = "head;" + "€" * 7000 + "|" + "😀" * 5000 + ";tail"
    _, result = await led.tool_round(s, "big", "dump", content)
    inv = invocation(svc, s)
    raw = content.encode()

    first = (await session_load(inv, policy(), event_id=result.id))["messages"][0]
    assert first["content_bytes"] == len(raw) and first["content_offset"] == 0
    assert first["returned_bytes"] <= 16 * 1024 and first["content_truncated"] is True
    capped = (await session_load(inv, policy(), event_id=result.id, content_limit=10**6))["messages"][0]
    assert capped["returned_bytes"] <= 64 * 1024

    pieces, offset = [], 0
    while True:
        page = (await session_load(inv, policy(), event_id=result.id, content_offset=offset,
                                   content_limit=1001))["messages"][0]
        assert page["content_offset"] == offset
        body = page["content"].removeprefix("dump: ")
        assert len(body.encode()) == page["returned_bytes"] <= 1001
        pieces.append(body)
        if not page["content_truncated"] or "next_offset" not in page:
            break
        offset = page["next_offset"]
        assert offset == page["content_offset"] + page["returned_bytes"]
    assert "".join(pieces).encode() == raw

    # an offset in the middle of a character is clamped back to the character's start
    mid = len(b"head;") + 1
    clamped = (await session_load(inv, policy(), event_id=result.id, content_offset=mid,
                                  content_limit=7))["messages"][0]
    assert clamped["content_offset"] == mid - 1 and clamped["content"] == "dump: €€"


async def test_only_the_target_tool_result_is_paged_others_start_at_zero():
    svc = InMemorySessionService()
    led = Ledger(svc)
    s = await led.session("cur")
    _, a = await led.tool_round(s, "a", "t", "A" * 100)
    await led.add(s, Message.tool("b", "t", "B" * 100))
    got = await session_load(invocation(svc, s), policy(), event_id=a.id, before=0, after=1,
                             content_offset=50, content_limit=10)
    target, neighbour = got["messages"]
    assert (target["content_offset"], target["returned_bytes"]) == (50, 10)
    assert (neighbour["content_offset"], neighbour["returned_bytes"]) == (0, 10)
