"""A client that rewrites the end of its history each turn still gets a summary it can reuse.

The scripted coding agent below puts a file-context block after the history and appends a
``<reminder>`` to its newest question; the next turn it strips that reminder and moves the block
after the new question. Every turn is a branch of the conversation (a new session seeded with
the whole request); the summary of the prefix the turns share is carried into each new session.
"""

from __future__ import annotations

from typing import Any

import openai
from serve_helpers import SEARCH_TOOL

from agentlab.events import Event, Message
from agentlab.serve.carry import MAX_HOLDBACK, carry_summaries, held_back, rewritten_users
from agentlab.session.base import Session, Summary, SummaryBoundary

SYSTEM = {"role": "system", "content": "You answer questions about the company's offices."}
REMINDER = "\n<reminder>Answer from the files; keep it short.</reminder>"
LISTING = "\n".join(f"src/offices/office_{i:02d}.py  {120 + 7 * i} lines" for i in range(40))
TURNS = 5


def tool_result(turn: int) -> str:
    """The search result of one turn (about 2,400 tokens, distinct per turn)."""
    return " ".join(f"Record {i} of batch {turn}: the Lisbon office opened in {1900 + i} and employs {i * 3} people."
                    for i in range(160))


def rewriting_conversation(server: Any, key: str = "k") -> None:
    """``TURNS`` turns of the rewriting client, each a question, the search the model asks for, the answer."""
    client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0,
                           default_headers={"X-Session-ID": "rewriter-1"})
    history: list[dict[str, Any]] = [SYSTEM]
    for turn in range(1, TURNS + 1):
        question = f"Question {turn}: what do the Lisbon records say?"
        files = {"role": "user", "content": f"<file-context for question {turn}>\n{LISTING}\n</file-context>"}
        messages = [*history, {"role": "user", "content": question + REMINDER}, files]
        call = client.chat.completions.create(model="test-model", messages=messages, tools=[SEARCH_TOOL])
        asked = call.choices[0].message
        result = {"role": "tool", "tool_call_id": asked.tool_calls[0].id, "content": tool_result(turn)}
        messages += [asked.model_dump(exclude_none=True), result]
        answer = client.chat.completions.create(model="test-model", messages=messages, tools=[SEARCH_TOOL])
        # The next turn: this question without its reminder, the file block moved after the history.
        history += [{"role": "user", "content": question}, asked.model_dump(exclude_none=True), result,
                    {"role": "assistant", "content": answer.choices[0].message.content}]


def _answer_rows(server: Any) -> Any:
    rows = server.calls()
    return rows[rows["purpose"] == "answer"].reset_index(drop=True)


