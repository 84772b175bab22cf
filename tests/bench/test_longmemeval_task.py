"""LongMemEval task: the whole pipeline on a generated fixture file in the real schema.

The fixture (``write_longmemeval_fixture``) gives each question 3 sessions of 4 turns; the middle
session's first user turn (``has_answer``) says which city the user moved to. Every fifth question
is an abstention item without evidence.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from agentlab.bench.cli import main as cli
from agentlab.bench.config import apply_overrides, load_settings
from agentlab.bench.datasets.longmemeval import write_longmemeval_fixture
from agentlab.bench.running import executor
from agentlab.bench.scoring.judge import Judge
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import get_task
from agentlab.bench.tasks.longmemeval import haystack_events
from agentlab.bench.tasks.longmemeval_history import parse_haystack_date
from agentlab.events import Message
from agentlab.model.base import ModelInfo, ModelRequest
from agentlab.model.scripted import ScriptedModel

SUMMARY_TEXT = "The user asked for dinner recipes and mentioned a recent move."


@pytest.fixture
def fixture_file(tmp_path: Path) -> Path:
    return write_longmemeval_fixture(tmp_path / "lme.json", n_questions=6, question_types=["single-session-user"])


def settings_for(path: Path, *extra: str):  # type: ignore[no-untyped-def]
    task = get_task("longmemeval")
    return apply_overrides(load_settings("longmemeval", task.default_settings()), [f"dataset.path={path}", *extra])


def reply(request: ModelRequest) -> str | Message:
    """Deterministic behaviour for every purpose."""
    question = request.messages[-1]
    if request.purpose == "judge":
        return json.dumps({"correct": True, "confidence": 0.5, "reason": "same city"})
    if request.purpose == "summary":
        return SUMMARY_TEXT
    tools = [t["function"]["name"] for t in request.tools]
    said_tool = any(m.role == "tool" for m in request.messages)
    if "session_search" in tools and not said_tool:
        return ScriptedModel.tool_call("session_search", {"query": "moved city", "scope": "current_hidden"})
    for m in request.messages:
        evidence_holder = m.role == "tool" or (m.role == "user" and m is not question)
        if evidence_holder and "I moved to " in m.content:
            city = m.content.split("I moved to ")[1].split()[0].strip(".,\\\"")
            return f"You moved to {city}."
    return "I do not know."


def scripted(window: int = 32_000) -> ScriptedModel:
    return ScriptedModel(info=ModelInfo("scripted", window), default_reply=reply)  # type: ignore[arg-type]


async def run(mode: str, path: Path, store: ResultStore, model: ScriptedModel, **kw: object) -> executor.RunSummary:
    request = executor.RunRequest(benchmark="longmemeval", mode=mode, model_spec="scripted",
                                  settings=settings_for(path), judge_spec="scripted", progress=False, **kw)  # type: ignore[arg-type]
    return await executor.run_task(get_task("longmemeval"), request, model=model, store=store,
                                   judge=Judge(model, "scripted"))


def scores(store: ResultStore, run_id: str, case_id: str) -> dict[str, float]:
    rows = store.query("SELECT metric, value FROM scores WHERE run_id = ? AND case_id = ?", [run_id, case_id])
    return {metric: value for metric, value in rows}


def test_cases_follow_the_type_filter_and_limit(fixture_file: Path) -> None:
    task = get_task("longmemeval")
    selection = task.load_cases(settings_for(fixture_file, "dataset.max_cases=3"))
    assert [c.id for c in selection.cases] == ["fx0000", "fx0001", "fx0002"]
    assert selection.loaded == 6 and len(selection.dataset_sha256) == 64
    case = selection.cases[0]
    assert case.reference == "Lisbon" and case.metadata["evidence_turns"] == 1
    assert case.metadata["sessions"] == 3 and case.metadata["turns"] == 12


def test_haystack_is_flattened_in_order_with_real_roles_and_dates(fixture_file: Path) -> None:
    case = get_task("longmemeval").load_cases(settings_for(fixture_file)).cases[0]
    events = haystack_events(case.data)
    assert [e.role for e in events[:4]] == ["user", "assistant", "user", "assistant"]
    assert len(events) == 12
    evidence = [e for e in events if e.metadata["has_answer"]]
    assert len(evidence) == 1 and "Lisbon" in evidence[0].text and evidence[0].id == "fx0000/s1/t0"
    assert events[0].timestamp == parse_haystack_date("2023/05/10 (Wed) 09:00")
    assert all(a.timestamp < b.timestamp for a, b in zip(events, events[1:], strict=False))


async def test_long_context_sends_every_haystack_turn_and_scores_by_hand(fixture_file: Path, tmp_path: Path) -> None:
    model = scripted()
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("long_context", fixture_file, store, model)
        assert (summary.ok, summary.failed) == (6, 0)
        answer_requests = [r for r in model.requests if r.purpose == "answer"]
        first = answer_requests[0]
        assert first.messages[0].role == "system" and "2023/06/01" in first.messages[0].content
        assert [m.role for m in first.messages[1:]] == ["user", "assistant"] * 6 + ["user"]
        got = scores(store, summary.run_id, "fx0000")
    # "You moved to Lisbon." vs "Lisbon": 1 of 4 tokens overlaps -> P 0.25, R 1.
    assert got["exact_match"] == 1.0
    assert got["f1"] == pytest.approx(0.4)
    assert got["rougeL"] == pytest.approx(0.4)
    assert got["bleu1"] == pytest.approx(0.25)
    assert got["llm_score"] == 1.0  # exact match: no judge call needed


async def test_summary_mode_answers_from_the_summary_only(fixture_file: Path, tmp_path: Path) -> None:
    model = scripted()
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("summary", fixture_file, store, model, limit=1)
        assert summary.ok == 1
        answer = [r for r in model.requests if r.purpose == "answer"][0]
        assert SUMMARY_TEXT in answer.messages[0].content
        assert [m.role for m in answer.messages] == ["system", "user"]  # no raw tail after the boundary
        got = scores(store, summary.run_id, "fx0000")
        meta = json.loads(store.query("SELECT metadata FROM cases WHERE run_id = ?", [summary.run_id])[0][0])
        purposes = [r[0] for r in store.query("SELECT purpose FROM calls WHERE run_id = ? ORDER BY seq",
                                              [summary.run_id])]
    assert meta["summary_chars"] == len(SUMMARY_TEXT) and meta["events_not_summarised"] == 0
    assert purposes[0] == "summary" and "answer" in purposes
    # "I do not know." vs "Lisbon": nothing overlaps; the judge (confidence 0.5, correct) decides llm_score.
    assert got["exact_match"] == 0.0 and got["f1"] == 0.0
    assert got["llm_score"] == 0.5


async def test_a_summary_that_stops_advancing_fails_the_case(fixture_file: Path, tmp_path: Path) -> None:
    # A 400-token window needs three rolling steps over the 12 seeded events; the summariser
    # answers the first and then returns nothing, so the boundary stops part-way (as in QMSum).
    summary_calls = 0

    def stalling(request: ModelRequest) -> str | Message:
        nonlocal summary_calls
        if request.purpose == "summary":
            summary_calls += 1
            return SUMMARY_TEXT if summary_calls == 1 else ""
        return reply(request)

    model = ScriptedModel(info=ModelInfo("scripted", 400), default_reply=stalling)  # type: ignore[arg-type]
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("summary", fixture_file, store, model, limit=1)
        (status, code, error), = store.query("SELECT status, error_code, error FROM cases WHERE run_id = ?",
                                             [summary.run_id])
        table = get_task("longmemeval").report_tables(store)["modes"].set_index("mode")
    assert (summary.ok, summary.failed) == (0, 1)
    assert (status, code) == ("failed", "summary_incomplete")
    assert "of 12 events after 2 forced updates" in error
    assert not [r for r in model.requests if r.purpose == "answer"]  # never answered from a partial summary
    assert table.loc["summary", "failed"] == 1 and table.loc["summary", "exact_match"] == 0.0


async def test_recall_mode_searches_hidden_history_and_records_evidence_recall(fixture_file: Path,
                                                                               tmp_path: Path) -> None:
    model = scripted()
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("recall", fixture_file, store, model, limit=2)
        assert summary.ok == 2
        got = scores(store, summary.run_id, "fx0001")
        meta = json.loads(store.query("SELECT metadata FROM cases WHERE run_id = ? AND case_id = 'fx0001'",
                                      [summary.run_id])[0][0])
    assert meta["tool_calls"] == {"session_search": 1}
    assert got["exact_match"] == 1.0  # the search result carried "I moved to Osaka"
    assert got["evidence_hit@10"] == 1.0 and got["evidence_recall@10"] == 1.0


async def test_report_table_pairs_modes_with_long_context(fixture_file: Path, tmp_path: Path) -> None:
    model = scripted()
    with ResultStore(tmp_path / "r.duckdb") as store:
        await run("long_context", fixture_file, store, model, limit=2)
        await run("summary", fixture_file, store, model, limit=2)
        long_prompts = [r[0] for r in store.query(
            "SELECT sum(prompt_tokens) FROM calls JOIN runs USING (run_id) WHERE mode = 'long_context' "
            "AND purpose = 'answer' GROUP BY case_id ORDER BY case_id")]
        short_prompts = [r[0] for r in store.query(
            "SELECT sum(prompt_tokens) FROM calls JOIN runs USING (run_id) WHERE mode = 'summary' "
            "AND purpose = 'answer' GROUP BY case_id ORDER BY case_id")]
        table = get_task("longmemeval").report_tables(store)["modes"].set_index("mode")
    expected = sum(1 - s / lp for s, lp in zip(short_prompts, long_prompts, strict=True)) / 2
    assert table.loc["summary", "prompt_savings_vs_long_last_call"] == pytest.approx(expected)
    assert table.loc["summary", "avg_summary_chars"] == len(SUMMARY_TEXT)
    assert table.loc["long_context", "exact_match"] == 1.0 and table.loc["summary", "exact_match"] == 0.0


async def test_long_context_beyond_the_window_is_a_context_length_failure(fixture_file: Path, tmp_path: Path) -> None:
    model = scripted(window=100)
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("long_context", fixture_file, store, model, limit=1)
        (code,), = store.query("SELECT error_code FROM cases WHERE run_id = ?", [summary.run_id])
    assert summary.failed == 1 and code == "context_length"
    assert not [r for r in model.requests if r.purpose == "answer"]  # not sent


def test_retrieval_only_measures_has_answer_recall(fixture_file: Path) -> None:
    task = get_task("longmemeval")
    settings = settings_for(fixture_file)
    cases = task.load_cases(settings).cases
    out = task.retrieval_only(cases, "recall", settings)
    # fx0004 is the abstention item: no evidence, left out.
    assert out["questions"] == 6 and out["with_evidence"] == 5
    assert out["recall@1"] == 1.0 and out["hit@10"] == 1.0


def test_cli_names_the_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLAB_DATA_DIR", str(tmp_path / "none"))
    monkeypatch.setenv("AGENTLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AGENTLAB_OFFLINE", "1")
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    code = cli.main(["longmemeval", "--mode", "summary", "--dry-run"], out=io.StringIO())
    message = err.getvalue()
    assert code == 2
    assert "longmemeval_s_cleaned.json" in message and str(tmp_path / "none" / "longmemeval") in message
    assert "huggingface.co" in message and "dataset.path" in message


def test_a_given_file_is_fingerprinted_and_a_variant_without_a_sha256_is_an_error(
        fixture_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    import agentlab.bench.datasets.longmemeval as lme_data
    from agentlab.bench.datasets.base import DatasetError

    data = lme_data.load_file_or_variant(f" {fixture_file} ", "s_cleaned")
    assert data.sha256 == hashlib.sha256(fixture_file.read_bytes()).hexdigest()
    with pytest.raises(DatasetError, match="is not a file"):
        lme_data.load_file_or_variant(str(fixture_file.parent), "s_cleaned")
    with pytest.raises(DatasetError, match="unknown \\[dataset\\] variant 'nope'"):
        lme_data.load_file_or_variant("", "nope")
    # A file accepted without a pinned hash would give the run an empty dataset fingerprint.
    monkeypatch.setattr(lme_data, "load_longmemeval", lambda variant: lme_data.parse_file(fixture_file, variant))
    with pytest.raises(DatasetError, match="accepted without a sha256.*dataset.path=FILE"):
        lme_data.load_file_or_variant("", "s_cleaned")
