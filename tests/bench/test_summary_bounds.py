"""Summarising arms with no model: bounds and summariser cost on hand-made trajectories, and the paper's arm."""

from __future__ import annotations

import asyncio
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agentlab.bench.datasets.trajectories import Trajectory, parse_swe_history, parse_tau_entry
from agentlab.bench.retention.summary_bounds import PlaceholderSummariser, markers, placeholder_text
from agentlab.bench.retention.trajectories import measure_trajectory, step_requests
from agentlab.core.mechanism import RequestDraft
from agentlab.events import Message, Usage
from agentlab.model import tokens
from agentlab.model.base import ModelInfo, ModelRequest, ModelResponse
from agentlab.policies import mechanism
from agentlab.policies._base import Outcome, PeerMechanism
from agentlab.policies.arms import Arm
from agentlab.policies.swe_agent_summary import SweAgentSummaryPolicy, split_turns
from agentlab.policy_json import PolicyJSON

DATA = Path(os.environ.get("AGENTLAB_DATA_DIR", "/nonexistent")) / "agent_trajectories"
N = 40
SUMMARY_SYSTEM = "Summarise this."


@dataclass(frozen=True)
class FoldFirstPolicy(PolicyJSON):
    """No field: the toy's behaviour is fixed."""


class FoldFirst(PeerMechanism):
    """Once two tool results are in the request, the first action and its result become one summary."""

    policy_name: ClassVar[str] = "fold_first"
    policy_class: ClassVar[type[Any]] = FoldFirstPolicy
    needs_model: ClassVar[str] = "folds the first action into a model-written summary"

    async def decide(self, inv: Any, messages: list[Message], draft: RequestDraft) -> Outcome:
        """[user, summary, rest] once two results are shown; unchanged before."""
        if sum(1 for m in messages if m.role == "tool") < 2:
            return Outcome.unchanged(messages)
        summary = await self.summarizer_for(inv)([Message.system(SUMMARY_SYSTEM), *messages[1:3]])
        return Outcome((messages[0], Message.assistant(summary), *messages[3:]),
                       (0, None, *range(3, len(messages))), fired=True)


FOLD_ARM = Arm("fold_first", "lossy", lambda settings, model: [FoldFirst()], needs_model="toy summariser")


def _call(cid: str, name: str, args: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def _two_lookups() -> Trajectory:
    """Two lookups, then a reply that uses one value of each result: 2 supports, both at the last step."""
    return parse_tau_entry({"task_id": "fold", "reward": 1.0, "trial": 0, "traj": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Look both up."},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "get_a", '{"which": "first"}')]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_a", "content": '{"code": "ALPHA-1"}'},
        {"role": "assistant", "content": None, "tool_calls": [_call("c2", "get_b", '{"which": "second"}')]},
        {"role": "tool", "tool_call_id": "c2", "name": "get_b", "content": '{"code": "BETA-2"}'},
        {"role": "assistant", "content": "ALPHA-1 and BETA-2 it is."},
    ]}, "hand-made")


def test_placeholder_text_has_the_stated_length_and_a_findable_marker() -> None:
    for n in (16, 40, 512):
        text = placeholder_text(7, n)
        assert tokens.count_text(text) == n and markers(text) == {7}
    with pytest.raises(ValueError, match="at least 16"):
        PlaceholderSummariser(8, 1000)


def test_hand_made_bounds_and_summariser_cost() -> None:
    traj = _two_lookups()
    row = asyncio.run(measure_trajectory(traj, FOLD_ARM, context_window=100_000, summary_tokens=N,
                                         cache_profile="none"))
    assert row.n_steps == 3 and row.n_supports == 2
    # The last request shows BETA-2; ALPHA-1 is only in what the summary covered.
    assert row.supported == row.supported_lo == 0.5 and row.supported_hi == 1.0
    assert row.hidden == ((5, "ALPHA-1"),) and row.summary_tokens == N
    # One call, made before the last step: the system line plus the first call and its result, and N tokens back.
    events = traj.events
    sent = [Message.system(SUMMARY_SYSTEM), events[1].message, events[2].message]
    assert row.summary_calls == 1 and row.summary_output_tokens == N
    assert row.summary_input_tokens == tokens.count_messages(sent)
    # Every request went through the cache profile: 3 step requests and the summariser's, tokens summed.
    assert row.cache is not None and row.cache.n_requests == 4
    assert row.cache.prompt_tokens == row.total_prompt_tokens + row.summary_input_tokens
    # The last step's request holds the summary at its stated length in place of the first action.
    last = tokens.count_messages([Message.system(traj.instruction), events[0].message,
                                  Message.assistant(placeholder_text(0, N)), events[3].message, events[4].message])
    assert row.final_prompt_tokens == last


class _Copying:
    """A summariser that keeps ALPHA-1 and nothing else: a real summary between the bounds."""

    info = ModelInfo("copying", 100_000)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(Message.assistant("The first lookup gave ALPHA-1."), Usage(), "copying")

    async def stream(self, request: ModelRequest) -> Any:  # pragma: no cover - not called
        raise NotImplementedError


