"""Support extraction on hand-made steps."""

from __future__ import annotations

from agentlab.bench.supports import non_trivial, occurs, result_units, step_supports
from agentlab.events import Event, Message, ToolCall


def _ev(i: int, message: Message) -> Event:
    return Event(author="user" if message.role == "user" else "agent", choices=[message], id=f"e{i}")


def _ledger(*messages: Message) -> list[Event]:
    return [_ev(i, m) for i, m in enumerate(messages)]


def test_json_values_read_from_a_tool_and_used_in_a_call_are_supports() -> None:
    events = _ledger(
        Message.user("I am mia_li_3668 and want to fly to Seattle"),
        Message.assistant("", (ToolCall("c1", "get_user_details", '{"user_id": "mia_li_3668"}'),)),
        Message.tool("c1", "get_user_details", '{"name": "Mia", "reservations": ["NO6JO3", "AIXC49"], '
                                               '"membership": "gold", "user": "mia_li_3668", "vip": true}'),
        Message.assistant("Your reservations are NO6JO3 and AIXC49; gold member.",
                          (ToolCall("c2", "get_reservation_details", '{"reservation_id": "NO6JO3"}'),)),
    )
    steps = step_supports(events, instruction="Airline policy")
    assert [s.index for s in steps] == [1, 3]
    assert steps[0].supports == ()  # nothing read yet
    found = {s.text: s.sources for s in steps[1].supports}
    # "mia_li_3668" is the user's own words; "gold" is a lower-case word; true is never a unit.
    assert found == {"NO6JO3": ("e2",), "AIXC49": ("e2",)}


def test_values_in_the_system_prompt_are_not_supports() -> None:
    events = _ledger(Message.user("help"), Message.tool("c0", "t", '{"code": "HAT001"}'),
                     Message.assistant("Flight HAT001 it is."))
    assert step_supports(events, instruction="")[0].supports[0].text == "HAT001"
    assert step_supports(events, instruction="Never book HAT001")[0].supports == ()


def test_identifier_tokens_and_code_lines_of_a_text_observation() -> None:
    observation = ("[File: /repo/pkg/fields.py (3 lines total)]\n"
                   "1:def get_value(obj, key):\n"
                   "2:    return obj[key]\n"
                   "(Open file: /repo/pkg/fields.py)")
    units = {(u.text, u.kind) for u in result_units(observation)}
    assert ("/repo/pkg/fields.py", "token") in units and ("get_value", "token") in units
    assert ("def get_value(obj, key):", "line") in units and ("return obj[key]", "line") in units
    assert ("File", "token") not in units and ("return", "token") not in units  # prose / keywords
    events = _ledger(Message.user("ISSUE: values are wrong"),
                     Message.tool("c1", "open", observation),
                     Message.assistant("edit", (ToolCall("c2", "edit", '{"command": "edit 2:2\\n    return '
                                                                       'obj.get(key)\\nend_of_edit"}'),)),
                     Message.assistant("The bug is in get_value:\n    return   obj[key]"))
    steps = step_supports(events)
    assert steps[0].supports == ()
    assert {(s.text, s.kind) for s in steps[1].supports} == {("get_value", "token"), ("return obj[key]", "line")}


def test_occurrence_needs_word_boundaries_and_units_a_minimum() -> None:
    assert occurs("HAT001", "take HAT001.") and not occurs("HAT001", "HAT0010") and not occurs("HAT001", "xHAT001")
    assert not non_trivial("100") and not non_trivial("true") and not non_trivial("economy")
    assert non_trivial("1000") and non_trivial("New York") and non_trivial("credit_card_1")
    assert not non_trivial("Found", token=True) and non_trivial("missingColon", token=True)
