"""LLM-free retention (agentlab/bench/retention/questions.py) over both deliveries (agentlab/bench/retention/delivery.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import agentlab.policies.arms as arms
from agentlab.bench.datasets.qmsum import Meeting, QMSumCase, TextSpan, TranscriptTurn
from agentlab.bench.retention.delivery import (
    EvidenceMap,
    EvidencePiece,
    EvidenceUnit,
    question_event,
)
from agentlab.bench.retention.questions import (
    Question,
    aggregate,
    measure_retention,
    model_arms,
    request_points,
    retention_arms,
    summarising_arm,
)
from agentlab.bench.tasks.qmsum_delivery import qmsum_tool_delivery, qmsum_tool_evidence, qmsum_turn_evidence
from agentlab.compaction import CompactionPolicy
from agentlab.core import project
from agentlab.events import OBJ_USER, Event, Message
from agentlab.model.base import ModelInfo
from agentlab.model.scripted import ScriptedModel
from agentlab.policies import mechanism
from agentlab.policies.arms import Arm
from agentlab.recall import RecallPolicy
from agentlab.session.base import Session

LONG = retention_arms()["long_context"]


def real_data(name: str) -> bool:
    root = os.environ.get("AGENTLAB_DATA_DIR")
    return bool(root) and (Path(root) / name).is_dir()


def toy_meeting(n: int = 12) -> Meeting:
    topics = ["zebra budget", "remote control colour", "penguin marketing", "battery life"]
    turns = tuple(TranscriptTurn(f"Speaker {i % 3}", f"Turn {i} is about the {topics[i // 3 % 4]} and nothing else "
                                 + "filler words " * 20) for i in range(n))
    return Meeting("Toy001", "Product", turns, (), (), ())


def toy_case(meeting: Meeting, spans: tuple[TextSpan, ...], query: str = "What about the zebra budget?") -> QMSumCase:
    return QMSumCase("Toy001_specific_01", meeting, "specific", query, "an answer", spans)


def seeded_turns(meeting: Meeting, session_id: str) -> list[Event]:
    return [Event(author="user", choices=[Message.user(t)], object=OBJ_USER, id=f"{session_id}-{i:04d}",
                  timestamp=1_700_000_000.0 + i / 1000) for i, t in enumerate(meeting.turn_texts())]


def direct_count(evidence: EvidenceMap, events: list[Event]) -> float:
    """Share of units whose every piece is verbatim in some event of the seeded history."""
    texts = [" ".join(e.text.split()) for e in events]
    ok = [all(any(" ".join(p.text.split()) in t for t in texts) for p in u.pieces) for u in evidence.units]
    return sum(ok) / len(ok)


async def one(events: list[Event], question: Question, arm: Arm, **kwargs: object):  # type: ignore[no-untyped-def]
    rows = await measure_retention(events, [question], arm, session_id="s", delivery="test", **kwargs)  # type: ignore[arg-type]
    assert len(rows) == 1
    return rows[0]


# ------------------------------------------------------------------- (a) turn delivery, everything visible


async def test_turn_delivery_long_context_matches_a_direct_count_on_a_hand_made_case() -> None:
    meeting = toy_meeting()
    events = seeded_turns(meeting, "s")
    case = toy_case(meeting, (TextSpan(0, 1), TextSpan(10, 11)))
    evidence = qmsum_turn_evidence(case, events)
    # a unit whose text the history does not hold: the direct count and the projection agree it is absent
    evidence = EvidenceMap((*evidence.units, EvidenceUnit("ghost", (EvidencePiece("s-0000", "never said"),))))
    row = await one(events, Question(case.case_id, case.query, evidence), LONG)
    assert row.retained == direct_count(evidence, events) == pytest.approx(2 / 3)
    assert row.lost_units == ("ghost",)
    assert row.n_requests == 1 and row.peak_prompt_tokens == row.final_prompt_tokens == row.total_prompt_tokens
    assert row.recoverable == {5: None, 10: None}  # no recall tool
    assert row.evidence_rouge_recall is None


@pytest.mark.skipif(not real_data("qmsum"), reason="AGENTLAB_DATA_DIR with qmsum/ not available")
async def test_turn_delivery_long_context_on_real_qmsum_cases() -> None:
    from agentlab.bench.datasets.qmsum import load_qmsum, select_cases
    from agentlab.bench.tasks.qmsum import seed_events

    cases = select_cases(load_qmsum(), limit=3)
    for case in cases:
        events = seed_events(case.meeting, "s")
        evidence = qmsum_turn_evidence(case, events)
        assert len(evidence.units) == len(case.spans) and not evidence.missing
        row = await one(events, Question(case.case_id, case.query, evidence), LONG, context_window=None)
        assert row.retained == direct_count(evidence, events) == 1.0
        request = await project(Session("a", "u", "s", events=list(events)), [], question_event("s", case.query, events),
                                ModelInfo("m", 0))
        assert row.final_prompt_tokens == request.prompt_tokens


@pytest.mark.skipif(not real_data("locomo"), reason="AGENTLAB_DATA_DIR with locomo/ not available")
async def test_turn_delivery_long_context_on_real_locomo_cases() -> None:
    from agentlab.bench.datasets.locomo import load_locomo
    from agentlab.bench.tasks.locomo import seed_plan
    from agentlab.bench.tasks.locomo_delivery import locomo_turn_evidence

    conversation = load_locomo().conversations[0]
    events = [e for _, session in seed_plan(conversation) for e in session]
    for qa in conversation.qa[:5]:
        evidence = locomo_turn_evidence(qa, events)
        assert evidence.units
        row = await one(events, Question(qa.qa_id, qa.question, evidence), LONG, context_window=None)
        assert row.retained == direct_count(evidence, events) == 1.0


# -------------------------------------------------- (b) tool delivery + clearing below the history's size


async def test_tool_delivery_with_clearing_loses_evidence_as_counted_by_hand() -> None:
    meeting = toy_meeting(12)
    td = qmsum_tool_delivery(meeting, "s", chunk_turns=3)  # 4 reads: turns 0-2, 3-5, 6-8, 9-11
    case = toy_case(meeting, (TextSpan(1, 1), TextSpan(10, 11), TextSpan(2, 3)))
    evidence = qmsum_tool_evidence(case, td.events)
    history_tokens = sum(e.token_count or 0 for e in td.events)
    # LangChain's edit with keep=1 and a trigger far below the history: only the last read survives,
    # so span 10-11 (read 4) stays; span 1-1 (read 1) and span 2-3 (reads 1 and 2) are lost.
    arm = Arm("clear", "lossy", lambda settings, model: [mechanism("langchain_clear_tool_uses", trigger=100, keep=1)])
    row = await one(list(td.events), Question(case.case_id, case.query, evidence), arm, tools=td.tools,
                    context_window=history_tokens // 2)
    assert row.retained == pytest.approx(1 / 3)
    assert set(row.lost_units) == {"span0:1-1", "span2:2-3"}
    full = await one(list(td.events), Question(case.case_id, case.query, evidence), LONG, tools=td.tools)
    assert full.retained == 1.0 and full.final_prompt_tokens > row.final_prompt_tokens


async def test_recoverable_counts_the_lost_units_one_search_finds() -> None:
    meeting = toy_meeting(12)
    td = qmsum_tool_delivery(meeting, "s", chunk_turns=3)
    # span 0-1 is about the zebra budget (read 1), span 6-7 about penguin marketing (read 3)
    case = toy_case(meeting, (TextSpan(0, 1), TextSpan(6, 7)),
                    query="What was said about the zebra budget and penguin marketing?")
    evidence = qmsum_tool_evidence(case, td.events)
    arm = Arm("compaction_recall", "lossy",
              lambda settings, model: [CompactionPolicy(enabled=True, tool_result_max_tokens=50), RecallPolicy()])
    row = await one(list(td.events), Question(case.case_id, case.query, evidence), arm, tools=td.tools, ks=(1, 10))
    assert row.retained == 0.0  # every read is over 50 tokens and historical at the question: placeholders
    assert row.recoverable[1] == 0.5  # the top hit is one of the two reads
    assert row.recoverable[10] == 1.0  # both matching reads are among 10 hits
    assert row.n_hidden_events == 4
    # the same arm without the search tool has no recoverable figure
    bare = Arm("compaction", "lossy", lambda settings, model: [CompactionPolicy(enabled=True, tool_result_max_tokens=50)])
    row = await one(list(td.events), Question(case.case_id, case.query, evidence), bare, tools=td.tools, ks=(1, 10))
    assert row.retained == 0.0 and row.recoverable == {1: None, 10: None}


# ------------------------------------------------------------------------------ (c) peak and total tokens


async def test_peak_and_total_are_over_every_request_a_reading_agent_sends() -> None:
    meeting = toy_meeting(12)
    td = qmsum_tool_delivery(meeting, "s", chunk_turns=3)
    case = toy_case(meeting, (TextSpan(0, 0),))
    question = Question(case.case_id, case.query, qmsum_tool_evidence(case, td.events))
    points = request_points(list(td.events))
    assert [length for length, _ in points] == [1, 3, 5, 7]  # before each of the 4 calls
    by_hand = []
    for length, current in points:
        result = await project(Session("a", "u", "s", events=list(td.events[:length])), [], current,
                               ModelInfo("m", 0), tools=td.tools, context_window=8192)
        by_hand.append(result.prompt_tokens)
    final = await project(Session("a", "u", "s", events=list(td.events)), [],
                          question_event("s", case.query, list(td.events)), ModelInfo("m", 0), tools=td.tools,
                          context_window=8192)
    by_hand.append(final.prompt_tokens)
    assert by_hand == sorted(by_hand) and len(set(by_hand)) == len(by_hand)  # long context only grows
    row = await one(list(td.events), question, LONG, tools=td.tools)
    assert (row.n_requests, row.peak_prompt_tokens, row.total_prompt_tokens) == (5, by_hand[-1], sum(by_hand))
    # a clearing arm (stateless): peak and total are the max and the sum of its own requests, each
    # projected by hand; clearing keeps every request under the long context's
    arm = Arm("clear", "lossy", lambda settings, model: [mechanism("langchain_clear_tool_uses", trigger=300, keep=1)])
    cleared = await one(list(td.events), question, arm, tools=td.tools)
    own = []
    for length, current in [*points, (len(td.events), question_event("s", case.query, list(td.events)))]:
        result = await project(Session("a", "u", "s", events=list(td.events[:length])), arm.mechanisms(None, None), current,
                               ModelInfo("m", 0), tools=td.tools, context_window=8192)
        own.append(result.prompt_tokens)
    assert (cleared.peak_prompt_tokens, cleared.total_prompt_tokens, cleared.final_prompt_tokens) == \
        (max(own), sum(own), own[-1])
    assert all(c <= f for c, f in zip(own, by_hand, strict=True)) and own[-1] < by_hand[-1]
    assert cleared.peak_prompt_tokens < row.peak_prompt_tokens
    summary = aggregate([row, cleared], context_window=by_hand[-1] - 1)
    assert [(s.arm, s.n_over_window) for s in summary] == [("long_context", 1), ("clear", 0)]


# ----------------------------------------------------------------------------------------- the arm list


def test_arm_lists_split_llm_free_from_summarising() -> None:
    free, needing = retention_arms(), model_arms()
    assert not set(free) & set(needing)
    assert {"long_context", "compaction", "langchain_clear_tool_uses", "inspect_edit", "inspect_trim",
            "anthropic_clear_tool_uses", "codex_truncation"} <= set(free)
    assert {"langchain_summarization", "inspect_summary", "langmem_summarize", "adk_compaction", "codex_compaction",
            "letta_sliding_window"} <= set(needing)
    assert all(not a.needs_model for a in free.values()) and all(r.reason for r in needing.values())
    assert all(a.mechanisms(None, None) is not a.mechanisms(None, None) for a in free.values())  # fresh each time
    # A view over the registry: every registered generic arm is in one list or the other.
    assert set(free) | set(needing) == {"long_context", *arms.generic_names()}
    assert "rolling_summary" in needing and "compaction+recall" in free and "inspect_summary+recall" in needing
    # With a task: only the arms it runs (one it declared inapplicable is in neither).
    task = type("T", (), {"modes": ("m",), "inapplicable_arms": {"inspect_trim": "test"}})()
    assert "inspect_trim" not in retention_arms(task) and "inspect_trim+recall" not in retention_arms(task)


async def test_a_summarising_arm_needs_a_model_and_reports_rouge_of_the_evidence() -> None:
    meeting = toy_meeting(12)
    td = qmsum_tool_delivery(meeting, "s", chunk_turns=3)
    case = toy_case(meeting, (TextSpan(0, 0),))
    question = Question(case.case_id, case.query, qmsum_tool_evidence(case, td.events))
    arm = summarising_arm("langchain_summarization", trigger_tokens=300, keep_value=2)
    with pytest.raises(ValueError, match="needs a model"):
        await one(list(td.events), question, arm, tools=td.tools)
    model = ScriptedModel(default_reply=meeting.turn_text(0), info=ModelInfo("scripted", 8192))
    row = await one(list(td.events), question, arm, tools=td.tools, model=model)
    assert row.retained == 1.0  # the scripted summary repeats the evidence turn verbatim
    assert row.evidence_rouge_recall == pytest.approx(1.0)


# ------------------------------------------------------------------------------------ whole benchmarks


async def test_longmemeval_groups_in_both_deliveries(tmp_path: Path) -> None:
    from agentlab.bench.datasets.longmemeval import parse_file, write_longmemeval_fixture
    from agentlab.bench.retention.delivery import Delivery
    from agentlab.bench.retention.questions import measure_groups
    from agentlab.bench.tasks.longmemeval import haystack_events
    from agentlab.bench.tasks.longmemeval_delivery import longmemeval_groups

    items = [q for q in parse_file(write_longmemeval_fixture(tmp_path / "lme.json", 4)).questions
             if not q.is_abstention]
    with pytest.raises(ValueError, match="seed"):
        longmemeval_groups(items, Delivery("turns"))
    turns = longmemeval_groups(items, Delivery("turns"), seed=haystack_events)
    tools = longmemeval_groups(items, Delivery("tool_results"))
    # the evidence sits in the middle one of three sessions; keep=1 keeps only the last one opened
    clear = Arm("clear", "lossy", lambda settings, model: [mechanism("langchain_clear_tool_uses", trigger=50, keep=1)])
    timed = await measure_groups([*turns, *tools], [LONG, clear], context_window=8192)
    by: dict[tuple[str, str], list[float | None]] = {}
    for r in timed.rows:
        by.setdefault((r.delivery, r.arm), []).append(r.retained)
    n = len(items)
    assert by[("turns", "long_context")] == by[("tool_results", "long_context")] == [1.0] * n
    assert by[("turns", "clear")] == [1.0] * n  # no tool result to clear in turn delivery
    assert by[("tool_results", "clear")] == [0.0] * n
    assert timed.seconds > 0
