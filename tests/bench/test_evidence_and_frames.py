"""The harness APIs the task modules share: evidence@k (bench.evidence) and per-case frames (bench.case_frames)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agentlab.bench.scoring import case_frames, evidence
from agentlab.bench.scoring.metrics import Score
from agentlab.bench.store.results import CaseRecord, ResultStore, RunInfo
from agentlab.events import Usage
from agentlab.model.base import CallRecord


def test_one_ranking_is_cut_at_each_k() -> None:
    found = evidence.at_k(["a", "x", "b", "y"], ["a", "b"], [1, 2, 3])
    assert found == {"recall@1": 0.5, "hit@1": 1.0, "recall@2": 0.5, "hit@2": 1.0, "recall@3": 1.0, "hit@3": 1.0}


async def test_session_search_is_asked_once_per_k_and_graded_at_that_k() -> None:
    from agentlab.events import user_event
    from agentlab.recall import RecallPolicy
    from agentlab.session.inmemory import InMemorySessionService

    service = InMemorySessionService()
    session = await service.create_session("app", "u", "s")
    for i, text in enumerate(["the cat sat on the mat", "dogs bark at night", "a cat and a dog play"]):
        event = user_event(text, timestamp=1000.0 + i)
        event.id = f"e{i}"
        await service.append_event(session, event)
    asked: list[tuple[list[str], int]] = []

    def grade(ranked: list[str], k: int) -> tuple[float, float]:
        asked.append((ranked, k))
        return evidence.id_grade(["e2"])(ranked, k)

    found = await evidence.evidence_at_k(service, session, RecallPolicy(), "cat", [1, 2], grade)
    assert [k for _, k in asked] == [1, 2] and len(asked[0][0]) == 1 and set(asked[1][0]) == {"e0", "e2"}
    assert found["evidence_recall@2"] == 1.0 and found["evidence_hit@2"] == 1.0
    assert list(found) == evidence.metric_names([1, 2], prefix="evidence_")
    with pytest.raises(ValueError, match="no gold evidence"):
        evidence.id_grade([])


def test_no_gold_evidence_has_no_score_and_stays_out_of_the_mean() -> None:
    assert evidence.at_k(["a"], [], [1]) is None
    rows = [evidence.at_k(["a"], ["a"], [1]), None, evidence.at_k(["x"], ["a"], [1])]
    assert evidence.mean_at_k(rows, [1]) == {"recall@1": 0.5, "hit@1": 0.5}
    assert evidence.mean_at_k([None], [1]) == {"recall@1": None, "hit@1": None}
    prefixed = [{"evidence_recall@1": 1.0, "evidence_hit@1": 1.0}, {"evidence_recall@1": 0.0, "evidence_hit@1": 1.0}]
    assert evidence.mean_at_k(prefixed, [1], prefix="evidence_") == {"recall@1": 0.5, "hit@1": 1.0}


def test_metric_names_per_k_or_per_metric() -> None:
    assert evidence.metric_names([5, 10]) == ["recall@5", "hit@5", "recall@10", "hit@10"]
    assert evidence.metric_names([5, 10], by_metric=True) == ["recall@5", "recall@10", "hit@5", "hit@10"]


def _store(tmp_path: Path) -> ResultStore:
    store = ResultStore(tmp_path / "r.duckdb")
    store.start_run(RunInfo("r1", "toy", "long_context", {}, "m", None, "sha", "v", "1"))

    def call(purpose: str, prompt: int, error: str | None = None) -> CallRecord:
        return CallRecord(model="m", purpose=purpose, usage=Usage(prompt, 2), latency_ms=5.0, cache_hit=False,
                          error=error)

    store.write_cases([
        CaseRecord("r1", "ok1", "ok", metadata={"k": 1}, latency_ms=30.0,
                   calls=[call("answer", 100), call("answer", 40), call("answer", 7, error="boom"), call("judge", 9)],
                   scores=[Score("f1", 0.5, "v")]),
        CaseRecord("r1", "bad", "failed", calls=[call("answer", 11)]),
    ])
    return store


def test_a_frame_holds_the_named_call_aggregates_and_the_scores(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        frame = case_frames.case_tokens(store, "toy", ("answer",),
                                        columns=("latency_ms", "answer_prompt_last", "answer_calls", "all_calls"))
        rows = frame.set_index("case_id")
        assert rows.loc["ok1", "answer_prompt"] == 147 and rows.loc["ok1", "answer_calls"] == 3
        assert rows.loc["ok1", "answer_total"] == 147 + 6
        # The last answer call that returned: the failed third call does not count.
        assert rows.loc["ok1", "answer_prompt_last"] == 40 and rows.loc["ok1", "all_calls"] == 4
        assert rows.loc["ok1", "latency_ms"] == 30.0 and rows.loc["ok1", "f1"] == 0.5
        assert math.isnan(rows.loc["bad", "f1"])
        assert case_frames.case_metadata(frame.sort_values("case_id")) == [{}, {"k": 1}]
        case_frames.zero_failed(frame, ("f1", "rougeL"), if_scored=("llm_score",))
        rows = frame.set_index("case_id")
        assert rows.loc["bad", "f1"] == 0.0 and rows.loc["bad", "rougeL"] == 0.0 and math.isnan(rows.loc["ok1", "rougeL"])
        assert "llm_score" not in frame.columns
        assert case_frames.case_tokens(store, "other").empty


def test_an_unknown_column_is_named(tmp_path: Path) -> None:
    with _store(tmp_path) as store, pytest.raises(ValueError, match="unknown per-case columns \\['tokens'\\]"):
        case_frames.case_tokens(store, "toy", columns=("tokens",))
