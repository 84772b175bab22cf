"""Codex CLI local compaction and tool-output truncation: hand-worked examples from its Rust source.

No differential test: Codex is a Rust program (no Python package to run). The examples below are
worked by hand from the functions named in ``agentlab/policies/codex_compaction.py``.
"""

from __future__ import annotations

from agentlab.events import Message, ToolCall
from agentlab.policies.codex_compaction import (
    SUMMARY_PREFIX,
    CodexCompactionPolicy,
    approx_token_count,
    compacted_history,
    drop_oldest,
    truncate_text,
    truncate_tool_outputs,
)


def test_summary_prefix_is_codexs_400_characters() -> None:
    assert len(SUMMARY_PREFIX) == 400  # summary_prefix.md @ 50a53333 is 400 characters
    assert SUMMARY_PREFIX.startswith("Another language model started to solve this problem")
    assert SUMMARY_PREFIX.endswith("use the information in this summary to  assist with your own analysis:")


def test_approx_token_count_is_bytes_over_four_rounded_up() -> None:
    assert [approx_token_count(t) for t in ("", "a", "abcd", "abcde", "é")] == [0, 1, 1, 2, 1]


def test_byte_mode_keeps_head_and_tail_and_counts_removed_characters() -> None:
    # 10 bytes into 6: head = 3 bytes, tail starts at byte 10 - 3 = 7; d, e, f, g are removed.
    assert truncate_text("abcdefghij", "bytes", 6) == "abc…4 chars truncated…hij"
    assert truncate_text("abcdefghij", "bytes", 10) == "abcdefghij"
    assert truncate_text("abc", "bytes", 0) == "…3 chars truncated…"


def test_token_mode_budgets_four_bytes_a_token_and_counts_removed_bytes() -> None:
    # 1 token = 4 bytes: head "ab", tail "ij"; removed bytes = 10 - 4 = 6 -> ceil(6 / 4) = 2 tokens.
    assert truncate_text("abcdefghij", "tokens", 1) == "ab…2 tokens truncated…ij"
    assert truncate_text("abcdefgh", "tokens", 2) == "abcdefgh"  # 8 bytes fit 2 tokens
    assert truncate_text("abcdefghij", "tokens", 0) == "…3 tokens truncated…"


def test_multibyte_characters_are_not_split() -> None:
    # "ééééé" is 10 bytes; 6 bytes: head budget 3 takes one é (2 bytes), tail from byte 7 starts on é at 8.
    assert truncate_text("ééééé", "bytes", 6) == "é…3 chars truncated…é"


def test_tool_outputs_get_the_policy_times_the_serialization_allowance() -> None:
    policy = CodexCompactionPolicy(truncation_mode="bytes", truncation_limit=10)  # 10 x 1.2 = 12 bytes
    messages = [Message.user("go"), Message.assistant("", [ToolCall("c", "run", "{}")]),
                Message.tool("c", "run", "0123456789abcdefghij")]
    out = truncate_tool_outputs(messages, policy)
    assert out.messages[2].content == "012345…8 chars truncated…efghij"
    assert out.messages[:2] == tuple(messages[:2])
    assert truncate_tool_outputs(messages, CodexCompactionPolicy(truncation_limit=0)).messages == tuple(messages)


def test_the_handoff_keeps_user_messages_and_the_summary_only() -> None:
    messages = [Message.user("first task"), Message.assistant("", [ToolCall("c", "run", "{}")]),
                Message.tool("c", "run", "output"), Message.assistant("done"),
                Message.user(f"{SUMMARY_PREFIX}\nan earlier summary"), Message.user("second task")]
    out = compacted_history(messages, "what happened")
    assert [m.content for m in out.messages] == ["first task", "second task", f"{SUMMARY_PREFIX}\nwhat happened"]
    assert out.sources == (0, 5, None)
    assert all(m.role == "user" for m in out.messages)


def test_user_messages_are_chosen_newest_first_within_the_budget() -> None:
    # budget 3 tokens: "cccc" (1) fits, "bbbbbbbb" (2) fits, then 0 left: "a..." is not taken at all.
    messages = [Message.user("a" * 40), Message.user("bbbbbbbb"), Message.user("cccc")]
    out = compacted_history(messages, "s", max_tokens=3)
    assert [m.content for m in out.messages[:-1]] == ["bbbbbbbb", "cccc"]
    # budget 2: "cccc" fits (1 left); "bbbbbbbb" (2) does not: it is cut to 1 token and selection stops.
    cut = compacted_history(messages, "s", max_tokens=2)
    assert [m.content for m in cut.messages[:-1]] == ["bb…1 tokens truncated…bb", "cccc"]


def test_dropping_the_oldest_item_takes_its_pair_along() -> None:
    call = Message.assistant("", [ToolCall("c", "run", "{}")])
    messages = [call, Message.user("u"), Message.tool("c", "run", "r"), Message.assistant("a")]
    assert drop_oldest(messages) == [Message.user("u"), Message.assistant("a")]


def test_the_default_limit_is_nine_tenths_of_the_window() -> None:
    assert CodexCompactionPolicy().limit(272_000) == 244_800
    assert CodexCompactionPolicy().limit(8191) == 7371  # 8191 * 9 // 10
    assert CodexCompactionPolicy(auto_compact_token_limit=5000).limit(272_000) == 5000
    assert CodexCompactionPolicy().limit(0) is None
