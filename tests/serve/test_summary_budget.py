"""A client that rewrites its own history (as aider does) never pays more through a summarising arm
than it would have sent itself: a summary waits until the savings cover what the last one cost.
"""

from __future__ import annotations

import io
from typing import Any

import openai

from agentlab.serve.__main__ import report_main as main
from agentlab.serve.budget import TenantBudget

SYSTEM = {"role": "system", "content": "You are a coding assistant. Answer about the repository."}


def _file(turn: int) -> str:
    return " ".join(f"Line {i} of file_{turn}.py: def handler_{turn}_{i}(request): return render(request, 'p{i}.html')"
                    for i in range(60))


def rewriting_client(base_url: str, turns: int = 8) -> None:
    """``turns`` turns; before turns 5 and 7 the client replaces its oldest turns with its own summary."""
    client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
    history: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        if turn in (5, 7):
            history = [{"role": "user", "content": f"I spoke to you previously about a number of things: the "
                                                   f"handlers of files 1 to {turn - 2}."},
                       {"role": "assistant", "content": "Ok."}, *history[-4:]]
        messages = [SYSTEM, *history, {"role": "user", "content": f"Turn {turn}: explain this file.\n{_file(turn)}"}]
        answer = client.chat.completions.create(model="test-model", messages=messages)
        history += [messages[-1], {"role": "assistant", "content": answer.choices[0].message.content}]


def _totals(server: Any) -> tuple[int, int, int, Any]:
    calls = server.calls()
    answers = calls[calls["purpose"] == "answer"].reset_index(drop=True)
    summaries = calls[calls["purpose"] == "summary"]
    spent = int((summaries["usage_prompt_tokens"] + summaries["usage_completion_tokens"]).sum())
    return int(answers["client_prompt_tokens"].sum()), int(answers["upstream_prompt_tokens"].sum()), spent, answers


def test_a_self_summarising_client_pays_no_more_through_the_summary_arm(upstream, proxy) -> None:
    server = proxy("summary", context_window=8192)
    rewriting_client(server.base_url)
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
    rewriting_client(other.base_url)
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
