"""SWE-agent's LastNObservations on hand-made histories (worked by hand from the source @ 3ea751c0)."""

from __future__ import annotations

import pytest

from agentlab.events import Message, ToolCall
from agentlab.policies import POLICIES, mechanism
from agentlab.policies.swe_agent_masking import SweAgentMaskingPolicy, mask_observations, omitted_indices


def _history(n_obs: int) -> list[Message]:
    out = [Message.user("ISSUE: the instance template\nsecond line")]
    for k in range(n_obs):
        out.append(Message.assistant(f"thought {k}", (ToolCall(f"c{k}", "bash", '{"command": "ls"}'),)))
        out.append(Message.tool(f"c{k}", "bash", "\n".join(f"line {j}" for j in range(k + 1))))
    return out


def test_keeps_the_last_n_observations_and_the_instance_template() -> None:
    history = _history(5)  # observations: template + 5 outputs = 6
    outcome = mask_observations(history, SweAgentMaskingPolicy(n=3))
    # last_removed = 6 - 3 = 3: observation positions 1 and 2 (the first two outputs) are elided.
    assert omitted_indices(history, SweAgentMaskingPolicy(n=3)) == [2, 4]
    shown = list(outcome.messages)
    assert shown[0] == history[0]  # the template is never masked
    assert shown[2].content == "Old environment output: (1 lines omitted)"
    assert shown[4].content == "Old environment output: (2 lines omitted)"
    assert shown[6:] == history[6:] and shown[1] == history[1] and shown[3] == history[3]  # actions untouched
    assert shown[2].role == "tool" and shown[2].tool_call_id == "c0"
    assert outcome.fired


def test_nothing_masked_within_n_and_polling_steps_the_cut() -> None:
    history = _history(9)  # 10 observations
    assert mask_observations(history, SweAgentMaskingPolicy()).messages == tuple(history)  # n = 10
    # polling 4: last_removed = (10 // 4) * 4 - 3 = 5 -> observations 1..4 masked.
    assert len(omitted_indices(history, SweAgentMaskingPolicy(n=3, polling=4))) == 4
    assert len(omitted_indices(history, SweAgentMaskingPolicy(n=3))) == 6


def test_registered_as_a_peer_with_the_papers_n() -> None:
    assert "swe_agent_masking" in POLICIES
    assert mechanism("swe_agent_masking").policy == SweAgentMaskingPolicy(n=10, polling=1)
    with pytest.raises(ValueError, match="positive"):
        SweAgentMaskingPolicy(n=0)
