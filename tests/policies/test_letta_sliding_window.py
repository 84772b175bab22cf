"""Letta's sliding-window compaction: hand-worked examples from ``summarizer_sliding_window.py``.

No differential test: the PyPI package ``letta`` (0.34.12) ships Letta Code, without the Python
server modules, and the server repository is archived. The examples count 10 tokens a message
so that each step of the eviction loop can be followed by hand.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from agentlab.events import Message, ToolCall
from agentlab.policies.letta_sliding_window import (
    SUMMARY_TRUNCATION_SUFFIX,
    LettaSlidingWindowPolicy,
    finish,
    sliding_cutoff,
    summary_message,
)


def ten_each(messages: Sequence[Message]) -> float:
    return 10.0 * len(messages)


def turns(n: int) -> list[Message]:
    out = [Message.system("sys")]
    for i in range(1, n + 1):
        out += [Message.user(f"u{i}"), Message.assistant(f"a{i}")]
    return out


def test_the_first_try_evicts_forty_percent_and_the_loop_grows_by_ten() -> None:
    messages = turns(4) + [Message.user("u5")]  # 10 messages: sys u1 a1 u2 a2 u3 a3 u4 a4 u5
    # goal = 0.7 x 100 = 70. pct 0.4: cutoff round(4) = 4 (a2) -> keeps 7 messages = 70, not < 70;
    # pct 0.5: round(5) = 5 is u3 -> back to 4 (a2) again, 70; pct 0.6: 6 (a3) -> 5 messages = 50: stop.
    assert sliding_cutoff(messages, 100, 0.3, ten_each) == 6
    out = finish(messages, 6, "S", LettaSlidingWindowPolicy())
    assert [m.content for m in out.messages[2:]] == ["a3", "u4", "a4", "u5"]
    assert out.messages[0] == messages[0] and out.sources == (0, None, 6, 7, 8, 9)
    alert = json.loads(out.messages[1].content)
    assert alert["type"] == "system_alert"
    assert alert["message"] == ("Note: 5 messages from the beginning of the conversation have been hidden from view "
                                "due to memory constraints.\nThe following is a summary of the previous messages:\n S")


def test_a_larger_window_stops_at_the_first_try() -> None:
    messages = turns(4) + [Message.user("u5")]
    # goal 0.7 x 1000 = 700: the first try (cutoff 4, 70 tokens) is already under it.
    assert sliding_cutoff(messages, 1000, 0.3, ten_each) == 4


def test_the_cutoff_is_always_an_assistant_message_so_tool_pairs_stay_whole() -> None:
    messages = [Message.system("s"), Message.user("u1"), Message.assistant("", [ToolCall("c1", "f", "{}")]),
                Message.tool("c1", "f", "r1"), Message.assistant("a1"), Message.user("u2"),
                Message.assistant("", [ToolCall("c2", "f", "{}")]), Message.tool("c2", "f", "r2"),
                Message.assistant("a2"), Message.user("u3")]
    cutoff = sliding_cutoff(messages, 100, 0.3, ten_each)
    # 0.4 -> 4 (a1): keeps 7 = 70; 0.5 -> round(5) = 5 (u2) -> 4 again; 0.6 -> 6 (the call c2): 5 messages = 50.
    assert cutoff == 6
    kept = messages[cutoff:]
    assert kept[0].tool_calls[0].id == "c2" and kept[1].tool_call_id == "c2"


def test_no_assistant_message_or_a_cutoff_at_the_end_means_all_mode() -> None:
    only_users = [Message.system("s")] + [Message.user(f"u{i}") for i in range(6)]
    assert sliding_cutoff(only_users, 100, 0.3, ten_each) is None
    everything_big = turns(3)  # 7 messages, each 1000 tokens: never under the goal before pct reaches 1.0
    assert sliding_cutoff(everything_big, 100, 0.3, lambda ms: 1000.0 * len(ms)) is None
    out = finish(everything_big, None, "all of it", LettaSlidingWindowPolicy())
    assert len(out.messages) == 2 and out.sources == (0, None)
    assert json.loads(out.messages[1].content)["message"].startswith("Note: prior messages have been hidden")


def test_a_long_summary_is_clipped_with_lettas_suffix() -> None:
    message = finish(turns(2), 2, "x" * 60, LettaSlidingWindowPolicy(clip_chars=50)).messages[1]
    assert json.loads(message.content)["message"].endswith("x" * 50 + SUMMARY_TRUNCATION_SUFFIX)
    assert SUMMARY_TRUNCATION_SUFFIX == "... [summary truncated to fit]"


def test_the_summary_message_is_the_same_for_the_same_input() -> None:
    assert summary_message("s", 3) == summary_message("s", 3)  # no timestamp in it: projections repeat
