"""The generic judge call, each benchmark's template, and equality with main's judge before the change.

``data/judge_main_fixture.json`` was recorded from main's per-benchmark judge methods (commit
c07a888) by ``tests/bench/data/make_judge_main_fixture.py`` as committed in a579f4b: the request of
each benchmark for sample fields (prompt text, generation config, cache key) and the verdict for
each of a set of replies (good, fenced, lenient, broken). The templates must reproduce both: the
same cache keys replay the recorded judge calls, and the same replies give the same numbers.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from agentlab.bench.config import Settings
from agentlab.bench.running import executor
from agentlab.bench.scoring import judge as j
from agentlab.bench.scoring.metrics import Score
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import Case, CaseResult, CaseSelection, RunContext, Task
from agentlab.bench.tasks.locomo_judge import LOCOMO_JUDGE
from agentlab.bench.tasks.longmemeval_judge import LONGMEMEVAL_JUDGE
from agentlab.bench.tasks.mtbench101 import MTBench101Task
from agentlab.bench.tasks.mtbench101_judge import CONSISTENCY_JUDGE, RETENTION_LLM_JUDGE
from agentlab.bench.tasks.qmsum_judge import QMSUM_JUDGE
from agentlab.model.base import CallRecord, ContextLengthError, ModelInfo, observe_calls
from agentlab.model.scripted import ScriptedModel

FIXTURE = json.loads((Path(__file__).parent / "data" / "judge_main_fixture.json").read_text(encoding="utf-8"))
#: The fixture's benchmarks: the template, and the names of its positional sample fields.
TEMPLATES: dict[str, tuple[j.JudgeTemplate, tuple[str, ...]]] = {
    "qmsum": (QMSUM_JUDGE, ("query", "reference", "prediction")),
    "longmemeval": (LONGMEMEVAL_JUDGE, ("query", "reference", "prediction")),
    "locomo": (LOCOMO_JUDGE, ("query", "reference", "prediction")),
    "consistency": (CONSISTENCY_JUDGE, ("query", "response_a", "response_b")),
    "retention": (RETENTION_LLM_JUDGE, ("baseline", "test")),
}


def fixture_judge(reply: str | None = None) -> tuple[j.Judge, ScriptedModel]:
    model = ScriptedModel([] if reply is None else [reply], info=ModelInfo(FIXTURE["model_name"], 8192))
    return j.Judge(model, "judge-spec"), model


def result_facts(result: j.JudgeResult) -> dict[str, Any]:
    facts = dataclasses.asdict(result)
    facts["scores"] = [dataclasses.asdict(s) for s in result.to_scores()]
    facts["scores_zero"] = [dataclasses.asdict(s) for s in result.to_scores("m", unparsed_scores_zero=True)]
    return facts


async def judged(bench: str, fields: list[str], reply: str | None) -> tuple[Any, ScriptedModel]:
    """What the new code does for one fixture entry (retention goes through the task's own path)."""
    judge, model = fixture_judge(reply)
    if bench == "retention":
        return {"score": await MTBench101Task()._llm_retention(SimpleNamespace(judge=judge), *fields)}, model
    template, names = TEMPLATES[bench]
    return result_facts(await judge.grade(template, **dict(zip(names, fields, strict=True)))), model


# ------------------------------------------------------------------------------ equal to main


@pytest.mark.parametrize("entry", FIXTURE["requests"], ids=lambda e: f"{e['bench']}-{len(e['fields'][0])}")
async def test_requests_equal_mains_so_the_call_cache_replays_them(entry: dict[str, Any]) -> None:
    _, model = await judged(entry["bench"], entry["fields"], '{"correct": true, "confidence": 0.8, "reason": "x"}')
    (request,) = model.requests
    expected = entry["request"]
    assert [{"role": m.role, "content": m.content} for m in request.messages] == expected["messages"]
    assert request.config.to_dict() == expected["config"] and request.purpose == expected["purpose"]
    assert request.cache_key(FIXTURE["model_name"]) == expected["cache_key"]


@pytest.mark.parametrize("bench", sorted(TEMPLATES))
async def test_verdicts_equal_mains_for_every_recorded_reply(bench: str) -> None:
    entries = [e for e in FIXTURE["verdicts"] if e["bench"] == bench]
    fields = next(e["fields"] for e in FIXTURE["requests"] if e["bench"] == bench)
    assert len(entries) >= 30
    for entry in entries:
        got, _ = await judged(bench, fields, entry["reply"])
        if isinstance(got, dict) and "raw" in got:
            assert got.pop("raw") == entry["reply"]
        assert got == entry["result"], entry["reply"]


async def test_longmemeval_exact_match_equals_main_and_asks_nobody() -> None:
    recorded = FIXTURE["exact_match"]
    judge, model = fixture_judge()
    result = await judge.grade(LONGMEMEVAL_JUDGE, **dict(zip(("query", "reference", "prediction"),
                                                            recorded["fields"], strict=True)))
    assert result_facts(result) == recorded["result"] and result.skipped_call and model.requests == []


# ---------------------------------------------------------------------------- the generic call


async def test_qmsum_judge_scores_confidence_when_correct() -> None:
    model = ScriptedModel(['```json\n{"correct": true, "confidence": 0.8, "reason": "same points"}\n```',
                           '{"correct": false, "confidence": 0.9, "reason": "wrong"}'])
    judge = j.Judge(model, "scripted-judge")
    seen: list[CallRecord] = []
    fields = {"query": "What was decided?", "reference": "They chose rubber."}
    with observe_calls(seen.append):
        good = await judge.grade(QMSUM_JUDGE, **fields, prediction="Rubber was chosen.")
        bad = await judge.grade(QMSUM_JUDGE, **fields, prediction="Plastic.")
    assert good.score == 0.8 and good.correct is True and good.parse_error is None
    assert bad.score == 0.0 and bad.correct is False
    request = model.requests[0]
    assert request.purpose == "judge" and request.config.response_format == "json"
    assert request.config.temperature == 0.0 and request.config.json_schema == QMSUM_JUDGE.schema
    assert "They chose rubber." in request.messages[0].content and "Rubber was chosen." in request.messages[0].content
    assert [r.purpose for r in seen] == ["judge", "judge"]
    rows = {s.metric: s for s in good.to_scores()}
    assert rows["llm_score"].value == 0.8 and rows["llm_score_correct"].value == 1.0
    assert rows["llm_score"].version == "qmsum-judge-v1@scripted-judge" == good.version


@pytest.mark.parametrize("reply, reason", [
    ("I think it is correct.", "no JSON object"),
    ('{"correct": true}', "missing 'confidence'"),
    ('{"correct": "maybe", "confidence": 0.5}', "'correct' should be true or false"),
    ('{"correct": true, "confidence": 7}', "outside 0..1"),
    ('{"correct": true, "confidence": 0.5', "no JSON object"),
])
async def test_parse_failure_is_recorded_not_scored(reply: str, reason: str) -> None:
    result = await j.Judge(ScriptedModel([reply])).grade(QMSUM_JUDGE, query="q", reference="r", prediction="p")
    assert result.score is None and result.parse_error is not None and reason in result.parse_error
    assert result.raw == reply
    rows = result.to_scores()
    assert rows[0].value is None and rows[0].detail is not None and rows[0].detail.startswith(j.PARSE_ERROR_PREFIX)
    zeroed = result.to_scores(unparsed_scores_zero=True)
    assert zeroed[0].value == 0.0 and "divides by all questions" in (zeroed[0].detail or "")


async def test_longmemeval_exact_match_skips_the_call() -> None:
    model = ScriptedModel(['{"correct": true, "confidence": 0.6, "reason": "ok"}'])
    judge = j.Judge(model)
    fields = {"query": "Which degree?", "reference": "Business Administration"}
    hit = await judge.grade(LONGMEMEVAL_JUDGE, **fields, prediction="You got a business administration degree.")
    assert hit.score == 1.0 and hit.skipped_call and model.calls == 0
    miss = await judge.grade(LONGMEMEVAL_JUDGE, **fields, prediction="An MBA in business.")
    assert miss.score == 0.6 and model.calls == 1


async def test_locomo_label_judge() -> None:
    model = ScriptedModel(['{"label": "CORRECT", "confidence": 0.7}', '{"label": "wrong"}', '{"label": "MAYBE"}',
                           '{"label": "CORRECT"}'])
    judge = j.Judge(model)

    async def grade() -> j.JudgeResult:
        return await judge.grade(LOCOMO_JUDGE, query="q", reference="a", prediction="b")

    assert (await grade()).score == 0.7
    wrong = await grade()
    assert wrong.score == 0.0 and wrong.correct is False
    broken = await grade()
    assert broken.score is None and "CORRECT or WRONG" in (broken.parse_error or "")
    assert (await grade()).score == 1.0  # no confidence: the binary label


async def test_consistency_judge_parses_json_or_a_score_line() -> None:
    model = ScriptedModel(['{"reason": "Both say the same.", "score": 0.8}', "Mostly. score: **0.6**",
                           "Looks fine to me.", '{"reason": "x"}', "Score: 1.7"])
    judge = j.Judge(model)

    async def grade(a: str = "a") -> j.JudgeResult:
        return await judge.grade(CONSISTENCY_JUDGE, query="turn", response_a=a, response_b="b")

    first = await grade("A text")
    assert first.score == 0.8 and first.prompt_version == "mtbench-consistency-v2"
    assert model.requests[0].config.json_schema == CONSISTENCY_JUDGE.schema
    assert "A text" in model.requests[0].messages[0].content
    assert (await grade()).score == 0.6
    missing = await grade()
    assert missing.score is None and "Score:" in (missing.parse_error or "")
    no_score = await grade()
    assert no_score.score is None and "missing 'score'" in (no_score.parse_error or "")
    out_of_range = await grade()
    assert out_of_range.score is None and "outside 0..1" in (out_of_range.parse_error or "")


async def test_free_text_judge_sends_no_schema_and_records_a_missing_rate() -> None:
    model = ScriptedModel(["RETENTION_RATE: 0.75\nMISSING: none", "I cannot tell."])
    judge = j.Judge(model)
    kept = await judge.grade(RETENTION_LLM_JUDGE, baseline="A", test="B")
    assert kept.score == 0.75 and model.requests[0].config.response_format is None
    assert model.requests[0].config.json_schema is None and RETENTION_LLM_JUDGE.schema is None
    lost = await judge.grade(RETENTION_LLM_JUDGE, baseline="A", test="B")
    assert lost.score is None and "RETENTION_RATE" in (lost.parse_error or "")


async def test_judge_model_errors_propagate() -> None:
    judge = j.Judge(ScriptedModel([ContextLengthError("too long")]))
    with pytest.raises(ContextLengthError):
        await judge.grade(QMSUM_JUDGE, query="q", reference="r", prediction="p")


def test_json_schemas_keep_the_grammar_order_and_the_enforced_levels() -> None:
    schema = json.loads(QMSUM_JUDGE.schema or "")
    assert list(schema["properties"]) == ["correct", "confidence", "reason"] and schema["required"] == list(
        schema["properties"])
    assert json.loads(LOCOMO_JUDGE.schema or "")["properties"]["label"]["enum"] == ["CORRECT", "WRONG"]
    # An enforced confidence cannot leave 0..1 (a grammar cannot bound a free number).
    assert schema["properties"]["confidence"]["enum"] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


async def test_a_field_missing_from_or_foreign_to_the_prompt_is_an_error_not_a_blank() -> None:
    judge = j.Judge(ScriptedModel([]))
    with pytest.raises(TypeError, match=r"missing \['prediction'\]"):
        await judge.grade(QMSUM_JUDGE, query="q", reference="r")
    with pytest.raises(TypeError, match=r"unexpected \['gold'\]"):
        await judge.grade(QMSUM_JUDGE, query="q", reference="r", prediction="p", gold="g")
    assert judge.model.requests == []  # type: ignore[attr-defined]


def test_templates_that_cannot_be_read_are_refused() -> None:
    with pytest.raises(ValueError, match="free-text reply needs read_text"):
        j.JudgeTemplate("t", "t-v1", "{x}", (), lambda f: j.Verdict(0.0))
    with pytest.raises(ValueError, match="repeat a name"):
        j.JudgeTemplate("t", "t-v1", "{x}", (j.Flag(name="a"), j.Text(name="a")), lambda f: j.Verdict(0.0))


# ------------------------------------------------------- a new benchmark without editing judge.py


def _toy_verdict(fields: Mapping[str, Any]) -> j.Verdict:
    return j.Verdict(fields["points"] / 10, correct=fields["grade"] != "C", reason=fields["why"])


#: A benchmark's judge declared outside ``judge.py``: a graded rubric with an integer-ish range.
TOY_JUDGE = j.JudgeTemplate(
    name="toy", version="toy-judge-v3",
    text="Grade the essay on {topic}:\n{essay}\nReply as JSON {{\"grade\", \"points\", \"why\"}}.",
    reply=(j.Choice(name="grade", options=("A", "B", "C")), j.Number(name="points", low=0, high=10),
           j.Text(name="why", max_length=80)),
    verdict=_toy_verdict,
)


async def test_a_toy_template_grades_with_its_own_schema_and_range() -> None:
    model = ScriptedModel(['{"grade": "b", "points": "7", "why": "clear"}', '{"grade": "A", "points": 11}',
                           '{"points": 3}'])
    judge = j.Judge(model, "toy-judge-model")
    good = await judge.grade(TOY_JUDGE, topic="tides", essay="The moon pulls.")
    assert (good.score, good.correct, good.reason, good.version) == (0.7, True, "clear", "toy-judge-v3@toy-judge-model")
    assert model.requests[0].messages[0].content.startswith("Grade the essay on tides:\nThe moon pulls.")
    assert json.loads(model.requests[0].config.json_schema or "") == {
        "type": "object",
        "properties": {"grade": {"enum": ["A", "B", "C"]}, "points": {"type": "number", "minimum": 0, "maximum": 10},
                       "why": {"type": "string", "maxLength": 80}},
        "required": ["grade", "points", "why"], "additionalProperties": False}
    over = await judge.grade(TOY_JUDGE, topic="t", essay="e")
    assert over.score is None and over.parse_error == "'points' 11.0 is outside 0..10"
    no_grade = await judge.grade(TOY_JUDGE, topic="t", essay="e")
    assert no_grade.score is None and no_grade.parse_error == "'grade' should be A or B or C, got None"


class ToyTask(Task):
    """A benchmark that only judges: its prediction is the case's question echoed."""

    name = "toy"
    modes = ("only",)
    default_mode = "only"
    judge_templates: ClassVar[tuple[j.JudgeTemplate, ...]] = (TOY_JUDGE,)

    def load_cases(self, settings: Settings) -> CaseSelection:
        return CaseSelection([Case(f"c{i}", f"essay {i}", "") for i in (1, 2)], dataset_sha256="toy")

    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        return CaseResult(prediction=case.question)

    async def score(self, case: Case, result: CaseResult, ctx: RunContext) -> list[Score]:
        assert ctx.judge is not None
        return (await ctx.judge.grade(TOY_JUDGE, topic="tides", essay=result.prediction)).to_scores("toy_score")


async def test_a_toy_benchmark_stores_its_judge_version_in_the_run_config_and_with_each_score(tmp_path: Path) -> None:
    model = ScriptedModel(['{"grade": "A", "points": 9, "why": "fine"}', "no verdict"])
    request = executor.RunRequest(benchmark="toy", mode="only", model_spec="scripted", settings=Settings({}),
                                  judge_spec="toy-judge-model", concurrency=1, progress=False)
    with ResultStore(tmp_path / "r.duckdb") as store:
        summary = await executor.run_task(ToyTask(), request, model=model, store=store,
                                          judge=j.Judge(model, "toy-judge-model"))
        (config,), = store.query("SELECT config FROM runs WHERE run_id = ?", [summary.run_id])
        rows = store.query("SELECT case_id, value, version, detail FROM scores WHERE run_id = ? AND metric = "
                           "'toy_score' ORDER BY case_id", [summary.run_id])
    assert json.loads(config)["judge_prompts"] == {"toy": "toy-judge-v3"}
    assert rows[0][:3] == ("c1", 0.9, "toy-judge-v3@toy-judge-model")
    assert rows[1][1] is None and rows[1][3].startswith(f"{j.PARSE_ERROR_PREFIX} no JSON object")
    unjudged = executor.run_config(ToyTask(), dataclasses.replace(request, judge_spec=None), "toy")
    assert "judge_prompts" not in unjudged  # no judge, no judge prompt in the run's identity
