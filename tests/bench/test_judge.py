from __future__ import annotations

import json

import pytest

from agentlab.bench import judge as j
from agentlab.model.base import CallRecord, ContextLengthError, observe_calls
from agentlab.model.scripted import ScriptedModel


async def test_qmsum_judge_scores_confidence_when_correct() -> None:
    model = ScriptedModel(['```json\n{"correct": true, "confidence": 0.8, "reason": "same points"}\n```',
                           '{"correct": false, "confidence": 0.9, "reason": "wrong"}'])
    judge = j.Judge(model, "scripted-judge")
    seen: list[CallRecord] = []
    with observe_calls(seen.append):
        good = await judge.qmsum("What was decided?", "They chose rubber.", "Rubber was chosen.")
        bad = await judge.qmsum("What was decided?", "They chose rubber.", "Plastic.")
    assert good.score == 0.8 and good.correct is True and good.parse_error is None
    assert bad.score == 0.0 and bad.correct is False
    request = model.requests[0]
    assert request.purpose == "judge" and request.config.response_format == "json"
    assert request.config.temperature == 0.0
    assert "They chose rubber." in request.messages[0].content and "Rubber was chosen." in request.messages[0].content
    assert [r.purpose for r in seen] == ["judge", "judge"]
    rows = {s.metric: s for s in good.to_scores()}
    assert rows["llm_score"].value == 0.8 and rows["llm_score_correct"].value == 1.0
    assert rows["llm_score"].version == f"{j.QMSUM_JUDGE_VERSION}@scripted-judge"


@pytest.mark.parametrize("reply, reason", [
    ("I think it is correct.", "no JSON object"),
    ('{"correct": true}', "missing 'confidence'"),
    ('{"correct": "maybe", "confidence": 0.5}', "'correct' should be true or false"),
    ('{"correct": true, "confidence": 7}', "outside 0..1"),
    ('{"correct": true, "confidence": 0.5', "no JSON object"),
])
async def test_parse_failure_is_recorded_not_scored(reply: str, reason: str) -> None:
    result = await j.Judge(ScriptedModel([reply])).qmsum("q", "r", "p")
    assert result.score is None and result.parse_error is not None and reason in result.parse_error
    assert result.raw == reply
    rows = result.to_scores()
    assert rows[0].value is None and rows[0].detail is not None and rows[0].detail.startswith("parse_error")


async def test_longmemeval_exact_match_skips_the_call() -> None:
    model = ScriptedModel(['{"correct": true, "confidence": 0.6, "reason": "ok"}'])
    judge = j.Judge(model)
    hit = await judge.longmemeval("Which degree?", "Business Administration", "You got a business administration degree.")
    assert hit.score == 1.0 and hit.skipped_call and model.calls == 0
    miss = await judge.longmemeval("Which degree?", "Business Administration", "An MBA in business.")
    assert miss.score == 0.6 and model.calls == 1


async def test_locomo_label_judge() -> None:
    model = ScriptedModel(['{"label": "CORRECT", "confidence": 0.7}', '{"label": "wrong"}', '{"label": "MAYBE"}',
                           '{"label": "CORRECT"}'])
    judge = j.Judge(model)
    assert (await judge.locomo("q", "7 May 2023", "May 7, 2023")).score == 0.7
    wrong = await judge.locomo("q", "a", "b")
    assert wrong.score == 0.0 and wrong.correct is False
    broken = await judge.locomo("q", "a", "b")
    assert broken.score is None and "CORRECT or WRONG" in (broken.parse_error or "")
    assert (await judge.locomo("q", "a", "a")).score == 1.0  # no confidence: the binary label


async def test_consistency_judge_parses_json_or_a_score_line() -> None:
    model = ScriptedModel(['{"reason": "Both say the same.", "score": 0.8}', "Mostly. score: **0.6**",
                           "Looks fine to me.", '{"reason": "x"}', "Score: 1.7"])
    judge = j.Judge(model)
    first = await judge.consistency("turn", "A text", "B text")
    assert first.score == 0.8 and first.prompt_version == "mtbench-consistency-v2"
    assert model.requests[0].config.json_schema == j.CONSISTENCY_SCHEMA
    assert "A text" in model.requests[0].messages[0].content
    assert (await judge.consistency("t", "a", "b")).score == 0.6
    missing = await judge.consistency("t", "a", "b")
    assert missing.score is None and "Score:" in (missing.parse_error or "")
    no_score = await judge.consistency("t", "a", "b")
    assert no_score.score is None and "missing 'score'" in (no_score.parse_error or "")
    out_of_range = await judge.consistency("t", "a", "b")
    assert out_of_range.score is None


async def test_judge_model_errors_propagate() -> None:
    judge = j.Judge(ScriptedModel([ContextLengthError("too long")]))
    with pytest.raises(ContextLengthError):
        await judge.qmsum("q", "r", "p")


async def test_json_judges_send_their_reply_schema() -> None:
    model = ScriptedModel(['{"correct": true, "confidence": 0.9, "reason": "ok"}',
                           '{"label": "CORRECT", "confidence": 1.0, "reason": "ok"}'])
    judge = j.Judge(model)
    await judge.qmsum("q", "r", "p")
    await judge.locomo("q", "gold", "p")
    qmsum_config, locomo_config = (r.config for r in model.requests)
    assert qmsum_config.response_format == "json" and qmsum_config.json_schema == j.CORRECT_CONFIDENCE_SCHEMA
    assert locomo_config.json_schema == j.LABEL_SCHEMA
    schema = json.loads(j.CORRECT_CONFIDENCE_SCHEMA)
    assert list(schema["properties"]) == ["correct", "confidence", "reason"] and schema["required"] == list(
        schema["properties"])
    assert json.loads(j.LABEL_SCHEMA)["properties"]["label"]["enum"] == ["CORRECT", "WRONG"]
    # An enforced confidence cannot leave 0..1 (a grammar cannot bound a free number).
    assert schema["properties"]["confidence"]["enum"] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
