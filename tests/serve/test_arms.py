"""The arms: summary (made upstream), recall run by the server, and the send check's fallback."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import openai
import pytest
from serve_helpers import SEARCH_TOOL

from agentlab.core.mechanism import ContextMechanism
from agentlab.model.tokens import count_text
from agentlab.serve import arms, savings_df, serve_exchanges_df
from agentlab.serve.wire import pairing_problem
from agentlab.testing.openai_server import prompt_tokens

SYSTEM = {"role": "system", "content": "You answer questions about the company's offices."}
FACTS = [
    "The Lisbon office is by the river and has 42 people.",
    "The Porto office opened in 1931 next to the old bridge.",
    "The Faro office closes every August for the summer.",
    "The Braga office hosts the data team and the archive.",
]


def _client(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)


def test_every_arm_builds_its_mechanisms() -> None:
    from agentlab.compaction import CompactionPolicy
    from agentlab.recall import RecallPolicy
    from agentlab.summary import SummaryPolicy

    assert arms.arm_names()[:3] == ["long_context", "summary", "summary+recall"]
    for baseline in ("long_context", "passthrough"):  # the bench's name, and the proxy's older one
        assert arms.get_arm(baseline).mechanisms() == [] and not arms.get_arm(baseline).rewrites
        assert arms.get_arm(baseline).name == "long_context"
    (policy,) = arms.get_arm("compaction").mechanisms()
    assert isinstance(policy, CompactionPolicy) and policy.enabled
    assert [type(m) for m in arms.get_arm("summary+recall").mechanisms()] == [SummaryPolicy, RecallPolicy]
    with pytest.raises(ValueError, match="known arms: long_context, summary, summary\\+recall, .*compaction"):
        arms.get_arm("nope")


def test_the_harness_arms_are_proxy_arms_too() -> None:
    import agentlab.policies.arms as registry

    names = arms.arm_names()
    assert names[:3] == ["long_context", *registry.SERVE_ARMS]
    assert set(registry.generic_names()) <= set(names)  # peer policies, rolling_summary, <lossy>+recall
    for name in ("rolling_summary", "codex_compaction", "inspect_trim+recall"):
        arm = arms.get_arm(name)
        assert arm.rewrites
        assert [m.describe() for m in arm.mechanisms()] == [
            m.describe() for m in registry.generic_arm(name).mechanisms(None, None)]
    with pytest.raises(ValueError, match="known arms: .*codex_compaction.*inspect_trim\\+recall"):
        arms.get_arm("codex_compaction+nope")


def test_starting_a_proxy_does_not_load_the_harness() -> None:
    import subprocess
    import sys

    code = ("import sys; from agentlab.serve import ServeConfig; from agentlab.serve.server import ServeApp; "
            "import agentlab.serve.proxy; ServeConfig(upstream='http://127.0.0.1:9/v1', arm='long_context').check(); "
            "print(sorted(m for m in sys.modules if m.startswith('agentlab.bench') or m == 'pandas'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_harness_arm_projects_the_proxys_requests(upstream, proxy) -> None:
    server = proxy("inspect_trim")
    client = _client(server)
    messages: list[dict[str, Any]] = [SYSTEM]
    for turn in range(3):
        messages.append({"role": "user", "content": f"Question {turn}: where is Lisbon?"})
        answer = client.chat.completions.create(model="test-model", messages=messages)
        messages.append({"role": "assistant", "content": answer.choices[0].message.content})
    rows = server.calls()
    assert list(rows["arm"].unique()) == ["inspect_trim"] and (rows["status"] == 200).all()
    assert rows["check_error"].isna().all()  # projected by the arm and sent, not the unrewritten fallback
    for body in upstream.received:
        assert pairing_problem(body["messages"]) is None


def test_an_unknown_arm_is_refused_with_the_known_ones(tmp_path, upstream, proxy, capsys) -> None:
    import httpx

    from agentlab.serve.__main__ import main

    assert main(["--upstream", upstream.base_url, "--arm", "nope", "--db", str(tmp_path / "x.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown arm 'nope'; known arms: long_context, summary") and "rolling_summary" in err
    server = proxy("passthrough")
    body = {"model": "test-model", "messages": [SYSTEM, {"role": "user", "content": "Where is Lisbon?"}]}
    refused = httpx.post(server.base_url + "/chat/completions", json=body, headers={"x-agentlab-arm": "nope"})
    assert refused.status_code == 400
    assert "known arms: long_context" in refused.json()["error"]["message"]
    assert refused.json()["error"]["param"] == "x-agentlab-arm"
    # One call under another arm than the server's: the header chooses it, the row and the answer say so.
    chosen = httpx.post(server.base_url + "/chat/completions", json=body, headers={"x-agentlab-arm": "compaction"})
    assert chosen.status_code == 200 and chosen.headers["x-agentlab-arm"] == "compaction"
    rows = server.calls()
    assert list(rows["arm"]) == ["compaction"] and len(upstream.received) == 1  # the refused call stored nothing


def test_summary_arm_replaces_old_turns_with_an_upstream_summary(upstream, proxy) -> None:
    server = proxy("summary", summary_budget=False)  # the mechanics: every summary the policy asks for
    client = _client(server)
    messages: list[dict[str, Any]] = [SYSTEM]
    for fact in FACTS:
        messages.append({"role": "user", "content": f"{fact} Please remember that."})
        answer = client.chat.completions.create(model="test-model", messages=messages).choices[0].message.content
        assert answer == upstream.reply_message(upstream.received[-1])["content"]
        messages.append({"role": "assistant", "content": answer})
        server.settle()  # the summary is written after the answer; the next turn waits for it anyway
    # The summariser's calls are the upstream's too (its own prompt, not the client's system message).
    summary_calls = [b for b in upstream.received if not b["messages"][0]["content"].startswith(SYSTEM["content"])]
    answer_calls = [b for b in upstream.received if b not in summary_calls]
    assert len(summary_calls) == 2 and len(answer_calls) == 4  # more than three new events: after turns 2 and 4
    last = answer_calls[-1]["messages"]
    # The last answer call carries the summary in its system message, and the summarised turns are gone.
    assert last[0]["content"].startswith(SYSTEM["content"]) and "summary" in last[0]["content"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user"]
    assert not any(FACTS[0] in m["content"] for m in last[1:])
    rows = server.calls()
    calls = rows[rows["purpose"] == "answer"]
    assert list(calls["upstream_messages"]) == [2, 4, 2, 4]
    assert calls.iloc[-1]["upstream_prompt_tokens"] < calls.iloc[-1]["client_prompt_tokens"]
    # The summariser's calls are in the call log too, so the savings can be set against their cost.
    summary_rows = rows[rows["purpose"] == "summary"]
    assert len(summary_rows) == 2 and (summary_rows["usage_prompt_tokens"] > 0).all()
    assert list(summary_rows["usage_prompt_tokens"]) == [
        prompt_tokens(b["messages"]) for b in summary_calls]
    table = savings_df(server)
    assert table.iloc[0]["summary_tokens"] == (summary_rows["usage_prompt_tokens"]
                                               + summary_rows["usage_completion_tokens"]).sum()
    assert table.iloc[0]["calls"] == 4


def test_recall_runs_on_the_server_and_never_reaches_the_client(upstream, proxy) -> None:
    server = proxy("summary+recall")
    client = _client(server)
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "What do you know about Lisbon?"}]
    recall_rounds: list[dict[str, Any]] = []
    for stream in (False, True):
        before = len(upstream.received)
        if stream:
            chunks = list(client.chat.completions.create(model="test-model", messages=messages, stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
            assert chunks[-1].choices[0].finish_reason == "stop"
        else:
            completion = client.chat.completions.create(model="test-model", messages=messages)
            assert completion.choices[0].message.tool_calls is None
            assert completion.choices[0].finish_reason == "stop"
            text = completion.choices[0].message.content
        sent = upstream.received[before:]
        recall_rounds.append(sent[1])
        # The test server searches with the first search tool offered: the arm's session_search.
        assert [t["function"]["name"] for t in sent[0]["tools"]] == ["session_search", "session_load"]
        assert sent[0]["parallel_tool_calls"] is False
        assert len(sent) == 2 and sent[1]["messages"][-1]["role"] == "tool"
        assert sent[1]["messages"][-2]["tool_calls"][0]["function"]["name"] == "session_search"
        assert text == upstream.reply_message(sent[1])["content"]
        for body in sent:
            assert pairing_problem(body["messages"]) is None
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "And about Porto?"}]
    calls = server.calls()
    calls = calls[calls["purpose"] == "answer"]
    assert list(calls["recall_rounds"]) == [1, 1] and list(calls["upstream_calls"]) == [2, 2]
    # The ledger holds what the client saw: no recall exchange in it.
    ledger = server.ledger(calls.iloc[0]["conversation_id"])
    assert all(not (e.message and e.message.tool_calls) for e in ledger)
    # The exchanges are in serve_exchanges, one per server-run tool call, with what went upstream.
    exchanges = serve_exchanges_df(server)
    assert list(exchanges["call_id"]) == list(calls["call_id"]) and list(exchanges["round"]) == [1, 1]
    assert list(exchanges["tool"]) == ["session_search", "session_search"] and exchanges["error"].isna().all()
    for (_, x), body in zip(exchanges.iterrows(), recall_rounds, strict=True):
        call, result = body["messages"][-2]["tool_calls"][0], body["messages"][-1]
        assert (x["tool_call_id"], x["arguments"]) == (call["id"], call["function"]["arguments"])
        assert x["result"] == result["content"] and x["result_tokens"] == count_text(result["content"]) > 0
    table = savings_df(server)
    assert list(table["recall_exchanges"]) == [2]
    assert list(table["recall_tokens"]) == [int(exchanges["result_tokens"].sum())]


def test_client_tools_win_over_recall_and_are_returned(upstream, proxy) -> None:
    server = proxy("summary+recall")
    completion = _client(server).chat.completions.create(
        model="test-model", messages=[SYSTEM, {"role": "user", "content": "Find Lisbon in the docs."}],
        tools=[SEARCH_TOOL])
    # The client's own search tool comes first, so the model calls it: it goes to the client.
    assert [c.function.name for c in completion.choices[0].message.tool_calls] == ["search_docs"]
    assert [t["function"]["name"] for t in upstream.received[-1]["tools"]] == [
        "search_docs", "session_search", "session_load"]


class _BreakPairs(ContextMechanism):
    """A faulty mechanism: drops every tool result from the finished request."""

    async def before_request(self, inv: Any, pending: Any) -> Any:
        request = pending.request
        return replace(request, messages=[m for m in request.messages if m.role != "tool"]), pending.draft


def test_a_request_failing_the_check_goes_out_unrewritten(upstream, proxy, monkeypatch) -> None:
    import agentlab.policies.arms as registry

    monkeypatch.setitem(registry.SERVE_ARMS, "broken",
                        registry.Arm("broken", "lossy", lambda settings, model: [_BreakPairs()]))
    server = proxy("broken")
    call = {"id": "call_1", "type": "function", "function": {"name": "search_docs", "arguments": '{"query": "x"}'}}
    messages = [SYSTEM, {"role": "user", "content": "Where is Lisbon?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Lisbon is by the river."}]
    answer = _client(server).chat.completions.create(model="test-model", messages=messages, tools=[SEARCH_TOOL])
    assert answer.choices[0].message.content
    assert upstream.received[-1]["messages"] == messages  # the client's own request, not the broken one
    row = server.calls().iloc[-1]
    assert "call_1" in row["check_error"] and row["status"] == 200


def test_summaries_go_upstream_with_the_callers_key(tmp_path) -> None:
    from agentlab.serve import start_server
    from agentlab.testing.openai_server import OpenAITestServer

    with OpenAITestServer(api_key="sk-upstream", record_requests=True) as keyed, \
            start_server(upstream=keyed.base_url, arm="summary", db=str(tmp_path / "k.duckdb")) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-upstream", max_retries=0)
        messages: list[dict[str, Any]] = [SYSTEM]
        for fact in FACTS[:2]:
            messages.append({"role": "user", "content": fact})
            messages.append({"role": "assistant", "content": client.chat.completions.create(
                model="test-model", messages=messages).choices[0].message.content})
        server.settle()
        summaries = [b for b in keyed.received if not b["messages"][0]["content"].startswith(SYSTEM["content"])]
        assert len(summaries) == 1 and keyed.stats.requests["POST /v1/chat/completions"] == 3


def test_fields_agentlab_cannot_hold_reach_the_upstream_unchanged(upstream, proxy) -> None:
    server = proxy("compaction")
    parts = {"role": "user", "content": [{"type": "text", "text": "Where is Lisbon?"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}
    thinking = {"role": "assistant", "content": "By the river.", "reasoning_content": "the docs say so"}
    messages = [SYSTEM, parts, thinking, {"role": "user", "content": "Sure?", "name": "ana"}]
    _client(server).chat.completions.create(model="test-model", messages=messages)
    sent = upstream.received[-1]["messages"]
    assert sent[1] == parts and sent[2] == thinking and sent[3] == messages[3]


def _readme_policy() -> str:
    """The "Adding a policy" module of docs/adding-a-policy.md, verbatim."""
    from pathlib import Path

    section = (Path(__file__).resolve().parents[2] / "docs" / "adding-a-policy.md").read_text(encoding="utf-8")
    return section[section.index("```python\n") + len("```python\n"):section.index("\n```\n")]


def test_the_readme_policy_arm_is_served_by_the_proxy(tmp_path, upstream) -> None:
    from agentlab.testing.served import served_proxy

    (tmp_path / "my_policy.py").write_text(_readme_policy(), encoding="utf-8")
    env = {"AGENTLAB_EXTENSIONS": str(tmp_path / "my_policy.py")}
    with served_proxy(upstream.base_url, "keep_last", tmp_path / "serve.duckdb", env=env) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
        messages: list[dict[str, Any]] = [SYSTEM]
        for turn in range(3):
            messages.append({"role": "user", "content": f"Question {turn}: {FACTS[turn]}"})
            raw = client.chat.completions.with_raw_response.create(model="test-model", messages=messages)  # type: ignore[arg-type]
            assert raw.headers["x-agentlab-arm"] == "keep_last"
            messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
        # The arm kept the last two history events and the question: the last request went up shorter.
        sent = upstream.received[-1]["messages"]
        assert len(sent) < len(messages) - 1 and sent[-1] == messages[-2]


def test_an_extension_that_cannot_be_imported_is_one_error_line(tmp_path, upstream) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "AGENTLAB_EXTENSIONS": "no_such_policy_module"}
    done = subprocess.run([sys.executable, "-m", "agentlab.serve", "--upstream", upstream.base_url, "--arm",
                           "keep_last", "--port", "0", "--db", str(tmp_path / "x.duckdb")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no_such_policy_module" in lines[0], done.stderr
