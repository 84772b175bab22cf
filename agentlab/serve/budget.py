"""What a summarising arm spends against what it saves, per tenant: a summary is made only when it
can pay for itself.

A summary costs an upstream call (its prompt re-reads the span it covers, plus its answer); it
pays back on every later call that sends the summary instead of that span. A client that rewrites
its own history (drops old turns for its own summary, as aider does) leaves the proxy's summary
behind within a turn or two, so each new summary costs more than it ever saves. The rule: the
first summary of a tenant is made (an investment); every later one only once the tokens its
calls saved, less the tokens its summaries cost, cover what the last summary cost. Until then the
summary already made keeps being used and the call row's ``arm_note`` says a summary waited; for
a client whose rewrites leave nothing to save, the arm thus passes its requests through after the
first summary, and the totals stay within what the client sent plus nothing (or the one
investment).

No conversation is summarised after its first call (:data:`FIRST_SUMMARY_CALL`): until its
second request the proxy cannot tell whether the client rewrites the end of its history (aider
re-sends its files after the history every turn). A summary made at that tip would cover what
the client changes next and could never be carried (:mod:`agentlab.serve.carry`); made after the
second call, it stops before the part the client rewrote and is carried into the next turn.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The call of a conversation (counting those answered) from which the budget lets it be summarised.
FIRST_SUMMARY_CALL = 2


@dataclass
class TenantBudget:
    """One tenant's summary account, in prompt tokens (local estimates for savings, the upstream's usage for costs)."""

    #: Client prompt tokens minus upstream prompt tokens, over the calls of rewriting arms.
    saved: int = 0
    #: Prompt + completion tokens of the summaries made.
    spent: int = 0
    #: What the latest summary cost (0 before the first).
    last_cost: int = 0

    def may_summarize(self) -> bool:
        """Whether another summary can pay for itself (see the module docstring)."""
        return self.saved - self.spent >= self.last_cost

    def note(self) -> str:
        """The call row's note when a summary waits."""
        return (f"summary waits: this key's summaries cost {self.spent} tokens and its calls saved {self.saved}; "
                f"a new one is made once the savings cover the last one's {self.last_cost}")


class SummaryBudgets:
    """The :class:`TenantBudget` of each tenant (at most ``max_tenants``, least recently used dropped)."""

    def __init__(self, max_tenants: int = 10_000) -> None:
        self.max_tenants = max_tenants
        self._budgets: dict[str, TenantBudget] = {}

    def of(self, tenant: str) -> TenantBudget:
        """The tenant's account (made on first use)."""
        budget = self._budgets.pop(tenant, None) or TenantBudget()
        self._budgets[tenant] = budget  # most recently used last
        while len(self._budgets) > self.max_tenants:
            del self._budgets[next(iter(self._budgets))]
        return budget
