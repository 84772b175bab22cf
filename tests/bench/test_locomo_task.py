"""LoCoMo task: category rules, both name mappings, the three modes and retrieval on a tiny conversation."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from agentlab.bench.config import apply_overrides, load_settings
from agentlab.bench.datasets.locomo import LoCoMoData, parse_conversation
from agentlab.bench.running import executor
from agentlab.bench.scoring.judge import Judge
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import get_task
from agentlab.bench.tasks import locomo as lc
from agentlab.bench.tasks.locomo_history import parse_session_date
from agentlab.events import Event, Message
from agentlab.model.base import ModelError, ModelInfo, ModelRequest
from agentlab.model.scripted import ScriptedModel

RAW = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Caroline",
        "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel! I went to a support group yesterday."},
            {"speaker": "Melanie", "dia_id": "D1:2", "text": "I painted a sunrise at the lake last week.",
             "img_url": ["http://example.invalid/p.jpg"], "blip_caption": "a photo of a sunrise painting"},
            {"speaker": "Caroline", "dia_id": "D1:3", "text": "That sounds lovely."},
        ],
        "session_2_date_time": "10:00 am on 20 June, 2023",
        "session_2": [
            {"speaker": "Caroline", "dia_id": "D2:1", "text": "I adopted a puppy named Oscar."},
            {"speaker": "Melanie", "dia_id": "D2:2", "text": "My kids love camping in the mountains."},
        ],
    },
    "qa": [
        {"question": "What did Melanie paint at the lake?", "answer": "a sunrise", "evidence": ["D1:2"], "category": 4},
        {"question": "What are the names of Caroline's pets?", "answer": "Oscar, Luna", "evidence": ["D2:1"],
         "category": 1},
        {"question": "When did Caroline go to the support group?", "answer": "7 May 2023", "evidence": ["D1:1"],
         "category": 2},
        {"question": "What might Melanie's kids enjoy?", "answer": "camping; also hiking", "evidence": ["D2:2"],
         "category": 3},
        {"question": "What did Caroline paint at the lake?", "adversarial_answer": "a sunrise", "evidence": ["D1:2"],
         "category": 5},
    ],
}

#: The scripted answers and their official scores, computed by hand.
ANSWERS = {
    # cat 4: "sunrise" vs "sunrise" after articles are dropped -> 1
    "What did Melanie paint at the lake?": "a sunrise",
    # cat 1: gold split on commas: Oscar -> 1, Luna -> 0 -> 0.5
    "What are the names of Caroline's pets?": "Oscar",
    # cat 2: plain stemmed F1 -> 1
    "When did Caroline go to the support group?": "7 May 2023",
    # cat 3: gold cut at ';' -> "camping"; answer stems hike, camp ("and" dropped) -> P 1/2, R 1 -> 2/3
    "What might Melanie's kids enjoy?": "hiking and camping",
    # cat 5: the refusal contains "not mentioned" -> 1
    "What did Caroline paint at the lake?": "Not mentioned in the conversation.",
}
OFFICIAL = {"conv-x_qa_0001": 1.0, "conv-x_qa_0002": 0.5, "conv-x_qa_0003": 1.0, "conv-x_qa_0004": 2 / 3,
            "conv-x_qa_0005": 1.0}


@pytest.fixture(autouse=True)
def tiny_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    data = LoCoMoData((parse_conversation(RAW, "fixture"),), "fixture-sha")
    monkeypatch.setattr(lc, "load_locomo", lambda: data)


def settings(*overrides: str):  # type: ignore[no-untyped-def]
    task = get_task("locomo")
    return apply_overrides(load_settings("locomo", task.default_settings()), list(overrides))


def reply(request: ModelRequest) -> str | Message:
    if request.purpose == "judge":
        return json.dumps({"label": "CORRECT", "confidence": 0.8, "reason": "same fact"})
    if request.purpose == "memory":
        conversation = request.messages[-1].content.split("New conversation messages:")[-1]
        text = "Melanie painted a sunrise at the lake." if "sunrise" in conversation else \
            "Caroline adopted a puppy named Oscar."
        return json.dumps({"operations": [{"op": "add", "text": text, "kind": "fact"}]})
    tools = [t["function"]["name"] for t in request.tools]
    if "memory_search" in tools and not any(m.role == "tool" for m in request.messages):
        return ScriptedModel.tool_call("memory_search", {"query": "Melanie paint lake"})
    for question, answer in ANSWERS.items():
        if question in request.messages[-1].content or question == request.messages[-1].content:
            return answer
    # memory mode: the last message is the tool result
    asked = next(m.content for m in request.messages if m.role == "user")
    return ANSWERS[asked]


def scripted(window: int = 32_000) -> ScriptedModel:
    return ScriptedModel(info=ModelInfo("scripted", window), default_reply=reply)  # type: ignore[arg-type]


async def run(mode: str, store: ResultStore, model: ScriptedModel, *overrides: str, **kw: object) -> executor.RunSummary:
    request = executor.RunRequest(benchmark="locomo", mode=mode, model_spec="scripted", settings=settings(*overrides),
                                  judge_spec="scripted", progress=False, **kw)  # type: ignore[arg-type]
    return await executor.run_task(get_task("locomo"), request, model=model, store=store,
                                   judge=Judge(model, "scripted"))


def case_scores(store: ResultStore, run_id: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for case_id, metric, value in store.query("SELECT case_id, metric, value FROM scores WHERE run_id = ?", [run_id]):
        out.setdefault(case_id, {})[metric] = value
    return out


# ------------------------------------------------------------------------------- units


def names(case) -> tuple[str, str, str]:  # type: ignore[no-untyped-def]
    return (case.metadata["category_official"], case.metadata["category_memory_report"],
            case.metadata["category_mem0"])


def test_cases_keep_the_category_id_and_three_name_mappings() -> None:
    cases = get_task("locomo").load_cases(settings()).cases
    assert len(cases) == 5
    first, pets, when, might, adversarial = cases
    assert first.metadata["category"] == 4
    # official evaluation.py / the memory report's counts / mem0's maintainers (mem0 issue #2609)
    assert names(first) == ("single-hop", "open-domain", "open-domain")
    assert names(pets) == ("multi-hop", "single-hop", "single-hop")
    assert names(when) == ("temporal", "multi-hop", "temporal")
    assert names(might) == ("open-domain", "temporal", "multi-hop")
    assert names(adversarial) == ("adversarial",) * 3
    # Adversarial: the gold text for the unigram metrics and the judge is the refusal; the trap is kept.
    assert adversarial.reference == lc.ADVERSARIAL_REFERENCE
    assert adversarial.metadata["adversarial_answer"] == "a sunrise"
    four = get_task("locomo").load_cases(settings("dataset.categories=1,2,3,4")).cases
    assert len(four) == 4


def test_evidence_ids_are_cleaned() -> None:
    assert lc.evidence_dia_ids(["D8:6; D9:17", "D", "D:11:26", "D9:1 D4:4 D4:6", "D8:6"]) == \
        ["D8:6", "D9:17", "D9:1", "D4:4", "D4:6"]


def test_session_seeding_roles_prefix_and_dates() -> None:
    conversation = parse_conversation(RAW, "fixture")
    plan = lc.seed_plan(conversation)
    assert [sid for sid, _ in plan] == ["conv-x-session_1", "conv-x-session_2"]
    events = plan[0][1]
    assert [e.role for e in events] == ["user", "assistant", "user"]
    assert events[1].text == "[SessionDate: 1:56 pm on 8 May, 2023] Melanie: I painted a sunrise at the lake last week."
    assert events[1].metadata["dia_id"] == "D1:2" and events[1].id == "conv-x:D1:2"
    assert events[0].timestamp == parse_session_date("1:56 pm on 8 May, 2023")
    assert plan[1][1][0].timestamp > events[-1].timestamp
    with_captions = lc.seed_plan(conversation, include_captions=True)[0][1][1].text
    assert with_captions.endswith("[shares a photo of a sunrise painting]")


def test_long_context_prompt_holds_the_dated_transcript_and_the_question() -> None:
    conversation = parse_conversation(RAW, "fixture")
    (message,) = lc.long_context_messages(conversation, "What did Melanie paint at the lake?")
    text = message.content
    assert message.role == "system"
    assert "SessionDate: 1:56 pm on 8 May, 2023\nCaroline: Hey Mel! I went to a support group yesterday." in text
    assert "\n\nSessionDate: 10:00 am on 20 June, 2023\n" in text
    assert text.endswith("Question: What did Melanie paint at the lake?\nAnswer:")
    assert "[shares" not in text and lc.FALLBACK_ANSWER in text


# ---------------------------------------------------------------------------- pipeline


async def test_long_context_scores_follow_the_official_category_rules(tmp_path: Path) -> None:
    model = scripted()
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("long_context", store, model)
        assert (summary.ok, summary.failed) == (5, 0)
        got = case_scores(store, summary.run_id)
        tables = get_task("locomo").report_tables(store)
    for case_id, expected in OFFICIAL.items():
        assert got[case_id]["locomo_f1"] == pytest.approx(expected), case_id
    pets = got["conv-x_qa_0002"]
    assert pets["set_f1"] == pytest.approx(2 / 3)  # {oscar} vs {oscar, luna}
    assert pets["bleu1"] == pytest.approx(math.exp(-1))  # precision 1, brevity penalty exp(1 - 2/1)
    assert got["conv-x_qa_0005"]["set_f1"] == 1.0 and got["conv-x_qa_0005"]["adversarial_refusal"] == 1.0
    assert all(scores["llm_score"] == 0.8 for scores in got.values())
    weighted = tables["weighted"].set_index("weighting")
    assert weighted.loc["5-category", "locomo_f1"] == pytest.approx(sum(OFFICIAL.values()) / 5)
    assert weighted.loc["4-category", "locomo_f1"] == pytest.approx((1 + 0.5 + 1 + 2 / 3) / 4)
    per_category = tables["per_category"].set_index("category")
    assert per_category.loc[1, "official"] == "multi-hop" and per_category.loc[1, "memory_report"] == "single-hop"
    assert per_category.loc[1, "mem0"] == "single-hop" and per_category.loc[3, "mem0"] == "multi-hop"
    assert per_category.loc[3, "locomo_f1"] == pytest.approx(2 / 3)
    cost = tables["cost_per_question"].iloc[0]
    assert cost["answer_calls_per_q"] == 1.0 and cost["answer_latency_p95_ms"] >= cost["answer_latency_p50_ms"] >= 0


async def test_failed_cases_and_unparsable_verdicts_count_zero_in_every_table(tmp_path: Path) -> None:
    """The published LLM score divides by all questions: hand-computed over the five questions."""
    from agentlab.bench import analysis

    def flaky(request: ModelRequest) -> str | Message:
        if request.purpose == "judge" and "What did Melanie paint" in request.messages[-1].content:
            return "CORRECT, I think"  # no JSON: the verdict does not parse
        if request.purpose == "answer" and "When did Caroline go" in request.messages[-1].content:
            raise ModelError("the server hung up")  # this question fails
        return reply(request)

    model = ScriptedModel(info=ModelInfo("scripted", 32_000), default_reply=flaky)  # type: ignore[arg-type]
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("long_context", store, model)
        assert (summary.ok, summary.failed) == (4, 1)
        (value, detail), = store.query("SELECT value, detail FROM scores WHERE run_id = ? AND case_id = "
                                       "'conv-x_qa_0001' AND metric = 'llm_score'", [summary.run_id])
        tables = get_task("locomo").report_tables(store)
        means = analysis.mode_means_df("locomo", store=store).set_index("metric")
    assert value == 0.0 and detail.startswith("parse_error:")
    weighted = tables["weighted"].set_index("weighting")
    five = weighted.loc["5-category"]
    # llm_score: q1 unparsed 0, q2 0.8, q3 failed 0, q4 0.8, q5 0.8 -> 2.4 / 5
    assert five["llm_score"] == pytest.approx(2.4 / 5)
    assert (five["n"], five["n_failed"], five["n_judge_unparsed"]) == (5, 1, 1)
    # locomo_f1: 1, 0.5, failed 0, 2/3, 1 over five; without the adversarial question, over four
    assert five["locomo_f1"] == pytest.approx((1 + 0.5 + 0 + 2 / 3 + 1) / 5)
    assert weighted.loc["4-category", "llm_score"] == pytest.approx(1.6 / 4)
    assert pd.isna(weighted.loc["4-category", "extraction_errors"])  # long_context extracts nothing
    per_category = tables["per_category"].set_index("category")
    assert per_category.loc[2, "n_failed"] == 1 and per_category.loc[2, "llm_score"] == 0.0
    assert per_category.loc[4, "n_judge_unparsed"] == 1 and per_category.loc[4, "llm_score"] == 0.0
    assert per_category.loc[3, "mem0"] == "multi-hop" and per_category.loc[2, "mem0"] == "temporal"
    # the store's tables apply the same rule
    assert means.loc["llm_score", "mean"] == pytest.approx(2.4 / 5) and means.loc["llm_score", "n_failed"] == 1


async def test_memory_mode_extraction_errors_appear_in_the_tables(tmp_path: Path) -> None:
    def failing_extraction(request: ModelRequest) -> str | Message:
        if request.purpose == "memory" and "sunrise" in request.messages[-1].content:
            raise ModelError("extraction call refused")  # session 1 of the conversation
        return reply(request)

    model = ScriptedModel(info=ModelInfo("scripted", 32_000), default_reply=failing_extraction)  # type: ignore[arg-type]
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("memory", store, model, limit=2, concurrency=1)
        tables = get_task("locomo").report_tables(store)
    assert summary.total_cases_ok + summary.failed == 2
    five = tables["weighted"].set_index("weighting").loc["5-category"]
    # one conversation, two sessions: one extraction pass failed
    assert (five["extraction_passes"], five["extraction_errors"]) == (2, 1)


async def test_long_context_beyond_the_window_is_a_context_length_failure(tmp_path: Path) -> None:
    model = scripted(window=100)
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("long_context", store, model, limit=2)
        codes = {c for (c,) in store.query("SELECT error_code FROM cases WHERE run_id = ?", [summary.run_id])}
        tables = get_task("locomo").report_tables(store)
    assert summary.failed == 2 and codes == {"context_length"}
    assert tables["weighted"].set_index("weighting").loc["5-category", "locomo_f1"] == 0.0  # failures count 0


async def test_session_recall_preloads_dated_events_in_one_call(tmp_path: Path) -> None:
    model = scripted()
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("session_recall", store, model, limit=1)
        assert summary.ok == 1
        calls = store.query("SELECT purpose FROM calls WHERE run_id = ?", [summary.run_id])
    answers = [r for r in model.requests if r.purpose == "answer"]
    assert len(answers) == 1 and [p for (p,) in calls].count("answer") == 1
    system = answers[0].messages[0].content
    assert "## Related Session Recall" in system
    assert "[SessionDate: 1:56 pm on 8 May, 2023] Melanie: I painted a sunrise at the lake" in system
    assert "created=2023-05-08" in system
    assert [m.role for m in answers[0].messages] == ["system", "user"]


async def test_a_question_never_recalls_another_questions_session() -> None:
    from agentlab.session.inmemory import InMemorySessionService

    conversation = parse_conversation(RAW, "fixture")
    service = InMemorySessionService()
    await lc.seed_sessions(service, conversation)
    other = await service.create_session(lc.APP_NAME, "conv-x", "qa-other")
    await service.append_event(other, Event(author="user", choices=[Message.user("paint lake sunrise lake lake")],
                                            filter_key="qa/other"))
    case = get_task("locomo").load_cases(settings()).cases[0]
    hits = await lc.question_preload(service, conversation, case, lc.recall_policy(settings()))
    assert hits and all(h.ref.session_id != "qa-other" for h in hits)
    assert lc.hit_dia_ids(hits)[0] == "D1:2"


async def test_memory_mode_extracts_once_per_conversation_then_searches(tmp_path: Path) -> None:
    model = scripted()
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await run("memory", store, model, limit=2, concurrency=1)
        assert (summary.ok, summary.failed) == (2, 0)
        rows = store.query("SELECT case_id, metadata FROM cases WHERE run_id = ? ORDER BY case_id", [summary.run_id])
        purposes = store.query("SELECT case_id, purpose, count(*) FROM calls WHERE run_id = ? GROUP BY ALL "
                               "ORDER BY ALL", [summary.run_id])
        got = case_scores(store, summary.run_id)
    meta = {case_id: json.loads(m) for case_id, m in rows}
    assert meta["conv-x_qa_0001"]["memories"] == 2 and meta["conv-x_qa_0001"]["extraction_passes"] == 2
    assert meta["conv-x_qa_0001"]["tool_calls"] == {"memory_search": 1}
    # Extraction (2 sessions) is attributed to the first case; each question: search call + answer.
    assert ("conv-x_qa_0001", "memory", 2) in purposes and ("conv-x_qa_0002", "memory", 2) not in purposes
    assert ("conv-x_qa_0002", "answer", 2) in purposes
    assert got["conv-x_qa_0001"]["locomo_f1"] == 1.0


def test_retrieval_only_reports_recall_overall_and_per_category() -> None:
    task = get_task("locomo")
    s = settings("retrieval.ks=1,5")
    out = task.retrieval_only(task.load_cases(s).cases, "session_recall", s)
    assert out["search_mode"] == "lexical" and out["ks"] == [1, 5] and out["with_evidence"] == 5
    # Four questions share a distinctive word with their evidence; the pets question only shares
    # "Caroline", which 3 of 5 messages contain, and that match scores below the 0.3 floor.
    assert out["overall"]["recall@5"] == pytest.approx(4 / 5)
    assert out["per_category"]["1"]["recall@5"] == 0.0
    per = out["per_category"]
    assert set(per) == {"1", "2", "3", "4", "5"}
    assert per["4"]["official"] == "single-hop" and per["4"]["memory_report"] == "open-domain"
    assert per["3"]["mem0"] == "multi-hop"
    # Clear lexical matches rank their evidence first.
    for category in ("2", "3", "4"):
        assert per[category]["recall@1"] == 1.0, category
    assert out["four_category"]["n"] == 4


def test_hybrid_retrieval_with_the_published_floor_recalls_at_least_what_lexical_does() -> None:
    # The published setting: an embedder, hybrid fusion and min score 0.3. The floor filters
    # cosine similarities before fusion; fused scores (<= 2/61) never meet it.
    task = get_task("locomo")
    lexical = settings("retrieval.ks=1,5")
    hybrid = settings("retrieval.ks=1,5", "recall.embedder=hash")
    cases = task.load_cases(lexical).cases
    lex = task.retrieval_only(cases, "session_recall", lexical)
    hyb = task.retrieval_only(cases, "session_recall", hybrid)
    assert hyb["search_mode"] == "hybrid" and hyb["min_score"] == 0.3
    assert hyb["min_score_applies_to"].startswith("dense cosine similarities, before fusion")
    assert hyb["overall"]["recall@5"] >= lex["overall"]["recall@5"] == pytest.approx(4 / 5)
    # The floor binds the dense list only, so the pets question's evidence (which shares just
    # "Caroline" with it, below the floor in lexical mode) comes back through the keyword list.
    assert hyb["overall"]["recall@5"] == 1.0


@pytest.mark.skipif(not os.environ.get("AGENTLAB_DATA_DIR"), reason="needs the shared LoCoMo file")
def test_published_selection_has_1986_questions(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlab.bench.datasets.locomo import load_locomo

    monkeypatch.setattr(lc, "load_locomo", load_locomo)
    cases = get_task("locomo").load_cases(settings()).cases
    counts: dict[int, int] = {}
    for case in cases:
        counts[case.metadata["category"]] = counts.get(case.metadata["category"], 0) + 1
    assert len(cases) == 1986 and counts == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
