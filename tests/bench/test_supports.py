"""Support extraction on hand-made steps."""

from __future__ import annotations

from typing import Any

import pytest

from agentlab.bench.retention.supports import (
    Rules,
    UserForms,
    non_trivial,
    occurs,
    result_units,
    said_by_user,
    step_supports,
    user_dates,
)
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


# ------------------------------------------------------------------- the rules of supports-v2

def test_a_date_the_user_gave_in_words_is_not_a_support() -> None:
    events = _ledger(
        Message.user("I want to fly on May 27th, the 2nd of June also works"),
        Message.tool("c1", "search", '[{"flight": "HAT041", "date": "2024-05-27"}, {"date": "2024-06-02"}]'),
        Message.assistant("HAT041 leaves 2024-05-27; 2024-06-02 too"))
    assert {s.text for s in step_supports(events)[0].supports} == {"HAT041"}
    assert {s.text for s in step_supports(events, rules=Rules(user_forms=False))[0].supports} == {
        "HAT041", "2024-05-27", "2024-06-02"}
    # A year the user gave must match; case is not a form the user's words are kept in.
    assert user_dates("on May 27, 2023 and 5/28") == {(2023, 5, 27), (None, 5, 28)}
    forms = UserForms.of(["my code is hat229"])
    assert said_by_user("HAT229", "value", forms) and not said_by_user("HAT230", "value", forms)
    assert not said_by_user("2024-05-27", "value", UserForms.of(["on May 27, 2023"]))


def test_a_value_the_agent_wrote_before_a_tool_held_it_is_not_a_support() -> None:
    events = _ledger(
        Message.user("ISSUE: crash"),
        Message.assistant("", (ToolCall("c1", "create", '{"command": "create reproduce_bug.py"}'),)),
        Message.tool("c1", "create", "[File: /repo/reproduce_bug.py (1 lines total)]"),
        Message.tool("c2", "ls", "reproduce_bug.py\nsetup_helper.py"),
        Message.assistant("", (ToolCall("c3", "python", '{"command": "python reproduce_bug.py setup_helper.py"}'),)))
    assert {s.text for s in step_supports(events)[1].supports} == {"setup_helper.py"}
    assert {s.text for s in step_supports(events, rules=Rules(agent_first=False))[1].supports} == {
        "reproduce_bug.py", "setup_helper.py"}


def test_a_text_given_in_two_forms_is_one_support_with_both_sources() -> None:
    events = _ledger(
        Message.user("hello"),
        Message.tool("c1", "get", '{"flight": "HAT229"}'),
        Message.tool("c2", "log", "booked HAT229 ok"),
        Message.assistant("Your flight HAT229."))
    (one,) = step_supports(events)[0].supports
    assert (one.text, one.kind, one.sources) == ("HAT229", "value", ("e1", "e2"))
    assert len(step_supports(events, rules=Rules(once_per_text=False))[0].supports) == 2


# ------------------------------------------------------------ the rules on the recorded trajectories

def _trajectory(traj_id: str) -> Any:
    from agentlab.bench.datasets.base import DatasetError
    from agentlab.bench.datasets.trajectories import load_trajectories

    dataset = traj_id.split("/")[0]
    try:
        data = load_trajectories((dataset,), allow_download=False)
    except DatasetError as exc:
        pytest.skip(f"the {dataset} trajectories are not here: {exc}")
    return next(t for t in data.trajectories if t.traj_id == traj_id)


def _at(traj: Any, index: int, rules: Rules = Rules()) -> list[tuple[str, str]]:
    step = next(s for s in step_supports(traj.events, traj.instruction, rules) if s.index == index)
    return [(s.text, s.kind) for s in step.supports]


def test_real_tau_bench_date_in_words_and_double_form() -> None:
    traj = _trajectory("tau_bench/3-0")
    assert ("2024-05-27", "value") in _at(traj, 23, Rules(False, False, False))
    assert "2024-05-27" not in {t for t, _ in _at(traj, 23)}
    old = [t for t, _ in _at(traj, 41, Rules(False, False, False))]
    assert old.count("HAT229") == 2 and [t for t, _ in _at(traj, 41)].count("HAT229") == 1


def test_real_tau_bench_one_way_the_agent_wrote_first() -> None:
    traj = _trajectory("tau_bench/0-3")
    assert ("one_way", "value") in _at(traj, 23, Rules(False, False, False))
    assert "one_way" not in {t for t, _ in _at(traj, 23)}


def test_real_swe_agent_code_lines_the_agent_wrote_first() -> None:
    traj = _trajectory("swe_agent/tests_test_data_trajectories_gpt4__swe-bench-dev-easy_first_only__default__t-0.00"
                       "__p-0.95__c-3.00__install-1_pydicom__pydicom-1458")
    line = "required_elements.append('PixelRepresentation')"
    assert line in {t for t, _ in _at(traj, 13, Rules(False, False, False))}
    assert line not in {t for t, _ in _at(traj, 13)}


def test_real_tau_bench_long_context_is_the_recorded_history() -> None:
    import asyncio

    from agentlab.bench.retention.trajectories import step_requests
    from agentlab.policies.arms import full_history_arm

    traj = _trajectory("tau_bench/0-0")
    assert any(e.message is not None and e.message.name == "think" and not e.message.content for e in traj.events)
    for r in asyncio.run(step_requests(traj, full_history_arm("long_context"), context_window=1 << 30)):
        assert [m for m in r.messages if m.role != "system"] == [e.message for e in traj.events[:r.index]]
        assert not r.left_out
