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
    assert answers["arm_note"].dropna().str.startswith("summary waits").all()
    out = io.StringIO()
    assert main(["--url", server.base_url], out) == 0
    assert "passed on the summary they had instead of a new one" in out.getvalue()
    # Without the budget, the same client pays more than it sent (what the budget prevents).
    other = proxy("summary", context_window=8192, summary_budget=False)
    self_summarising_client(other.base_url)
    client_b, sent_b, spent_b, _ = _totals(other)
    assert sent_b + spent_b > client_b


def test_the_first_summary_is_made_and_a_later_one_once_the_savings_cover_the_last() -> None:
    budget = TenantBudget()
    assert budget.may_summarize()  # the first: an investment
    budget.spent = budget.last_cost = 4000
    budget.saved = 6000
    assert not budget.may_summarize()  # 2,000 net, under the last summary's 4,000
    budget.saved = 8000
    assert budget.may_summarize()
    assert "cost 4000 tokens" in budget.note()