def test_a_summary_that_keeps_some_values_lies_between_the_bounds() -> None:
    traj = _two_lookups()
    bounds = asyncio.run(measure_trajectory(traj, FOLD_ARM, context_window=100_000, summary_tokens=N))
    real = asyncio.run(measure_trajectory(traj, FOLD_ARM, context_window=100_000, model=_Copying()))
    assert bounds.supported_lo is not None and bounds.supported_hi is not None and real.supported is not None
    assert bounds.supported_lo < real.supported <= bounds.supported_hi
    assert real.summary_tokens is None and real.summary_calls == 0  # a model given: no placeholder, no bound


def test_a_non_summarising_arm_has_equal_bounds_and_no_summary_length() -> None:
    row = asyncio.run(measure_trajectory(_two_lookups(), Arm("masking", "lossy", lambda s, m: [
        mechanism("swe_agent_masking", n=1)]), context_window=100_000, summary_tokens=N))
    assert row.supported_lo == row.supported_hi == row.supported and row.summary_tokens is None
    assert row.summary_calls == 0


def _turns(n_turns: int) -> Trajectory:
    history: list[dict] = [{"role": "system", "content": "You fix bugs."},
                           {"role": "user", "content": "ISSUE: the parser fails"}]
    for j in range(1, n_turns + 1):
        history.append({"role": "assistant", "content": f"step {j}", "action": f"open file_{j:03d}.py"})
        history.append({"role": "user", "content": f"contents of file_{j:03d}.py: VALUE_{j:03d}"})
    instruction, events = parse_swe_history(history, "swe_agent/turns", "hand-made")
    return Trajectory("swe_agent/turns", "swe_agent", instruction, tuple(events))


def test_the_paper_arm_summarises_21_turns_once_31_wait_and_keeps_the_last_10() -> None:
    assert SweAgentSummaryPolicy() == SweAgentSummaryPolicy(n=21, keep_last_m_turns=10)
    traj = _turns(53)
    arm = Arm("paper", "lossy", lambda s, m: [mechanism("swe_agent_summary")], needs_model="the paper's summary")
    summariser = PlaceholderSummariser(N, 1 << 30)
    requests = asyncio.run(step_requests(traj, arm, context_window=1 << 30, model=summariser))
    # Turn j's action is ledger event 2j - 1 (the issue is event 0); its request holds j - 1 turns.
    # 31 waiting -> turn 32 (event 63); then 21 + 31 = 52 done -> turn 53 (event 105).
    assert [c.step for c in summariser.calls] == [63, 105]
    first, second = (c.messages[-1].content for c in summariser.calls)
    assert "<PROBLEM_STATEMENT>\nISSUE: the parser fails" in first
    assert "file_021.py" in first and "file_022.py" not in first and "<TURN-20>" in first
    assert "<PREVIOUS_CHECKPOINT>" in second and markers(second) == {0}
    assert "file_042.py" in second and "file_043.py" not in second and "file_021.py" not in second
    assert "VALUE_001" in summariser.calls[1].covered  # the previous checkpoint stands for what it covered
    by_step = {r.index: r.messages for r in requests}
    at_32 = [m for m in by_step[63] if m.role != "system"]
    assert at_32[0].content == "ISSUE: the parser fails"
    assert at_32[1].role == "assistant" and at_32[1].content.startswith("Checkpoint for the last 21 turns:\n")
    assert markers(at_32[1].content) == {0}
    _, kept = split_turns(at_32[2:])
    assert len(kept) == 10 and "file_022.py" in at_32[2].tool_calls[0].arguments
    at_31 = [m for m in by_step[61] if m.role != "system"]  # 30 turns waiting: nothing summarised yet
    assert len(at_31) == 1 + 2 * 30 and not any(markers(m.content) for m in at_31)


def test_retention_command_refuses_a_summary_length_it_cannot_use() -> None:
    from agentlab.bench.cli.main import main

    out = io.StringIO()
    assert main(["retention", "trajectories", "--summary-tokens", "4", "--no-store"], out=out) != 0
    assert main(["retention", "qmsum", "--summary-tokens", "600", "--no-store"], out=out) != 0


@pytest.mark.skipif(not DATA.is_dir(), reason="needs $AGENTLAB_DATA_DIR/agent_trajectories")
def test_bounds_bracket_on_recorded_swe_agent_trajectories() -> None:
    from agentlab.bench.datasets.trajectories import load_trajectories
    from agentlab.bench.retention.questions import retention_settings
    from agentlab.policies.arms import PEER_SUMMARISERS, get_arm

    trajectories = load_trajectories(("swe_agent",), allow_download=False).trajectories[:4]
    fired = 0
    for name in PEER_SUMMARISERS:
        for traj in trajectories:
            row = asyncio.run(measure_trajectory(traj, get_arm(name), context_window=4096, summary_tokens=256,
                                                 settings=retention_settings(None)))
            if row.supported is None:
                continue
            assert row.supported_hi is not None and row.supported <= row.supported_hi, (name, traj.traj_id)
            fired += row.summary_calls
    assert fired > 0
