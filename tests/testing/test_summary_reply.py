"""The test server's summary replies follow what a summary policy changes (a sweep of summary
settings on it used to compare four identical runs, every summary 14 tokens)."""

from __future__ import annotations

from typing import Any

from agentlab.events import Event, Message
from agentlab.summary import SummaryPolicy
from agentlab.summary.summarizer import Summarizer
from agentlab.testing.openai_server import OpenAITestServer
from agentlab.testing.summary_reply import is_summary_request

#: A meeting of 40 distinct sentences (about 400 words), so every budget below cuts it.
TURNS = [f"Speaker {i % 3} said the budget for item {i} is {i * 10} euros and the deadline is week {i}."
         for i in range(40)]


def summary_payload(**policy: Any) -> dict[str, Any]:
    """What agentlab's summariser sends for ``TURNS`` under a policy with these fields."""
    summarizer = Summarizer(None, SummaryPolicy(**policy))  # type: ignore[arg-type]  # no call is made
    events = [Event(author="user", choices=[Message.user(t)]) for t in TURNS]
    messages = summarizer.render_prompt([summarizer.render_line(e) for e in events], "")
    payload: dict[str, Any] = {"messages": [{"role": m.role, "content": m.content} for m in messages]}
    if summarizer.generation().max_tokens is not None:
        payload["max_tokens"] = summarizer.generation().max_tokens
    return payload


def words(server: OpenAITestServer, **policy: Any) -> int:
    return len(server.reply_message(summary_payload(**policy))["content"].split())


def test_the_summary_length_follows_the_reply_budget_and_the_word_cap() -> None:
    server = OpenAITestServer()
    try:
        assert is_summary_request(summary_payload()["messages"])
        short, long = words(server, max_output_tokens=64), words(server, max_output_tokens=512)
        assert short == int(64 * 0.7) and long > 3 * short  # 44 words against most of the meeting
        assert words(server, max_output_tokens=512, max_summary_words=30) == 30  # "Keep the summary under 30 words."
        # Lines of the conversation (as the summariser renders them), in order; none of the template's words.
        reply = server.reply_message(summary_payload(max_output_tokens=512))["content"]
        assert reply.startswith("user: Speaker") and "Summary:" not in reply and "<conversation>" not in reply
    finally:
        server.stop()


def test_a_question_is_still_answered_extractively() -> None:
    server = OpenAITestServer()
    try:
        payload = {"messages": [{"role": "system", "content": "Answer from the meeting."},
                                *({"role": "user", "content": t} for t in TURNS),
                                {"role": "user", "content": "What is the budget for item 7?"}], "max_tokens": 64}
        assert not is_summary_request(payload["messages"])
        assert "item 7 is 70 euros" in server.reply_message(payload)["content"]
    finally:
        server.stop()
