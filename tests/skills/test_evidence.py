"""The evidence gate: each signal found from events alone, and a weak delta finds none."""

from __future__ import annotations

from agentlab.events import OBJ_TOOL_RESPONSE, Event, Message, ToolCall, user_event
from agentlab.skills.evidence import find_evidence, tool_failed


def user(text: str) -> Event:
    return user_event(text)


def answer(text: str) -> Event:
    return Event(author="agent", choices=[Message.assistant(text)])


def call(name: str, call_id: str) -> Event:
    return Event(author="agent", choices=[Message.assistant("", [ToolCall(call_id, name, "{}")])])


def result(name: str, call_id: str, content: str = "ok", error: str | None = None) -> Event:
    return Event(author="agent", object=OBJ_TOOL_RESPONSE, choices=[Message.tool(call_id, name, content)],
                 metadata={"tool_error": error})


def test_a_plain_question_and_answer_is_weak_evidence() -> None:
    delta = [user("What is TLS?"), call("lookup", "c1"), result("lookup", "c1"), answer("A protocol.")]
    evidence = find_evidence(delta)
    assert not evidence.strong and evidence.kinds() == []


def test_repeated_tool_coordination() -> None:
    delta = [user("Check both hosts."),
             call("resolve", "c1"), result("resolve", "c1"), call("read_cert", "c2"), result("read_cert", "c2"),
             call("resolve", "c3"), result("resolve", "c3"), call("read_cert", "c4"), result("read_cert", "c4"),
             answer("Both expired.")]
    evidence = find_evidence(delta)
    assert evidence.kinds() == ["repeated_tool_coordination"]
    assert "resolve then read_cert, 2 times" in evidence.describe()
    assert not find_evidence(delta, coordination_repeats=3).strong  # the threshold is respected


def test_a_users_correction_after_a_reply() -> None:
    delta = [user("TLS fails."), answer("It is the network."),
             user("No, that's wrong: you should have checked the certificate expiry first.")]
    assert find_evidence(delta).kinds() == ["user_correction"]
    # the same words as the first message of a conversation correct nothing
    assert not find_evidence([user("You should have checked the certificate.")]).strong
    # a correction of the previous run's answer: the reply is before the cursor
    assert find_evidence([user("Next time, check the certificate first.")],
                         before=[user("TLS fails."), answer("It is the network.")]).kinds() == ["user_correction"]


def test_a_recovery_after_a_failed_call() -> None:
    delta = [user("TLS fails."), call("ping", "c1"), result("ping", "c1", "error: TimeoutError: host down", "TimeoutError"),
             call("read_cert", "c2"), result("read_cert", "c2", "expired"), answer("The certificate expired.")]
    evidence = find_evidence(delta)
    assert evidence.kinds() == ["recovery_after_failure"]
    assert "ping failed, then read_cert succeeded" in evidence.describe()
    # a failure with no successful call after it is not a recovery
    assert not find_evidence(delta[:3] + [answer("Sorry, I could not check.")]).strong


def test_a_result_starting_with_error_counts_as_failed() -> None:
    assert tool_failed(result("x", "c", "Error: refused"))
    assert not tool_failed(result("x", "c", "fine"))
    assert not tool_failed(answer("error: not a tool result"))


def test_a_failure_after_the_recovery_is_no_recovery() -> None:
    delta = [user("TLS fails."), call("ping", "c1"), result("ping", "c1", "error: down", "RuntimeError"),
             call("read_cert", "c2"), result("read_cert", "c2", "expired"),
             call("ping", "c3"), result("ping", "c3", "error: down", "RuntimeError"), answer("I could not tell.")]
    assert not find_evidence(delta).strong
