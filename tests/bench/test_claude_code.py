"""Claude Code session logs: the loader on hand-made logs, the cache check on a session whose reads are known."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentlab.bench.cli.main import main
from agentlab.bench.datasets.base import DatasetError
from agentlab.bench.datasets.claude_code import RecordedUsage, load_sessions_dir, parse_session_lines
from agentlab.bench.retention.cache_check import check, predict_session, recorded_calls
from agentlab.model.prices import price_for

T0 = "2025-12-01T10:00:00.000Z"


def _usage(inp: int, read: int, write: int, out: int) -> dict[str, int]:
    return {"input_tokens": inp, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
            "output_tokens": out}


def _assistant(mid: str, block: dict[str, Any], usage: dict[str, int], *, ts: str = T0, **extra: Any) -> str:
    return json.dumps({"type": "assistant", "isSidechain": False, "timestamp": ts, **extra,
                       "message": {"id": mid, "model": "claude-sonnet-4-5", "role": "assistant",
                                   "content": [block], "usage": usage}})


def _user(content: Any, **extra: Any) -> str:
    return json.dumps({"type": "user", "isSidechain": False, "timestamp": T0, **extra,
                       "message": {"role": "user", "content": content}})


def _result(call_id: str, text: str, is_error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": is_error}


def _tool_use(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def _log() -> list[str]:
    u = _usage(3, 100, 50, 1)
    return [
        json.dumps({"type": "summary", "summary": "a title", "leafUuid": "x"}),
        json.dumps({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}),
        _user("fix the bug in parser.py"),
        _assistant("msg_1", {"type": "thinking", "thinking": "look at the parser first", "signature": "s"}, u),
        _assistant("msg_1", {"type": "text", "text": "Reading two files."}, u),
        _assistant("msg_1", _tool_use("call_a", "Read", file_path="/repo/parser.py"), u),
        '{"type": "assistant", "message": {"id": "msg_tru',  # a truncated line
        _assistant("msg_1", _tool_use("call_b", "Read", file_path="/repo/missing.py"), {**u, "output_tokens": 90}),
        _user([_result("call_a", "def parse(): return 42")]),
        _user([_result("call_b", "File does not exist.", is_error=True)]),
        json.dumps({"type": "system", "subtype": "api_error", "level": "error", "timestamp": T0}),
        json.dumps({"type": "queue-operation", "operation": "enqueue"}),
        _assistant("msg_2", {"type": "text", "text": "The parser returns 42."}, _usage(5, 150, 40, 12)),
    ]


def test_split_blocks_become_one_assistant_event_with_its_usage() -> None:
    parsed = parse_session_lines(_log(), "s1.jsonl")
    (traj,) = parsed.trajectories
    roles = [e.message.role for e in traj.events if e.message is not None]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    first = traj.events[1]
    assert [c.id for c in first.message.tool_calls] == ["call_a", "call_b"]
    assert json.loads(first.message.tool_calls[0].arguments) == {"file_path": "/repo/parser.py"}
    assert "look at the parser first" in first.message.content  # thinking of the current turn counts
    assert first.metadata["usage"] == RecordedUsage(3, 100, 50, 90)  # the largest output count of the lines
    assert traj.events[4].metadata["usage"].prompt_tokens == 195
    assert traj.traj_id == "claude_code/s1" and traj.instruction == ""


def test_tool_results_keep_is_error_and_their_call_name() -> None:
    (traj,) = parse_session_lines(_log(), "s1.jsonl").trajectories
    ok, failed = traj.events[2], traj.events[3]
    assert (ok.message.tool_call_id, ok.message.name, ok.metadata["is_error"]) == ("call_a", "Read", False)
    assert failed.message.content == "File does not exist." and failed.metadata["is_error"] is True


def test_truncated_line_is_named_the_rest_kept_and_api_errors_counted() -> None:
    parsed = parse_session_lines(_log(), "s1.jsonl")
    assert [(s.file, s.line) for s in parsed.skipped] == [("s1.jsonl", 7)]
    assert "not valid JSON" in str(parsed.skipped[0])
    assert parsed.api_errors == 1
    assert sum(1 for e in parsed.trajectories[0].events if e.message.role == "assistant") == 2
    with pytest.raises(DatasetError, match=r"s1.jsonl line 7: .*--strict"):
        parse_session_lines(_log(), "s1.jsonl", strict=True)


def test_synthetic_replies_are_not_messages() -> None:
    lines = [_user("hi"), json.dumps({"type": "assistant", "message": {"id": "x", "model": "<synthetic>",
                                                                        "content": [{"type": "text", "text": "err"}]}}),
             _assistant("m", {"type": "text", "text": "hello"}, _usage(1, 0, 0, 1))]
    parsed = parse_session_lines(lines, "s.jsonl")
    assert parsed.synthetic == 1
    assert [e.message.content for e in parsed.trajectories[0].events] == ["hi", "hello"]


def test_sidechain_lines_form_their_own_thread() -> None:
    u = _usage(1, 0, 10, 1)
    lines = [
        _user("main task"),
        _assistant("m1", _tool_use("t1", "Task", prompt="search"), u),
        _user("search the repo", isSidechain=True, agentId="a7"),
        _assistant("s1", _tool_use("g1", "Grep", pattern="foo"), u, isSidechain=True, agentId="a7"),
        _user([_result("g1", "foo.py:3")], isSidechain=True, agentId="a7"),
        _assistant("s2", {"type": "text", "text": "found in foo.py"}, u, isSidechain=True, agentId="a7"),
        _user([_result("t1", "found in foo.py")]),
        _assistant("m2", {"type": "text", "text": "done"}, u),
    ]
    threads = {t.traj_id: t for t in parse_session_lines(lines, "s.jsonl").trajectories}
    assert set(threads) == {"claude_code/s", "claude_code/s/agent-a7"}
    main_texts = [e.message.content for e in threads["claude_code/s"].events]
    assert "search the repo" not in main_texts and "found in foo.py" in main_texts  # only the Task result
    agent = threads["claude_code/s/agent-a7"]
    assert [e.message.role for e in agent.events] == ["user", "assistant", "tool", "assistant"]
    assert agent.metadata["thread"] == "agent-a7"


def test_a_compaction_boundary_starts_what_the_model_saw_after_it() -> None:
    u = _usage(1, 0, 10, 1)
    lines = [
        _user("task"),
        _assistant("m1", _tool_use("c1", "Bash", command="ls"), u),
        _user([_result("c1", "a.py b.py")]),
        _assistant("m2", {"type": "text", "text": "listed"}, u),
        json.dumps({"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted",
                    "compactMetadata": {"trigger": "auto", "preTokens": 155000}, "parentUuid": None}),
        _user("This session is being continued; summary: two files a.py and b.py", isCompactSummary=True),
        _assistant("m3", _tool_use("c2", "Read", file_path="a.py"), u),
        _user([_result("c2", "print(1)")]),
        _assistant("m4", {"type": "text", "text": "ok"}, u),
    ]
    parsed = parse_session_lines(lines, "s.jsonl")
    assert parsed.compactions == 1
    before, after = parsed.trajectories
    assert before.traj_id == "claude_code/s" and after.traj_id == "claude_code/s/compact-1"
    assert after.events[0].message.content.startswith("This session is being continued")
    assert after.events[0].metadata["compact_summary"] is True
    assert not any("a.py b.py" in e.message.content for e in after.events)  # the pre-boundary result is gone
    assert after.metadata["after_compaction"] == 1


def test_thinking_of_an_earlier_turn_is_stripped() -> None:
    u = _usage(1, 0, 10, 1)
    lines = [_user("first"), _assistant("m1", {"type": "thinking", "thinking": "OLD-THOUGHT"}, u),
             _assistant("m1", {"type": "text", "text": "answer one"}, u),
             _user("second"), _assistant("m2", {"type": "thinking", "thinking": "NEW-THOUGHT"}, u),
             _assistant("m2", {"type": "text", "text": "answer two"}, u)]
    (traj,) = parse_session_lines(lines, "s.jsonl").trajectories
    texts = [e.message.content for e in traj.events]
    assert "OLD-THOUGHT" not in texts[1] and "NEW-THOUGHT" in texts[3]
    assert traj.metadata["thinking_dropped"] == 1


def _known_session(tmp: Path) -> Path:
    """A session whose recorded usage is exactly what a cache holding each previous request predicts."""
    from agentlab.bench.datasets.claude_code import parse_session_lines as parse

    lines = [_user("task " + "alpha " * 1500)]
    for i in range(4):
        lines.append(_assistant(f"m{i}", _tool_use(f"c{i}", "Read", n=i), _usage(0, 0, 0, 1),
                                ts=f"2025-12-01T10:0{i}:00.000Z"))
        lines.append(_user([_result(f"c{i}", f"result {i} " + "beta " * 400)]))
    lines.append(_assistant("m9", {"type": "text", "text": "done"}, _usage(0, 0, 0, 1), ts="2025-12-01T10:05:00.000Z"))
    (traj,) = parse(lines, "k.jsonl").trajectories
    calls, _ = recorded_calls(traj)
    # the bill: 3 uncached tokens (the reply priming), a read of everything the previous call sent, the rest written
    usage, previous = [], 0
    for c in calls:
        usage.append(_usage(3, previous, c.ours - previous, 1))
        previous = c.ours
    out, k = [], 0
    for line in lines:
        obj = json.loads(line)
        if obj["type"] == "assistant":
            obj["message"]["usage"] = usage[k]
            k += 1
        out.append(json.dumps(obj))
    path = tmp / "logs" / "k.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path.parent


def test_cache_check_recovers_known_reads(tmp_path: Path) -> None:
    data = load_sessions_dir(_known_session(tmp_path))
    price = price_for("claude-sonnet-4-5")
    assert price is not None
    result = check(data.trajectories, price, profiles=("anthropic",), variants=("as before",))
    assert result.n_calls == 5
    assert result.estimate.ratio == pytest.approx(1.0)
    assert result.estimate.hidden["claude_code_user/k"] == pytest.approx(3.0)
    calls, requests = recorded_calls(data.trajectories[0])
    predicted = predict_session(calls, requests, 3.0, 1.0, "anthropic", "as before")
    for p in predicted[1:]:  # every read after the first is the previous request, to the hidden prefix's 3 ids
        assert p.read == pytest.approx(p.recorded.cache_read_input_tokens + 3)
    assert max(abs(e) for e in result.errors[("anthropic", "as before")]) < 0.5
    (session,) = result.sessions
    assert session.predicted == pytest.approx(session.recorded, rel=0.01)


def test_warm_prefix_and_lifetime_in_the_replay() -> None:
    from agentlab.model.prompt_caching import ANTHROPIC, PRIMING_MARKERS, CacheReplay, RequestTokens

    system = tuple(range(-2000, -4000, -1))  # 2,000 tokens another conversation cached
    first = RequestTokens((system, tuple(range(1, 1500)), PRIMING_MARKERS))
    second = RequestTokens((system, tuple(range(1, 1500)), tuple(range(5000, 5100)), PRIMING_MARKERS))
    cache = CacheReplay(ANTHROPIC)
    cache.seed(RequestTokens((system, PRIMING_MARKERS)), at=0.0)
    assert cache.add(first, at=10.0).cached_tokens == 2000
    assert cache.add(second, at=10.0 + 301).cached_tokens == 0  # unused for more than 5 minutes: gone
    fresh = CacheReplay(ANTHROPIC)
    fresh.add(first, at=0.0)
    assert fresh.add(second, at=299.0).cached_tokens == first.breakpoint_tokens
    assert CacheReplay(ANTHROPIC).add(first).cached_tokens == 0  # no seed: the first call reads nothing


def test_sessions_dir_flag_replays_a_users_logs(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "s1.jsonl").write_text("\n".join(_log()) + "\n", encoding="utf-8")
    out = io.StringIO()
    assert main(["retention", "trajectories", "--sessions-dir", str(folder), "--arms", "long_context",
                 "--context-budget", "4096", "--no-store", "--json"], out=out) == 0
    doc = json.loads(out.getvalue())
    assert doc["datasets"] == "claude_code" and doc["cases"] == 1
    assert "user's own Claude Code logs" in doc["data_note"] and "s1.jsonl line 7" in doc["data_note"]
    out = io.StringIO()
    assert main(["cache-check", "--sessions-dir", str(folder)], out=out) == 0
    text = out.getvalue()
    assert "1 malformed lines skipped (s1.jsonl line 7" in text and "tokenizer ratio" in text
    assert main(["cache-check", "--sessions-dir", str(tmp_path / "nowhere")], out=io.StringIO()) == 2
    # A price with no cache-write rate would price the bill's cache writes by a guess: refused, naming the fix.
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["cache-check", "--sessions-dir", str(folder), "--price-model", "gpt-4.1"], out=io.StringIO()) == 2
    assert "no cache_write price" in err.getvalue() and "claude-sonnet-4-5" in err.getvalue()


REAL = Path(os.environ.get("AGENTLAB_DATA_DIR", "/nonexistent")) / "agent_trajectories" / "claude_code"


@pytest.mark.skipif(not (REAL / "0c18eb7c.jsonl").is_file(), reason="the pinned Claude Code sessions are not here")
def test_real_sessions_counts() -> None:
    from agentlab.bench.datasets.claude_code import load_claude_code

    data = load_claude_code()
    assert data.files == 300 and len(data.trajectories) == 300
    assert sum(len(e.message.tool_calls) for t in data.trajectories for e in t.events) == 15047
    assert [(s.file, s.line) for s in data.skipped] == [("0c18eb7c.jsonl", 5)]
    assert data.api_errors == 10 and data.compactions == 0
    # the whole dataset's fingerprint, from the manifest alone (what a --limit run keeps as its identity)
    from agentlab.bench.datasets.claude_code import pinned_fingerprint

    assert pinned_fingerprint() == (data.sha256, 300)


@pytest.mark.skipif(not (REAL / "0c18eb7c.jsonl").is_file(), reason="the pinned Claude Code sessions are not here")
def test_a_limited_selection_reads_only_its_files(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentlab.bench.datasets.claude_code as claude_code
    from agentlab.bench.spec import load_selection
    from agentlab.bench.tasks import get_task

    read: list[str] = []
    real_read = claude_code._read

    def counting(path: Any, *args: Any) -> Any:
        read.append(str(path))
        return real_read(path, *args)

    monkeypatch.setattr(claude_code, "_read", counting)
    task = get_task("trajectories")
    from agentlab.bench.spec import load_run_settings

    settings = load_run_settings(task, ['dataset.datasets=["claude_code"]'])[0]
    selection = load_selection(task, settings, 3)
    assert len(read) == 3 and len(selection.cases) == 3
    assert selection.loaded == 300 and selection.dataset_sha256 == claude_code.pinned_fingerprint()[0]
    assert [c.id for c in selection.cases] == sorted(c.id for c in selection.cases)


def test_league_and_report_replay_claude_code_logs_whatever_the_models_window(tmp_path: Path) -> None:
    from agentlab.bench.league import play as league
    from agentlab.model.base import ModelInfo
    from agentlab.model.scripted import ScriptedModel

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "s1.jsonl").write_text("\n".join(_log()) + "\n", encoding="utf-8")
    db = tmp_path / "league.duckdb"
    # a window smaller than the recorded prompts: the replay never asks the model to answer them, so no refusal
    model = ScriptedModel(info=ModelInfo("scripted", 64))
    notes = io.StringIO()
    result = league.run_league("trajectories", arms="swe_agent_masking", model="scripted", model_object=model, db=db,
                               overrides=[f"dataset.sessions_dir={folder}"], progress=False, notes=notes)
    assert "answers none of its prompts" in notes.getvalue()
    assert {r["arm"] for r in result.rows} >= {"long_context", "swe_agent_masking"}
    assert model.calls == 0  # no summarising arm: the model is never called
    out = io.StringIO()
    assert main(["report", "trajectories", "--db", str(db)], out=out) == 0
    assert "quality_loss" in out.getvalue() and "swe_agent_masking" in out.getvalue()


def test_cost_changes_pairs_each_session_under_two_arms(tmp_path: Path) -> None:
    import pandas as pd

    from agentlab.bench import analysis
    from agentlab.notebooks.long_sessions import cost_changes

    folder = tmp_path / "project"
    folder.mkdir()
    for name in ("s1", "s2"):
        (folder / f"{name}.jsonl").write_text("\n".join(_log()) + "\n", encoding="utf-8")
    db = tmp_path / "rows.duckdb"
    assert main(["retention", "trajectories", "--sessions-dir", str(folder), "--arms",
                 "long_context,swe_agent_masking,swe_agent_summary", "--context-budget", "4096",
                 "--cache-profile", "anthropic", "--db", str(db)], out=io.StringIO()) == 0
    table = cost_changes(db, 4096, dataset="claude_code_user").set_index("arm")
    assert list(table.index) == ["long_context", "swe_agent_masking", "swe_agent_summary"]
    assert (table["sessions"] == 2).all()
    cache = analysis.prompt_cache_df("trajectories", db=db).set_index(["arm", "case_id"])["net_cost_usd"]
    ratios = [cache[("swe_agent_masking", c)] / cache[("long_context", c)] - 1
              for c in cache.loc["long_context"].index]
    assert table.loc["swe_agent_masking", "net_vs_long_context"] == pytest.approx(sum(ratios) / len(ratios))
    assert pd.isna(table.loc["long_context", "net_vs_long_context"])  # no change against itself
    assert {"supported_lo", "supported_hi", "tokens_sent", "busts", "raw_cost_usd"} <= set(table.columns)
    with pytest.raises(ValueError, match="no stored claude_code_user row"):
        cost_changes(db, 8192, dataset="claude_code_user")


def test_a_replays_cache_has_the_hidden_prefix_its_warm_part_and_the_recorded_clock() -> None:
    from agentlab.events import Message
    from agentlab.model.prompt_caching import HiddenPrefix, cache_sequence, request_tokens

    big = " ".join(f"w{i}" for i in range(1500))  # well over Anthropic's 1,024-token minimum
    first = ([Message.user(big)], [])
    second = ([Message.user(big), Message.assistant("ok")], [])
    third = ([Message.user(big), Message.assistant("ok"), Message.user("more")], [])
    hidden = HiddenPrefix(2000, warm=1200)
    plain = cache_sequence([first, second, third], "anthropic")
    timed = cache_sequence([first, second, third], "anthropic", hidden, [0.0, 60.0, 60.0 + 301])
    assert plain[0].cached_tokens == 0 and timed[0].cached_tokens == 1200  # the warm part is read at once
    assert timed[0].prompt_tokens == plain[0].prompt_tokens + 2000  # the prefix is sent with every request
    assert timed[1].cached_tokens == 2000 + request_tokens(*first).breakpoint_tokens  # then the whole first request
    assert timed[2].cached_tokens == 0 and plain[2].cached_tokens > 0  # 301 s unused: the entries are gone
    assert cache_sequence([first, second], "anthropic", hidden, [0.0, 1.0])[1].cached_tokens == timed[1].cached_tokens


def test_claude_code_retention_prices_its_cache_with_the_checked_model(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "s1.jsonl").write_text("\n".join(_log()) + "\n", encoding="utf-8")
    runs = {}
    for profile in ("anthropic", "none"):
        out = io.StringIO()
        assert main(["retention", "trajectories", "--sessions-dir", str(folder), "--arms", "long_context",
                     "--context-budget", "4096", "--cache-profile", profile, "--price-model", "claude-sonnet-4-5",
                     "--no-store", "--json"], out=out) == 0
        runs[profile] = json.loads(out.getvalue())
    doc = runs["anthropic"]
    assert "warm + clock" in doc["cache_model"] and "tokenizer ratio" in doc["cache_model"]
    (row,) = doc["summaries"]
    # the hidden prefix goes with both requests: more tokens than the messages alone (the profile `none` as well)
    from agentlab.bench.datasets.claude_code import load_sessions_dir
    from agentlab.bench.retention.cache_check import replay_prefixes

    prefixes, _ = replay_prefixes(load_sessions_dir(folder).trajectories)
    (prefix,) = prefixes.values()
    assert prefix.tokens > 0
    assert row["extra"]["raw_tokens"] == row["mean_total_prompt_tokens"] + 2 * prefix.tokens
    assert runs["none"]["summaries"][0]["extra"]["raw_tokens"] == row["extra"]["raw_tokens"]
    text = io.StringIO()
    assert main(["retention", "trajectories", "--sessions-dir", str(folder), "--arms", "long_context",
                 "--context-budget", "4096", "--cache-profile", "anthropic", "--no-store"], out=text) == 0
    assert "cache model: for the 1 recordings with the provider's usage" in text.getvalue()
