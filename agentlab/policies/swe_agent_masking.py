"""SWE-agent's observation masking: every environment output but the last ``n`` becomes a one-line stub.

Source: ``SWE-agent/SWE-agent`` @ ``3ea751c087f32b16e039a2233dd6eefecef325d5``,
``sweagent/agent/history_processors.py``, class ``LastNObservations`` (config type
``last_n_observations``). "The Complexity Trap" (Lindenbauer et al., arXiv 2508.21433) runs it
with ``n = 10`` as its observation-masking policy; that is the default here.

What it does, per model call, over the whole history (no token trigger: it always applies):

* The *observations* are the history entries with ``message_type == "observation"`` that are not
  demonstrations: the first is the instance template (the task / issue), then every environment
  output returned after an action.
* With ``polling`` (default 1), ``last_removed = max(0, (len(observations) // polling) * polling - n)``;
  the observations at positions ``1 .. last_removed - 1`` are elided — so the first one (the
  instance template) is never masked, and the last ``n`` (up to ``n + polling - 1``) are kept.
* An elided observation keeps its place and its role; its content becomes
  ``Old environment output: (<k> lines omitted)`` where ``k`` is the number of lines of the
  original text (Python ``str.splitlines``). Actions (the agent's messages), the system prompt and
  the demonstrations are never masked.

Departures from the source, and why:

* agentlab's ledger has no ``message_type``: the observations are the tool results, and the first
  user message of the history stands for the instance template (the SWE-agent loader of
  :mod:`agentlab.bench.datasets.trajectories` makes the issue that message). Later user messages
  (tau-bench's customer turns) are not observations and are never masked — SWE-agent has no
  conversational user turns to compare with.
* Tags (``always_remove_output_for_tags`` / ``always_keep_output_for_tags``, set by the
  ``TagToolCallObservations`` processor) are not modelled: agentlab's events carry no tags.
* Image content is not counted (agentlab's messages are text), so the ``(<m> images omitted)``
  suffix never appears.
* SWE-agent's source is checked here by hand-worked examples (``tests/policies/test_swe_agent_masking.py``),
  not by running it: the ``sweagent`` package is not installed in this environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentlab.core.mechanism import COMPACT, RequestDraft, Stage
from agentlab.events import Message
from agentlab.policies._base import Outcome, PeerMechanism
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: The stub text of an elided observation, verbatim from the source.
PLACEHOLDER = "Old environment output: ({lines} lines omitted)"
#: "The Complexity Trap"'s setting (the source's class has no default).
DEFAULT_N = 10


@dataclass(frozen=True)
class SweAgentMaskingPolicy(PolicyJSON):
    """``LastNObservations``' fields (``n`` at the paper's 10; ``polling`` at the source's default 1)."""

    #: Observations kept verbatim, the latest ones (paper: 10).
    n: int = DEFAULT_N
    #: Steps between updates of the cut (source default 1: every call).
    polling: int = 1

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise ValueError("SweAgentMaskingPolicy.n must be a positive integer")
        if self.polling <= 0:
            raise ValueError("SweAgentMaskingPolicy.polling must be a positive integer")


def observation_indices(messages: Sequence[Message]) -> list[int]:
    """Positions of the observations: the first user message, then every tool result, in order."""
    out: list[int] = []
    first_user = next((i for i, m in enumerate(messages) if m.role == "user"), None)
    for i, m in enumerate(messages):
        if m.role == "tool" or i == first_user:
            out.append(i)
    return out


def omitted_indices(messages: Sequence[Message], policy: SweAgentMaskingPolicy) -> list[int]:
    """The positions ``_get_omit_indices`` elides: observations ``1 .. last_removed - 1``."""
    observations = observation_indices(messages)
    last_removed = max(0, (len(observations) // policy.polling) * policy.polling - policy.n)
    return observations[1:last_removed]


def mask_observations(messages: Sequence[Message], policy: SweAgentMaskingPolicy) -> Outcome:
    """``LastNObservations.__call__`` over ``messages``: the elided observations get the stub text."""
    omit = set(omitted_indices(messages, policy))
    if not omit:
        return Outcome.unchanged(messages)
    out = [m.with_content(PLACEHOLDER.format(lines=len(m.content.splitlines()))) if i in omit else m
           for i, m in enumerate(messages)]
    return Outcome(tuple(out), tuple(range(len(out))), fired=True)


class SweAgentMasking(PeerMechanism):
    """``LastNObservations`` at the compaction stage, stateless (it recomputes the cut every call)."""

    policy_name: ClassVar[str] = "swe_agent_masking"
    policy_class: ClassVar[type[Any]] = SweAgentMaskingPolicy
    source: ClassVar[str] = (
        "SWE-agent/SWE-agent@3ea751c0 sweagent/agent/history_processors.py LastNObservations (n = 10)")
    stage: ClassVar[Stage] = COMPACT
    policy: SweAgentMaskingPolicy

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """Mask all but the last ``n`` observations."""
        return mask_observations(messages, self.policy)


__all__ = ["PLACEHOLDER", "SweAgentMasking", "SweAgentMaskingPolicy", "mask_observations", "omitted_indices",
           "observation_indices"]