def test_a_rewriting_client_reuses_the_summary_of_the_prefix_it_did_not_change(upstream, proxy) -> None:
    server = proxy("summary", summary_budget=False)  # the mechanics of carrying: every summary is made
    rewriting_conversation(server)
    calls = _answer_rows(server)
    assert len(calls) == 2 * TURNS and (calls["status"] == 200).all() and calls["check_error"].isna().all()
    assert calls["conversation_id"].nunique() == 1
    # Each turn branches (the client changed its previous message); its second call appends.
    assert list(calls["ledger_mode"]) == ["append", "append"] + ["branch", "append"] * (TURNS - 1)
    assert calls["session_id"].nunique() == TURNS
    # From turn 3 on every call sends upstream less than the client sent: the branch found the
    # summary of the turns it shares with the previous session.
    later = calls.iloc[4:]
    assert (later["upstream_prompt_tokens"] < later["client_prompt_tokens"]).all(), later[
        ["ledger_mode", "client_prompt_tokens", "upstream_prompt_tokens"]]
    branches = calls[calls["ledger_mode"] == "branch"]
    assert list(branches["summary_reused_events"]) == [0, 5, 9, 13]  # nothing to carry at turn 2
    # The summariser read each turn's search result once: an unchanged prefix is not summarised
    # again. (Turn 1's also went into the first session's summary, made to its tip before the
    # client had shown that it rewrites.)
    summary_calls = [b for b in upstream.received if not b["messages"][0]["content"].startswith(SYSTEM["content"])]
    texts = ["\n".join(m.get("content") or "" for m in b["messages"]) for b in summary_calls]
    readings = {turn: sum(tool_result(turn) in t for t in texts) for turn in range(1, TURNS + 1)}
    assert readings == {1: 2, 2: 1, 3: 1, 4: 1, 5: 0}, readings
    rows = server.calls()
    assert (rows["purpose"] == "summary").sum() == len(summary_calls) == TURNS
    # The carried summary is stored with the new session, its boundary one of that session's events.
    tenant, last_session = calls.iloc[-1]["tenant"], calls.iloc[-1]["session_id"]
    stored = server.run(server.app.sessions.get_session("agentlab-serve", tenant, last_session))
    boundary = stored.summaries[""].boundary
    assert stored.event_index(boundary.last_event_id) >= 0
    # The sessions left behind are as they were: the first still ends with its reminder'd turn.
    first = server.run(server.app.sessions.get_session("agentlab-serve", tenant, calls.iloc[0]["session_id"]))
    assert first.events[1].text.endswith("</reminder>") and len(first.events) == 6
    # Another key sending the same conversation under the same id is another tenant: it reuses
    # nothing of the first one's and summarises its own turns (the same readings again).
    rewriting_conversation(server, key="other")
    both = _answer_rows(server)
    other = both[both["tenant"] != tenant]
    assert len(other) == 2 * TURNS and other["tenant"].nunique() == 1  # its sessions are under its own tenant
    assert list(other[other["ledger_mode"] == "branch"]["summary_reused_events"]) == [0, 5, 9, 13]
    summary_calls = [b for b in upstream.received if not b["messages"][0]["content"].startswith(SYSTEM["content"])]
    texts = ["\n".join(m.get("content") or "" for m in b["messages"]) for b in summary_calls[TURNS:]]
    assert {turn: sum(tool_result(turn) in t for t in texts) for turn in range(1, TURNS + 1)} == readings


def test_a_rewriting_client_through_a_clearing_arm_sends_less_upstream(upstream, proxy) -> None:
    server = proxy("compaction")  # clears old tool results over 1,024 tokens: a projection, no per-session state
    rewriting_conversation(server)
    calls = _answer_rows(server)
    assert list(calls["ledger_mode"]) == ["append", "append"] + ["branch", "append"] * (TURNS - 1)
    later = calls.iloc[4:]
    assert (later["upstream_prompt_tokens"] < later["client_prompt_tokens"]).all()
    assert (server.calls()["purpose"] == "answer").all()  # no summariser in this arm


def _event(role: str, text: str, chain: str) -> Event:
    message = {"user": Message.user, "system": Message.system}.get(role, Message.assistant)(text)
    return Event(author="client", choices=[message], metadata={"chain": chain})


def test_only_a_summary_inside_the_shared_prefix_is_carried() -> None:
    old = [_event("user", "q1", "h1"), _event("assistant", "a1", "h2"), _event("user", "q2 <reminder>", "h3")]
    new = [_event("user", "q1", "h1"), _event("assistant", "a1", "h2"), _event("user", "q2", "h3b")]
    inside = Summary("q1 was asked", 1.0, SummaryBoundary("", old[1].timestamp, old[1].id), ("lisbon",))
    carried = carry_summaries({"": inside}, old, new, shared=2)
    assert carried[""].boundary.last_event_id == new[1].id and carried[""].topics == ("lisbon",)
    assert carried[""].text == inside.text
    # Beyond the shared prefix (it covers the message the client changed): not carried.
    beyond = Summary("q2 too", 1.0, SummaryBoundary("", old[2].timestamp, old[2].id))
    assert carry_summaries({"": beyond}, old, new, shared=2) == {}
    # A boundary by time alone, or a chain that differs at that position, is never guessed at.
    by_time = Summary("old", 1.0, SummaryBoundary("", old[1].timestamp, ""))
    assert carry_summaries({"": by_time}, old, new, shared=2) == {}
    other = [_event("user", "q1", "h1"), _event("assistant", "a1", "x2")]
    assert carry_summaries({"": inside}, old, other, shared=2) == {}


