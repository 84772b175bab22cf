"""A client that rewrites its own history (as aider does) never pays more through a summarising arm
than it would have sent itself: a summary waits until the savings cover what the last one cost.
"""

from __future__ import annotations

import io
from typing import Any

from agentlab.serve.__main__ import report_main as main
from agentlab.serve.budget import TenantBudget
from agentlab.testing.rewriting_client import self_summarising_client


def _totals(server: Any) -> tuple[int, int, int, Any]:
    calls = server.calls()
    answers = calls[calls["purpose"] == "answer"].reset_index(drop=True)
    summaries = calls[calls["purpose"] == "summary"]
    spent = int((summaries["usage_prompt_tokens"] + summaries["usage_completion_tokens"]).sum())
    return int(answers["client_prompt_tokens"].sum()), int(answers["upstream_prompt_tokens"].sum()), spent, answers


def test_a_self_summarising_client_pays_no_more_through_the_summary_arm(upstream, proxy) -> None:
    server = proxy("summary", context_window=8192)
    self_summarising_client(server.base_url)
    client, sent, spent, answers = _totals(server)
    assert len(answers) == 8 and spent > 0
    assert sent + spent <= client, (sent, spent, client)
    # The summary that could not pay for itself waited, and the rows say so.
    assert answers["arm_note"].notna().any()
    assert answers["arm_note"].dropna().str.contains("summary waits").all()
    # Its rewrites (turns 5 and 7) carry the conversation on; the summary there could save nothing.
    assert list(answers["key_source"]) == ["new", "prefix", "prefix", "prefix", "rewrite", "prefix", "rewrite", "prefix"]
    assert answers["conversation_id"].nunique() == 1
    assert answers.loc[[4, 6], "arm_note"].str.startswith("client rewrite").all()
    out = io.StringIO()
    assert main(["--url", server.base_url], out) == 0
    assert "passed on the summary they had instead of a new one" in out.getvalue()
    assert "2 calls followed a client's rewrite of its own history" in out.getvalue()
    # Without the budget every summary is made: more summary calls, and the summary made before a
    # rewrite covers the turns the client kept, so it is carried across it and used at once.
    other = proxy("summary", context_window=8192, summary_budget=False)
    self_summarising_client(other.base_url)
    _, _, spent_b, answers_b = _totals(other)
    assert spent_b > spent
    carried = answers_b.loc[[4, 6]]
    assert (carried["key_source"] == "rewrite").all() and (carried["summary_reused_events"] > 0).all()
    assert (carried["upstream_prompt_tokens"] < carried["client_prompt_tokens"] / 2).all()


def test_the_first_summary_is_made_and_a_later_one_once_the_savings_cover_the_last() -> None:
    budget = TenantBudget()
    assert budget.may_summarize()  # the first: an investment
    budget.spent = budget.last_cost = 4000
    budget.saved = 6000
    assert not budget.may_summarize()  # 2,000 net, under the last summary's 4,000
    budget.saved = 8000
    assert budget.may_summarize()
    assert "cost 4000 tokens" in budget.note()


def _files_after_history_client(base_url: str, turns: int = 6) -> None:
    """A client shaped like aider: its files block sits between the history and the new question, so
    every request rewrites the previous one's tip (the block moves after the answer)."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
    system = {"role": "system", "content": "You are a coding assistant."}
    files = [{"role": "user", "content": "These are the files: app.py, views.py."}, {"role": "assistant", "content": "Ok."}]
    history: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        question = {"role": "user", "content": f"Turn {turn}: explain this log.\n" + " ".join(
            f"Line {i} of log {turn}: handler_{turn}_{i} answered 200 in {i * 3} ms." for i in range(80))}
        answer = client.chat.completions.create(model="test-model", messages=[system, *history, *files, question])  # type: ignore[arg-type]
        history += [question, {"role": "assistant", "content": answer.choices[0].message.content}]


def test_a_client_that_rewrites_its_tip_every_call_gets_a_first_summary_it_can_reuse(upstream, proxy) -> None:
    server = proxy("summary", context_window=8192)
    _files_after_history_client(server.base_url)
    client, sent, spent, answers = _totals(server)
    assert (answers["ledger_mode"].iloc[1:] == "branch").all()  # every turn moves the files block
    # The first summary waited for the second call (it then knew what the client rewrites and
    # stopped before it), so it was carried into the later turns' sessions instead of being lost.
    assert (answers["summary_reused_events"].iloc[3:] > 0).all(), answers["summary_reused_events"]
    assert spent > 0 and sent + spent <= client, (sent, spent, client)
