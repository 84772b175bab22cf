"""QMSumTask with a scripted model: case selection, seeding, request shapes per mode, the summary
built once per meeting, context-length failures, evidence recall and dry-run prompts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentlab.bench.config import Settings, SettingsError, load_settings
from agentlab.bench.datasets.qmsum import Meeting, QMSumCase, TextSpan, TranscriptTurn
from agentlab.bench.running import executor
from agentlab.bench.scoring.judge import Judge
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import CaseSelection, RunContext, get_task
from agentlab.bench.tasks.qmsum import (
    ANSWER_INSTRUCTION,
    ON_DEMAND_INSTRUCTION,
    PRELOAD_HEADER,
    PRELOAD_INSTRUCTION,
    QMSumTask,
    build_meeting_summary,
    evidence_recall,
    seed_events,
    seed_session,
)
from agentlab.events import Message
from agentlab.model.base import ContextLengthError, ModelInfo, ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.recall import RecallPolicy
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import PREVIOUS_SUMMARY_LABEL

SUMMARY_TEXT = "The team reviewed the remote design, its budget and the launch plan."
FILLER = ["We should revisit the schedule again.", "I agree with that plan.", "Let me check my notes.",
          "That sounds fine to me.", "Could you repeat the last point?"]


def meeting(n_turns: int = 30, meeting_id: str = "Tiny001") -> Meeting:
    turns = []
    for i in range(n_turns):
        content = FILLER[i % len(FILLER)]
        if i == 4:
            content = "Alice thinks the zebra budget should stay at forty euros."
        if i == 12:
            content = "The zebra stripes on the casing look odd."
        turns.append(TranscriptTurn(speaker="Carol" if i % 2 else "Dave", content=f"  {content} "))
    return Meeting(meeting_id, "Product", tuple(turns), (), (), ())


def qcase(m: Meeting, number: int = 1, query: str = "What did Alice say about the zebra budget?",
          spans: tuple[TextSpan, ...] = (TextSpan(4, 6), TextSpan(20, 21))) -> QMSumCase:
    return QMSumCase(f"{m.meeting_id}_specific_{number:02d}", m, "specific", query,
                     "Alice wanted the budget kept at forty euros.", spans)


def task_and_settings() -> tuple[QMSumTask, Settings]:
    task = get_task("qmsum")
    assert isinstance(task, QMSumTask)
    return task, load_settings("qmsum", task.default_settings())


def answer_requests(model: ScriptedModel) -> list[ModelRequest]:
    return [r for r in model.requests if r.purpose == "answer"]


def reply_by_purpose(answer: object = "Alice wanted the zebra budget kept at forty euros.") -> object:
    def reply(request: ModelRequest) -> str | Message:
        if request.purpose == "summary":
            return SUMMARY_TEXT
        if request.purpose == "judge":
            return json.dumps({"correct": True, "confidence": 0.75, "reason": "same point"})
        return answer(request) if callable(answer) else str(answer)

    return reply


async def run(tmp_path: Path, mode: str, items: list[QMSumCase], model: ScriptedModel, *,
              judge: bool = False, concurrency: int = 1,
              settings: Settings | None = None) -> tuple[ResultStore, executor.RunSummary]:
    task, default = task_and_settings()
    settings = settings or default
    selection = CaseSelection([task.case_from(i) for i in items], dataset_sha256="fixture", loaded=len(items))
    request = executor.RunRequest(benchmark="qmsum", mode=mode, model_spec="scripted", settings=settings,
                                  judge_spec="scripted" if judge else None, concurrency=concurrency, progress=False)
    store = ResultStore(tmp_path / "results.duckdb")
    summary = await executor.run_task(task, request, model=model, store=store, selection=selection,
                                      judge=Judge(model, "scripted") if judge else None)
    return store, summary


def case_rows(store: ResultStore, run_id: str) -> dict[str, tuple[str, str | None, dict]]:
    rows = store.query("SELECT case_id, status, error_code, metadata FROM cases WHERE run_id = ?", [run_id])
    return {r[0]: (r[1], r[2], json.loads(r[3])) for r in rows}


# --------------------------------------------------------------------------------- selection


def test_case_ids_and_order_on_the_real_test_split() -> None:
    data_dir = os.environ.get("AGENTLAB_DATA_DIR", "")
    if not data_dir or not (Path(data_dir) / "qmsum").is_dir():
        pytest.skip("needs AGENTLAB_DATA_DIR with the QMSum test split")
    task, settings = task_and_settings()
    selection = task.load_cases(settings)
    assert (len(selection.cases), selection.loaded) == (189, 244)
    assert [c.id for c in selection.cases[:6]] == [
        "Bed003_specific_01", "Bed008_specific_01", "Bed016_specific_01",
        "Bmr006_specific_01", "Bmr014_specific_01", "Bmr023_specific_01",
    ]
    first = selection.cases[0]
    assert first.metadata["meeting_id"] == "Bed003" and first.metadata["support_distance_from_end"] >= 80
    assert all(c.metadata["support_distance_from_end"] >= 80 for c in selection.cases)


def test_seeded_turns_are_numbered_user_events_1ms_apart() -> None:
    events = seed_events(meeting(3), "s1")
    assert [e.text for e in events] == [
        "[Turn 001] Dave: We should revisit the schedule again.",
        "[Turn 002] Carol: I agree with that plan.",
        "[Turn 003] Dave: Let me check my notes.",
    ]
    assert {e.role for e in events} == {"user"} and {e.author for e in events} == {"user"}
    assert [e.id for e in events] == ["s1-0000", "s1-0001", "s1-0002"]
    gaps = [round(b.timestamp - a.timestamp, 6) for a, b in zip(events, events[1:], strict=False)]
    assert gaps == [0.001, 0.001]


# ------------------------------------------------------------------------------ request shapes


async def test_long_context_sends_every_turn_then_the_question(tmp_path: Path) -> None:
    m = meeting()
    item = qcase(m)
    model = ScriptedModel(default_reply=reply_by_purpose())  # type: ignore[arg-type]
    store, summary = await run(tmp_path, "long_context", [item], model)
    assert (summary.ok, summary.failed) == (1, 0)
    [request] = model.requests
    task, settings = task_and_settings()
    assert request.messages == task.answer_messages(item, "long_context", settings)
    assert request.messages[0] == Message.system(ANSWER_INSTRUCTION)
    assert len(request.messages) == 1 + 30 + 1 and request.messages[-1] == Message.user(item.query)
    assert not request.tools
    assert (request.config.temperature, request.config.max_tokens) == (0.0, 384)
    _, _, meta = case_rows(store, summary.run_id)[item.case_id]
    assert meta["answer_calls"] == 1 and meta["answer_prompt_tokens"] > 0 and "summary_chars" not in meta
    metrics = {r[0] for r in store.query("SELECT metric FROM scores WHERE run_id = ?", [summary.run_id])}
    assert metrics == {"rouge1", "rouge2", "rougeL", "f1", "bleu1"}


async def test_summary_mode_prompt_holds_instruction_summary_and_question_only(tmp_path: Path) -> None:
    m = meeting()
    item = qcase(m)
    model = ScriptedModel(default_reply=reply_by_purpose())  # type: ignore[arg-type]
    store, summary = await run(tmp_path, "summary", [item], model)
    assert (summary.ok, summary.failed) == (1, 0)
    summary_calls = [r for r in model.requests if r.purpose == "summary"]
    # The summariser saw the whole transcript (it fits the 8k window in one step).
    assert len(summary_calls) == 1 and "[Turn 030]" in summary_calls[0].messages[-1].content
    [answer] = answer_requests(model)
    task, settings = task_and_settings()
    assert answer.messages == task.answer_messages(item, "summary", settings, SUMMARY_TEXT)
    assert len(answer.messages) == 2 and SUMMARY_TEXT in answer.messages[0].content
    assert not any("[Turn" in msg.content for msg in answer.messages)
    assert not answer.tools
    _, _, meta = case_rows(store, summary.run_id)[item.case_id]
    assert meta["summary_chars"] == len(SUMMARY_TEXT) and meta["summary_steps"] == 1
    assert meta["summary_built_by_this_case"] is True and meta["session_search_calls"] == 0


async def test_recall_mode_offers_tools_and_reads_hidden_turns(tmp_path: Path) -> None:
    m = meeting()
    item = qcase(m)

    def answer(request: ModelRequest) -> str | Message:
        tool_results = [msg for msg in request.messages if msg.role == "tool"]
        if not tool_results:
            return ScriptedModel.tool_call("session_search", {"query": "zebra budget", "scope": "current_hidden"})
        if len(tool_results) == 1:
            return ScriptedModel.tool_call("session_load", {"event_id": f"recall-{item.case_id}-0004"})
        return "Alice wanted the zebra budget kept at forty euros."

    model = ScriptedModel(default_reply=reply_by_purpose(answer))  # type: ignore[arg-type]
    store, summary = await run(tmp_path, "recall", [item], model, judge=True)
    assert (summary.ok, summary.failed) == (1, 0)
    first, second, third = answer_requests(model)
    assert {t["function"]["name"] for t in first.tools} == {"session_search", "session_load"}
    system = first.messages[0].content
    assert ON_DEMAND_INSTRUCTION.format(scope="current_hidden") in system
    assert SUMMARY_TEXT in system and "## Session recall" in system
    assert first.messages[1:] == [Message.user(item.query)]
    task, settings = task_and_settings()
    assert first.messages == task.answer_messages(item, "recall", settings, SUMMARY_TEXT)
    # The search result brings the hidden turn back; the load reads the window around it.
    assert "[Turn 005] Dave: Alice thinks the zebra budget" in second.messages[-1].content
    assert json.loads(third.messages[-1].content)["event_id"] == f"recall-{item.case_id}-0004"
    status, _, meta = case_rows(store, summary.run_id)[item.case_id]
    assert status == "ok"
    assert (meta["session_search_calls"], meta["session_load_calls"], meta["answer_calls"]) == (1, 1, 3)
    scores = dict(store.query("SELECT metric, value FROM scores WHERE run_id = ?", [summary.run_id]))
    assert scores["llm_score"] == 0.75
    assert scores["evidence_recall@5"] == 0.5 and scores["evidence_recall@10"] == 0.5


async def test_preload_path_puts_the_hidden_turns_in_the_request_without_tools(tmp_path: Path) -> None:
    m = meeting()
    item = qcase(m)
    task, settings = task_and_settings()
    settings = settings.with_values("recall", qa="preload")
    model = ScriptedModel(default_reply=reply_by_purpose())  # type: ignore[arg-type]
    store, summary = await run(tmp_path, "recall", [item], model, settings=settings)
    assert (summary.ok, summary.failed) == (1, 0)
    (only,) = answer_requests(model)
    assert only.tools == []
    system = only.messages[0].content
    assert PRELOAD_INSTRUCTION in system and "## Session recall" not in system
    # Order: instruction, summary, recalled turns; the question comes last on its own.
    assert system.index(PRELOAD_INSTRUCTION) < system.index(SUMMARY_TEXT) < system.index(PRELOAD_HEADER)
    assert only.messages[1:] == [Message.user(item.query)]
    # The evidence turn comes with its session_load window (one turn either side).
    assert "[Turn 004] Carol:" in system and "[Turn 005] Dave: Alice thinks the zebra budget" in system
    assert "[Turn 006] Carol:" in system
    status, _, meta = case_rows(store, summary.run_id)[item.case_id]
    assert status == "ok" and meta["recall_path"] == "preload"
    assert meta["recall_hits"] >= 1 and meta["recall_turns"] >= 3 and meta["tool_calls"] == 0
    assert meta["prompt_version"].endswith("qmsum-preload-v1")
    preloaded = system[system.index(PRELOAD_HEADER):]
    assert only.messages == task.answer_messages(item, "recall", settings, SUMMARY_TEXT, preloaded)
    table = task.report_tables(store)["recall"]
    assert table[["mode", "recall_path", "n_cases", "tool_calls"]].values.tolist() == [["recall", "preload", 1, 0.0]]


async def test_a_meetings_questions_run_back_to_back(tmp_path: Path) -> None:
    a, b = meeting(meeting_id="MeetA"), meeting(meeting_id="MeetB")
    # Published order is round-robin by meeting; the executor groups each meeting's questions.
    items = [qcase(a, 1, query="A one?"), qcase(b, 1, query="B one?"), qcase(a, 2, query="A two?"),
             qcase(b, 2, query="B two?")]
    model = ScriptedModel(default_reply=reply_by_purpose())  # type: ignore[arg-type]
    await run(tmp_path, "long_context", items, model, concurrency=1)
    assert [r.messages[-1].content for r in answer_requests(model)] == ["A one?", "A two?", "B one?", "B two?"]


def test_recall_path_must_be_known() -> None:
    task, settings = task_and_settings()
    with pytest.raises(SettingsError, match=r"\[recall\] qa must be one of tool, preload"):
        task.instruction("recall", settings.with_values("recall", qa="magic"))


# ------------------------------------------------------------------------ summary reuse / rolling


async def test_the_summary_is_built_once_per_meeting(tmp_path: Path) -> None:
    m = meeting()
    items = [qcase(m, 1), qcase(m, 2, query="What did Dave say about the schedule?")]
    model = ScriptedModel(default_reply=reply_by_purpose())  # type: ignore[arg-type]
    store, summary = await run(tmp_path, "summary", items, model, concurrency=2)
    assert (summary.ok, summary.failed) == (2, 0)
    assert [r.purpose for r in model.requests].count("summary") == 1
    assert len(answer_requests(model)) == 2
    purposes = dict(store.query("SELECT purpose, count(*) FROM calls WHERE run_id = ? GROUP BY purpose",
                                [summary.run_id]))
    assert purposes == {"summary": 1, "answer": 2}
    built_here = [meta["summary_built_by_this_case"] for _, _, meta in case_rows(store, summary.run_id).values()]
    assert sorted(built_here) == [False, True]


async def test_small_window_summarises_the_meeting_in_rolling_steps() -> None:
    task, settings = task_and_settings()
    seen: list[str] = []

    def summarise(request: ModelRequest) -> str:
        seen.append(request.messages[-1].content)
        return f"summary step {len(seen)}"

    model = ScriptedModel(default_reply=summarise, info=ModelInfo("tiny", 500))  # type: ignore[arg-type]
    ctx = RunContext(benchmark="qmsum", mode="summary", model=model, settings=settings)
    m = meeting(40)
    built = await build_meeting_summary(m, ctx, task.summary_policy(settings))
    assert built.covered == 40 and built.steps == len(seen) > 2
    assert built.text == f"summary step {len(seen)}"
    assert "[Turn 001]" in seen[0] and "[Turn 040]" not in seen[0] and "[Turn 040]" in seen[-1]
    assert all(PREVIOUS_SUMMARY_LABEL in text for text in seen[1:])


async def test_a_summary_that_stops_advancing_fails_the_case(tmp_path: Path) -> None:
    def reply(request: ModelRequest) -> str:
        return "" if request.purpose == "summary" else "answer"

    model = ScriptedModel(default_reply=reply)  # type: ignore[arg-type]
    store, summary = await run(tmp_path, "summary", [qcase(meeting())], model)
    assert summary.failed == 1
    [(status, code, _)] = case_rows(store, summary.run_id).values()
    assert (status, code) == ("failed", "summary_incomplete")


# --------------------------------------------------------------------------- context length


async def test_an_oversized_long_context_prompt_fails_fast_as_context_length(tmp_path: Path) -> None:
    model = ScriptedModel(default_reply="never sent", info=ModelInfo("small", 200))
    store, summary = await run(tmp_path, "long_context", [qcase(meeting())], model)
    assert (summary.ok, summary.failed, summary.errors) == (0, 1, {"context_length": 1})
    assert model.requests == []
    [(status, code, _)] = case_rows(store, summary.run_id).values()
    assert (status, code) == ("failed", "context_length")
    error = store.query("SELECT error FROM cases WHERE run_id = ?", [summary.run_id])[0][0]
    assert "200-token window" in error


async def test_a_context_length_error_from_the_model_is_a_failed_case(tmp_path: Path) -> None:
    model = ScriptedModel([ContextLengthError("request exceeds the available context size")])
    store, summary = await run(tmp_path, "long_context", [qcase(meeting())], model)
    assert (summary.ok, summary.failed, summary.errors) == (0, 1, {"context_length": 1})
    assert len(model.requests) == 1
    assert store.query("SELECT count(*) FROM calls WHERE run_id = ? AND error IS NOT NULL", [summary.run_id]) == [(1,)]


# --------------------------------------------------------------------------- evidence recall


def test_span_hits_counts_spans_and_relevance() -> None:
    item = qcase(meeting())
    assert item.span_hits([4]) == (1, True)
    assert item.span_hits([6, 21]) == (2, True)
    assert item.span_hits([12, 0]) == (0, False)


async def test_evidence_recall_on_a_tiny_meeting() -> None:
    m = meeting()
    service = InMemorySessionService()
    session = await seed_session(service, m, "ev")
    policy = RecallPolicy(search_mode="lexical")
    # "zebra budget" matches turn 4 (in the first span) and turn 12 (outside both spans).
    found = await evidence_recall(service, session, qcase(m), policy)
    assert found == {"evidence_recall@5": 0.5, "evidence_hit@5": 1.0,
                     "evidence_recall@10": 0.5, "evidence_hit@10": 1.0}
    # Only the distractor turn matches: nothing relevant is found.
    missed = await evidence_recall(service, session, qcase(m, query="How did the casing stripes look?"), policy)
    assert missed["evidence_recall@5"] == 0.0 and missed["evidence_hit@10"] == 0.0


def test_retrieval_only_averages_over_cases() -> None:
    task, settings = task_and_settings()
    m = meeting()
    cases = [task.case_from(qcase(m, 1)), task.case_from(qcase(m, 2, query="How did the casing stripes look?"))]
    result = task.retrieval_only(cases, "recall", settings)
    assert result["search_mode"] == "lexical"
    assert result["evidence_recall@5"] == 0.25 and result["evidence_hit@5"] == 0.5


# -------------------------------------------------------------------------------- dry runs


def test_dry_run_prompts_per_mode() -> None:
    task, settings = task_and_settings()
    item = qcase(meeting())
    case = task.case_from(item)
    [long_prompt] = task.dry_run_prompts(case, "long_context", settings)
    assert long_prompt == task.answer_messages(item, "long_context", settings)
    summariser, answer = task.dry_run_prompts(case, "summary", settings)
    assert "[Turn 001]" in summariser[-1].content and "[Turn 030]" in summariser[-1].content
    assert answer == task.answer_messages(item, "summary", settings, "")
    _, recall_answer = task.dry_run_prompts(case, "recall", settings)
    assert "## Session recall" in recall_answer[0].content and "## Session recall" not in answer[0].content


async def test_rerunning_the_same_run_skips_finished_cases(tmp_path: Path) -> None:
    m = meeting()
    items = [qcase(m, 1), qcase(m, 2, query="What did Dave say about the schedule?")]
    model = ScriptedModel(default_reply=reply_by_purpose())  # type: ignore[arg-type]
    store, first = await run(tmp_path, "summary", items, model)
    calls_after_first = len(model.requests)
    store.close()
    store, again = await run(tmp_path, "summary", items, model)
    assert again.run_id == first.run_id
    assert (again.already_done, again.attempted) == (2, 0)
    assert len(model.requests) == calls_after_first
    assert store.query("SELECT count(*), count(DISTINCT case_id) FROM cases WHERE run_id = ?", [first.run_id]) == [(2, 2)]