def test_the_summariser_stops_before_what_the_client_rewrites() -> None:
    events = [_event("user", "q1", "1"), _event("assistant", "a1", "2"), _event("user", "q2", "3"),
              _event("user", "files", "4"), _event("assistant", "a2", "5")]
    session = Session(app_name="a", user_id="t", id="s", events=events)
    assert held_back(session, 0) is session
    assert [e.text for e in held_back(session, 2).events] == ["q1", "a1"]
    assert held_back(session, 9).events == []
    # Never before the boundary of a summary the session holds: the summariser then has nothing new.
    session.summaries[""] = Summary("s", 1.0, SummaryBoundary("", events[3].timestamp, events[3].id))
    assert len(held_back(session, 2).events) == 4
    # How much a branch rewrote: the user messages at or after where it left the ledger.
    assert rewritten_users(events, 2) == 2 and rewritten_users(events, 4) == 1
    deep = [_event("user", f"q{i}", str(i)) for i in range(MAX_HOLDBACK + 2)]
    assert rewritten_users(deep, 0) == 0  # an edit far back, not a rewriting habit: nothing held back


def test_a_rewrite_of_the_head_is_found_by_the_tail_it_keeps() -> None:
    from agentlab.serve.rewrites import TipIndex, kept_run

    tips = TipIndex(max_tips=2)
    tips.note("t", "c1", "q2", "a2")
    assert tips.find("t", ["sys", "my summary", "ok", "q2", "a2", "q3"]) == ("c1", 4)
    assert tips.find("other tenant", ["sys", "q2", "a2", "q3"]) is None
    assert tips.find("t", ["sys", "q2", "a2"]) is None  # nothing after the tip: not a next turn
    tips.note("t", "c1", "q3", "a3")  # the conversation moved on: its old tip no longer finds it
    assert tips.find("t", ["sys", "q2", "a2", "q9"]) is None
    tips.note("t", "c2", "x", "y")
    tips.note("t", "c3", "u", "v")  # bounded: the least recently answered goes
    assert tips.find("t", ["q3", "a3", "q4"]) is None and tips.find("t", ["u", "v", "w"]) == ("c3", 1)
    assert kept_run(["sys", "mine", "q2", "a2"], 3, ["sys", "q1", "a1", "q2", "a2"]) == 2


def test_a_summary_is_carried_across_a_rewrite_only_when_it_covers_the_dropped_part_and_pays() -> None:
    from agentlab.serve.rewrites import carry_across_rewrite

    old = [_event("system", "sys", "0"), _event("user", "q1", "1"), _event("assistant", "a1", "2"),
           _event("user", "q2", "3"), _event("assistant", "a2", "4")]
    new = [_event("system", "sys", "n0"), _event("user", "my summary of q1", "n1"),
           _event("assistant", "ok", "n2"), _event("user", "q2", "n3"), _event("assistant", "a2", "n4"),
           _event("user", "q3", "n5")]
    for e in [*old, *new]:
        e.token_count = 100
    # old[3:] (q2, a2) is new[3:5]; a summary through a2 covers the client's head and what it kept.
    to_tip = Summary("short", 1.0, SummaryBoundary("", old[4].timestamp, old[4].id))
    result = carry_across_rewrite({"": to_tip}, old, new, 3, 3, summary_tokens=lambda text: 50)
    assert result.summaries[""].boundary.last_event_id == new[4].id and result.covered == 5 and not result.note
    # One that ends before what the client dropped does not cover the client's own summary.
    early = Summary("s", 1.0, SummaryBoundary("", old[1].timestamp, old[1].id))
    result = carry_across_rewrite({"": early}, old, new, 3, 3, summary_tokens=lambda text: 50)
    assert result.summaries == {} and "before what the client kept" in result.note
    # One longer than what it would replace (the head and the kept part up to its boundary) saves nothing.
    result = carry_across_rewrite({"": to_tip}, old, new, 3, 3, summary_tokens=lambda text: 400)
    assert result.summaries == {} and "longer than what it would replace (400)" in result.note
    assert carry_across_rewrite({}, old, new, 3, 3).note.startswith("client rewrite")
