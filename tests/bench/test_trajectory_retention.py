"""The per-step support measure on hand-made trajectories (and long_context over the real ones)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import agentlab.policies.arms as arms_registry
from agentlab.bench.datasets.trajectories import Trajectory, parse_tau_entry
from agentlab.bench.retention.trajectories import (
    aggregate_trajectories,
    format_trajectory_table,
    measure_trajectory,
    step_requests,
)
from agentlab.policies import mechanism
from agentlab.policies.arms import Arm

DATA = Path(os.environ.get("AGENTLAB_DATA_DIR", "/nonexistent")) / "agent_trajectories"


def _call(cid: str, name: str, args: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def _hand_made() -> Trajectory:
    """Two lookups; the cancel call uses a value of the first result, the reply that value and one of the second."""
    return parse_tau_entry({"task_id": "t", "reward": 0.0, "trial": 0, "traj": [
        {"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": "Cancel my trip, user sam_1."},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "get_user", '{"user_id": "sam_1"}')]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_user",
         "content": '{"reservations": ["ZZ9QX1"], "padding": "' + "lorem ipsum " * 50 + '"}'},
        {"role": "assistant", "content": None, "tool_calls": [_call("c2", "get_flight", '{"flight": "HAT123"}')]},
        {"role": "tool", "tool_call_id": "c2", "name": "get_flight", "content": '{"gate": "B42X", "status": "on time"}'},
        {"role": "assistant", "content": None,
         "tool_calls": [_call("c3", "cancel_reservation", '{"reservation_id": "ZZ9QX1"}')]},
        {"role": "tool", "tool_call_id": "c3", "name": "cancel_reservation", "content": '{"ok": "done"}'},
        {"role": "assistant", "content": "Cancelled ZZ9QX1; your gate was B42X."},
    ]}, "hand-made")


def _masking(n: int) -> Arm:
    return Arm(f"swe_agent_masking_n{n}", "lossy", lambda settings, model: [mechanism("swe_agent_masking", n=n)])


def test_long_context_sees_every_support() -> None:
    row = asyncio.run(measure_trajectory(_hand_made(), arms_registry.full_history_arm("long_context"),
                                         context_window=8192))
    assert row.n_steps == 4 and row.n_supports == 3 and row.n_support_steps == 2
    assert row.supported == 1.0 and row.refetch_steps == 0 and row.refetch_tokens == 0 and row.hidden == ()
    assert row.recoverable is None and row.recorded_reward == 0.0
    assert row.peak_prompt_tokens >= row.final_prompt_tokens > 0


def test_masking_clears_a_support_and_counts_the_refetch() -> None:
    traj = _hand_made()
    # n = 1: before the cancel call (event 5) the observations are the template, result 2 and result 4,
    # so result 2 is masked and ZZ9QX1 is hidden. Before the reply (event 7) results 2 and 4 are
    # masked: B42X is hidden, ZZ9QX1 stays visible in the cancel call's own arguments.
    row = asyncio.run(measure_trajectory(traj, _masking(1), context_window=8192))
    assert row.n_supports == 3 and row.supported == pytest.approx(1 / 3)
    assert row.refetch_steps == 2 and row.hidden == ((5, "ZZ9QX1"), (7, "B42X"))
    assert row.refetch_tokens == (traj.events[2].token_count or 0) + (traj.events[4].token_count or 0) > 0
    # n = 2 keeps every result a step uses here: nothing to re-fetch.
    kept = asyncio.run(measure_trajectory(traj, _masking(2), context_window=8192))
    assert kept.supported == 1.0 and kept.refetch_steps == 0


def test_step_requests_are_the_masked_requests() -> None:
    requests = asyncio.run(step_requests(_hand_made(), _masking(1), context_window=8192))
    assert [r.index for r in requests] == [1, 3, 5, 7]
    texts = [m.content for m in requests[2].messages]
    assert any(t.startswith("Old environment output: (1 lines omitted)") for t in texts)
    assert requests[2].left_out and all(r.prompt_tokens > 0 for r in requests)


def test_table_states_the_recorded_reward_as_the_recordings() -> None:
    rows = [asyncio.run(measure_trajectory(_hand_made(), arm, context_window=8192))
            for arm in (arms_registry.full_history_arm("long_context"), _masking(1))]
    table = format_trajectory_table(aggregate_trajectories(rows, 8192))
    assert "recorded reward (the recording's, not predicted): 0.000" in table
    assert "swe_agent_masking_n1" in table and "0.333" in table


@pytest.mark.skipif(not DATA.is_dir(), reason="needs $AGENTLAB_DATA_DIR/agent_trajectories")
def test_long_context_sees_every_support_of_real_trajectories() -> None:
    from agentlab.bench.datasets.trajectories import load_trajectories

    data = load_trajectories()
    sample = [*data.trajectories[:5], *data.trajectories[200:203]]
    rows = [asyncio.run(measure_trajectory(t, arms_registry.full_history_arm("long_context"), context_window=200_000))
            for t in sample]
    assert all(r.supported in (None, 1.0) and r.refetch_steps == 0 for r in rows)
    assert sum(r.n_supports for r in rows) > 0


@pytest.mark.skipif(not DATA.is_dir(), reason="needs $AGENTLAB_DATA_DIR/agent_trajectories")
def test_retention_command_runs_the_trajectories_with_the_masking_arm() -> None:
    import io
    import json

    from agentlab.bench.cli.main import main

    out = io.StringIO()
    code = main(["retention", "trajectories", "--arms", "long_context,swe_agent_masking,langchain_summarization",
                 "--limit", "2", "--context-budget", "4096", "--json", "--set", "dataset.datasets=swe_agent",
                 "--no-store"], out=out)
    assert code == 0
    report = json.loads(out.getvalue())
    assert report["cases"] == 2 and report["context_budget"] == 4096 and report["model"] is None
    # The summarising arm is measured too, as bounds at the default summary length (stated).
    assert {s["arm"] for s in report["summaries"]} == {"long_context", "swe_agent_masking", "langchain_summarization"}
    assert report["skipped"] == {} and report["summary_tokens"] == 512 and "512 tokens" in report["summary_tokens_note"]
    by_arm = {s["arm"]: s for s in report["summaries"]}
    assert by_arm["langchain_summarization"]["summary_tokens"] == 512
    assert by_arm["swe_agent_masking"]["summary_tokens"] is None
    baseline = next(s for s in report["summaries"] if s["arm"] == "long_context")
    assert baseline["supported"]["mean"] == 1.0 and baseline["mean_refetch_steps"] == 0


@pytest.mark.skipif(not DATA.is_dir(), reason="needs $AGENTLAB_DATA_DIR/agent_trajectories")
def test_league_on_the_test_server_replays_trajectories_with_a_summarising_arm(tmp_path: Path) -> None:
    """Test server: replies are not a model's — plumbing only (the summaries are its canned text)."""
    import io

    import duckdb

    from agentlab.bench.cli.main import main
    from agentlab.testing.openai_server import OpenAITestServer

    db = tmp_path / "league.duckdb"
    with OpenAITestServer(context_window=32_768) as server:
        code = main(["league", "trajectories", "--arms", "swe_agent_masking,letta_sliding_window", "--limit", "2",
                     "--context-budget", "4096", "--model", server.model_spec, "--db", str(db), "--no-progress",
                     "--set", "dataset.datasets=swe_agent"], out=io.StringIO())
    assert code == 0
    with duckdb.connect(str(db), read_only=True) as con:
        statuses = con.execute("select status, count(*) from cases group by status").fetchall()
        scores = con.execute("select count(*) from scores where metric = 'supported'").fetchone()
        summary_calls = con.execute("select count(*) from calls").fetchone()
    assert statuses == [("ok", 6)]  # 2 cases x (baseline + 2 arms)
    assert scores is not None and scores[0] == 6
    assert summary_calls is not None and summary_calls[0] > 0  # letta's summaries went through the server


def test_the_joined_search_agrees_with_testing_every_text() -> None:
    import random

    from agentlab.bench.retention.rows import normalise
    from agentlab.bench.retention.supports import occurs
    from agentlab.bench.retention.trajectories import _Shown

    rng = random.Random(7)
    words = ["HAT229", "HAT2290", "x = 1", "x  =  1", "foo.py", "a", "id", "-", "\n", " ", "ab"]
    for _ in range(400):
        texts = ["".join(rng.choice(words) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(0, 5))]
        texts = [t for t in texts if t]
        shown = _Shown(texts, {})
        for unit in ["HAT229", "x = 1", "foo.py", "a", "ab", "1\nx", "id-"]:
            for kind in ("value", "line"):
                expected = (any(unit in normalise(t) for t in texts) if kind == "line"
                            else any(occurs(unit, t, kind) for t in texts))
                assert shown.visible(unit, kind) == expected, (texts, unit, kind)
