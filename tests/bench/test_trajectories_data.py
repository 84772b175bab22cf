"""The trajectory loaders: the real files (200 tau-bench entries, 22 SWE-agent files) and malformed ones."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentlab.bench.datasets.base import DatasetError
from agentlab.bench.datasets.trajectories import (
    load_trajectories,
    parse_swe_file,
    parse_tau_entry,
    parse_tau_file,
)

DATA = Path(os.environ.get("AGENTLAB_DATA_DIR", "/nonexistent")) / "agent_trajectories"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="needs $AGENTLAB_DATA_DIR/agent_trajectories")


@needs_data
def test_real_files_load_with_their_counts() -> None:
    data = load_trajectories()
    tau = [t for t in data.trajectories if t.dataset == "tau_bench"]
    swe = [t for t in data.trajectories if t.dataset == "swe_agent"]
    assert len(tau) == 200 and len(swe) == 22
    # SOURCES.md: 1,164 tool results over the tau-bench file.
    assert sum(1 for t in tau for e in t.events if e.is_tool_result()) == 1164
    assert {t.reward for t in tau} <= {0.0, 1.0} and all(t.reward is None for t in swe)
    assert all(t.instruction for t in data.trajectories)
    # Every SWE-agent ledger opens with the issue (one user event) and pairs each result with a call.
    for t in swe:
        assert sum(1 for e in t.events if e.message is not None and e.message.role == "user") == 1
        calls = {c.id for e in t.events if e.message is not None for c in e.message.tool_calls}
        assert all(e.message is not None and e.message.tool_call_id in calls for e in t.events if e.is_tool_result())
    assert len({t.traj_id for t in data.trajectories}) == 222


def test_tau_entry_becomes_a_ledger() -> None:
    entry = {"task_id": 7, "reward": 1.0, "trial": 2, "info": {}, "traj": [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "hi, I am u_1"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_user", "arguments": '{"user_id": "u_1"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_user", "content": '{"res": "ABC123"}'},
        {"role": "assistant", "content": "Your reservation is ABC123."},
    ]}
    t = parse_tau_entry(entry, "x.json entry 1")
    assert t.traj_id == "tau_bench/7-2" and t.instruction == "policy" and t.reward == 1.0
    assert [e.message.role for e in t.events if e.message] == ["user", "assistant", "tool", "assistant"]
    assert t.events[1].message is not None and t.events[1].message.tool_calls[0].name == "get_user"
    assert t.events[2].message is not None and t.events[2].message.tool_call_id == "c1"
    assert all(e.token_count for e in t.events)


def test_swe_thought_action_history_pairs_observations_with_actions() -> None:
    data = {"history": [
        {"role": "system", "content": "SETTING"},
        {"role": "user", "content": "demo", "is_demo": "True"},
        {"role": "user", "content": "ISSUE: fix foo_bar"},
        {"role": "assistant", "content": "look\n```\nopen foo.py\n```", "action": "open foo.py\n"},
        {"role": "user", "content": "1:def foo_bar():"},
    ]}
    t = parse_swe_file(data, "/d/case.traj")
    assert t.traj_id == "swe_agent/case" and t.instruction == "SETTING\n\ndemo"
    call = t.events[1].message.tool_calls[0] if t.events[1].message else None
    assert call is not None and call.name == "open" and json.loads(call.arguments) == {"command": "open foo.py"}
    assert t.events[2].message is not None and t.events[2].message.tool_call_id == call.id


@pytest.mark.parametrize("bad, fragment", [
    ({"traj": []}, "missing field 'task_id'"),
    ({"task_id": 1, "traj": [{"role": "robot", "content": "x"}]}, "unknown role 'robot'"),
    ({"task_id": 1, "traj": [{"role": "tool", "content": "x"}]}, "lacks 'tool_call_id'"),
])
def test_malformed_tau_entry_names_the_file(bad: dict, fragment: str) -> None:
    with pytest.raises(DatasetError, match=fragment) as info:
        parse_tau_file([bad], "/d/gpt-4o-airline.json")
    assert "/d/gpt-4o-airline.json entry 1" in str(info.value)


def test_malformed_swe_file_names_the_file() -> None:
    with pytest.raises(DatasetError, match=r"/d/x\.traj: expected a JSON object with a 'history' list"):
        parse_swe_file([], "/d/x.traj")
    with pytest.raises(DatasetError, match=r"/d/x\.traj history message 3: a user message"):
        parse_swe_file({"history": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b",
                                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]},
                                   {"role": "user", "content": "c"}]}, "/d/x.traj")


def test_corrupt_copy_is_refused_by_its_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "agent_trajectories" / "tau_bench"
    folder.mkdir(parents=True)
    (folder / "gpt-4o-airline.json").write_text("[]", encoding="utf-8")
    monkeypatch.setenv("AGENTLAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("AGENTLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AGENTLAB_OFFLINE", "1")
    with pytest.raises(DatasetError, match="gpt-4o-airline.json"):
        load_trajectories(["tau_bench"])
