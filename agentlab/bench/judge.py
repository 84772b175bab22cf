"""LLM judges: prompts as visible, versioned constants; structured replies; honest parse failures.

* QMSum / LongMemEval (reference §5.2): is the prediction faithful to and semantically equivalent
  with the reference answer for this query? JSON ``{"correct", "confidence", "reason"}``;
  score = confidence if correct else 0. LongMemEval: 1.0 without a judge call when the exact-match
  rule already holds.
* LoCoMo: a CORRECT / WRONG label with a confidence (mem0-style J = the label; the published memory
  report's "LLM score" = confidence if CORRECT else 0). Known pitfall (peers §1.6): lenient judges
  accept vague but on-topic answers, so this prompt asks for the same fact, not the same topic.
* MT-Bench-101 consistency: compares response A (baseline) with B (summary mode) on factual
  accuracy, semantic equivalence and completeness; anchors 1.0/0.8/0.6/0.4/0.2/0.0; the reply ends
  with ``Score: <decimal>``.

A reply that does not parse is a :class:`JudgeResult` with ``parse_error`` set and ``score`` None:
it is never silently scored (the reference defaulted such replies to 0.5 / "correct if the word
true appears"). It is stored as NULL (left out of a mean, and counted), except where the published
score divides by all questions (LoCoMo, LongMemEval): there it is stored as 0, with the parse error
in the detail. A failing judge *call* (``ModelError``) propagates, so the case
is recorded as failed and retried on the next run. Every result carries the judge model name and
the prompt version, and both are stored with the scores.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentlab.bench.metrics import Score, exact_match
from agentlab.events import Message
from agentlab.model.base import GenerationConfig, Model, ModelRequest

# ------------------------------------------------------------------------------------ prompts

QMSUM_JUDGE_VERSION = "qmsum-judge-v1"
QMSUM_JUDGE_PROMPT = """You grade answers to query-based meeting summarization questions.

Query: {query}
Reference answer: {reference}
Candidate answer: {prediction}

Decide whether the candidate answer is faithful to the meeting as the reference describes it and
conveys the same content as the reference for this query. Wording may differ; missing key points,
invented facts or contradictions make it incorrect.
Reply with a JSON object only:
{{"correct": true or false, "confidence": a number from 0.0 to 1.0, "reason": "one short sentence"}}"""

LONGMEMEVAL_JUDGE_VERSION = "longmemeval-judge-v1"
LONGMEMEVAL_JUDGE_PROMPT = """You grade an assistant's answer to a question about the user's past conversations.

Question: {query}
Reference answer: {reference}
Candidate answer: {prediction}

Decide whether the candidate answer is faithful and semantically equivalent to the reference
answer for this question. Extra harmless detail is fine; a different or missing fact is not.
Reply with a JSON object only:
{{"correct": true or false, "confidence": a number from 0.0 to 1.0, "reason": "one short sentence"}}"""

LOCOMO_JUDGE_VERSION = "locomo-judge-v1"
LOCOMO_JUDGE_PROMPT = """You label answers to questions about a long conversation between two people.

Question: {query}
Gold answer: {reference}
Generated answer: {prediction}

Label the generated answer CORRECT if it states the same fact as the gold answer (it may be longer
or phrased differently; a date in another format that names the same day, month or year counts),
and WRONG if it states a different fact, only touches the topic, or does not answer.
Reply with a JSON object only:
{{"label": "CORRECT" or "WRONG", "confidence": a number from 0.0 to 1.0, "reason": "one short sentence"}}"""

#: Reply schemas of the JSON judges. Backends that enforce schemas (the embedded llama.cpp model)
#: compile them into grammars, so a small judge's reply parses and ends; others get plain JSON mode.
#: Grammars cannot bound a free number, so an enforced confidence is one of 0.0, 0.1, ..., 1.0.
CONFIDENCE_LEVELS = tuple(round(i / 10, 1) for i in range(11))
CORRECT_CONFIDENCE_SCHEMA = GenerationConfig.schema_text({
    "type": "object",
    "properties": {"correct": {"type": "boolean"}, "confidence": {"enum": list(CONFIDENCE_LEVELS)},
                   "reason": {"type": "string", "maxLength": 160}},
    "required": ["correct", "confidence", "reason"], "additionalProperties": False,
})
LABEL_SCHEMA = GenerationConfig.schema_text({
    "type": "object",
    "properties": {"label": {"enum": ["CORRECT", "WRONG"]}, "confidence": {"enum": list(CONFIDENCE_LEVELS)},
                   "reason": {"type": "string", "maxLength": 160}},
    "required": ["label", "confidence", "reason"], "additionalProperties": False,
})

CONSISTENCY_JUDGE_VERSION = "mtbench-consistency-v2"
#: The reference rubric's six levels (v1 asked for a free-text "Score:" line; v2 for JSON, so the
#: reply is structured and a schema-enforcing backend can hold even a small judge to it).
CONSISTENCY_LEVELS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.0)
CONSISTENCY_JUDGE_PROMPT = """You compare two responses to the same turn of a conversation.

User turn: {query}

Response A (assistant that saw the full conversation history):
{response_a}

Response B (assistant that saw a summary of the earlier history):
{response_b}

Rate how consistent Response B is with Response A in factual accuracy, semantic equivalence and
completeness:
1.0 - the same content (wording may differ)
0.8 - mostly the same, small differences in detail
0.6 - partly the same, some key points missing or different
0.4 - weakly related, most key points differ
0.2 - barely related
0.0 - contradictory or unrelated
Reply with a single JSON object and nothing else, reasoning first:
{{"reason": "one or two sentences", "score": 1.0, 0.8, 0.6, 0.4, 0.2 or 0.0}}"""
CONSISTENCY_SCHEMA = GenerationConfig.schema_text({
    "type": "object",
    "properties": {"reason": {"type": "string", "maxLength": 240}, "score": {"enum": list(CONSISTENCY_LEVELS)}},
    "required": ["reason", "score"], "additionalProperties": False,
})

PROMPT_VERSIONS: dict[str, str] = {
    "qmsum": QMSUM_JUDGE_VERSION,
    "longmemeval": LONGMEMEVAL_JUDGE_VERSION,
    "locomo": LOCOMO_JUDGE_VERSION,
    "consistency": CONSISTENCY_JUDGE_VERSION,
}

#: Judge replies are short; this cap keeps a rambling model from spending tokens.
JUDGE_MAX_TOKENS = 256
#: How the ``detail`` of a score from an unparsable judge reply starts (the tables count these).
PARSE_ERROR_PREFIX = "parse_error:"


# ------------------------------------------------------------------------------------- result


@dataclass(frozen=True)
class JudgeResult:
    """One judgement. ``score`` is None when the reply did not parse (``parse_error`` says why)."""

    score: float | None
    judge_model: str
    prompt_version: str
    correct: bool | None = None
    confidence: float | None = None
    reason: str = ""
    raw: str = ""
    parse_error: str | None = None
    #: True when no model was asked (e.g. the exact-match shortcut of LongMemEval).
    skipped_call: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_scores(self, metric: str = "llm_score", *, unparsed_scores_zero: bool = False) -> list[Score]:
        """Rows for the store: ``<metric>`` (and ``<metric>_correct`` when a label exists).

        The version names prompt and judge model, so scores from different judges never mix.
        A reply that did not parse is stored as NULL (left out of means and counted), unless
        ``unparsed_scores_zero``: benchmarks whose published score divides by *all* questions
        (LoCoMo's LLM score, LongMemEval's fixed denominator) store 0 instead. Either way the
        detail starts with :data:`PARSE_ERROR_PREFIX`, so the tables can count such replies.
        """
        version = f"{self.prompt_version}@{self.judge_model}"
        detail = f"{PARSE_ERROR_PREFIX} {self.parse_error}" if self.parse_error else (self.reason or None)
        zeroed = bool(self.parse_error) and unparsed_scores_zero
        if zeroed:
            detail = f"{detail}; scored 0 (the published score divides by all questions)"
        rows = [Score(metric, 0.0 if zeroed else self.score, version, detail)]
        if self.correct is not None or self.parse_error:
            label = None if self.correct is None else float(self.correct)
            rows.append(Score(f"{metric}_correct", 0.0 if zeroed else label, version, detail))
        return rows


# ------------------------------------------------------------------------------------ parsing


def _extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply (code fences and surrounding prose tolerated)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the reply")
    value = json.loads(text[start:end + 1])
    if not isinstance(value, dict):
        raise ValueError("the JSON value is not an object")
    return value


def _as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
        return value.strip().lower() == "true"
    raise ValueError(f"{name!r} should be true or false, got {value!r}")


def _as_confidence(value: Any, field: str = "confidence") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(str(value).strip())
        except ValueError:
            raise ValueError(f"'{field}' should be a number, got {value!r}") from None
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"'{field}' {number} is outside 0..1")
    return number


def parse_correct_confidence(raw: str) -> tuple[bool, float, str]:
    """Parse ``{"correct", "confidence", "reason"}``; raises ``ValueError`` naming the problem."""
    obj = _extract_json_object(raw)
    if "correct" not in obj:
        raise ValueError("missing 'correct'")
    if "confidence" not in obj:
        raise ValueError("missing 'confidence'")
    return _as_bool(obj["correct"], "correct"), _as_confidence(obj["confidence"]), str(obj.get("reason", ""))


def parse_label(raw: str) -> tuple[bool, float | None, str]:
    """Parse ``{"label": "CORRECT"|"WRONG", "confidence"?, "reason"?}``."""
    obj = _extract_json_object(raw)
    label = str(obj.get("label", "")).strip().upper()
    if label not in {"CORRECT", "WRONG"}:
        raise ValueError(f"'label' should be CORRECT or WRONG, got {obj.get('label')!r}")
    confidence = _as_confidence(obj["confidence"]) if "confidence" in obj else None
    return label == "CORRECT", confidence, str(obj.get("reason", ""))


_SCORE_LINE = re.compile(r"score\s*[:：]\s*\**\s*([01](?:\.\d+)?|\.\d+)", re.IGNORECASE)


def parse_consistency(raw: str) -> float:
    """``{"reason", "score"}`` (v2), or else a ``Score: x`` line (v1 replies, models that ignore JSON)."""
    try:
        obj = _extract_json_object(raw)
    except ValueError:
        return parse_score_line(raw)
    if "score" not in obj:
        raise ValueError("missing 'score'")
    return _as_confidence(obj["score"], "score")


def parse_score_line(raw: str) -> float:
    """The value of the last ``Score: x`` line; raises ``ValueError`` if absent or out of range."""
    matches = _SCORE_LINE.findall(raw)
    if not matches:
        raise ValueError("no 'Score: <decimal>' line in the reply")
    value = float(matches[-1])
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"score {value} is outside 0..1")
    return value


# -------------------------------------------------------------------------------------- judge


class Judge:
    """Asks a judge model; its spec (e.g. ``openai:gpt-4o-mini``) is stored with every score."""

    def __init__(self, model: Model, spec: str | None = None, *, max_tokens: int = JUDGE_MAX_TOKENS) -> None:
        self.model = model
        self.spec = spec or model.info.name
        self.max_tokens = max_tokens

    async def _ask(self, prompt: str, *, json_mode: bool, schema: str | None = None) -> str:
        request = ModelRequest(
            messages=[Message.user(prompt)],
            config=GenerationConfig(
                temperature=0.0, max_tokens=self.max_tokens, response_format="json" if json_mode else None,
                json_schema=schema if json_mode else None,
            ),
            purpose="judge",
        )
        response = await self.model.generate(request)
        return response.message.content or ""

    def _result(self, version: str, **kwargs: Any) -> JudgeResult:
        return JudgeResult(judge_model=self.spec, prompt_version=version, **kwargs)

    async def _correct_confidence(self, template: str, version: str, query: str, reference: str,
                                  prediction: str) -> JudgeResult:
        raw = await self._ask(template.format(query=query, reference=reference, prediction=prediction), json_mode=True,
                              schema=CORRECT_CONFIDENCE_SCHEMA)
        try:
            correct, confidence, reason = parse_correct_confidence(raw)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError too
            return self._result(version, score=None, raw=raw, parse_error=str(exc))
        return self._result(version, score=confidence if correct else 0.0, correct=correct,
                            confidence=confidence, reason=reason, raw=raw)

    async def qmsum(self, query: str, reference: str, prediction: str) -> JudgeResult:
        return await self._correct_confidence(QMSUM_JUDGE_PROMPT, QMSUM_JUDGE_VERSION, query, reference, prediction)

    async def longmemeval(self, question: str, reference: str, prediction: str) -> JudgeResult:
        """LLMScore as published: 1.0 when the exact-match rule holds (no call), else the judge."""
        if exact_match(prediction, reference) == 1.0:
            return self._result(LONGMEMEVAL_JUDGE_VERSION, score=1.0, correct=True, confidence=1.0,
                                reason="exact match", skipped_call=True)
        return await self._correct_confidence(LONGMEMEVAL_JUDGE_PROMPT, LONGMEMEVAL_JUDGE_VERSION, question,
                                              reference, prediction)

    async def locomo(self, question: str, gold: str, prediction: str) -> JudgeResult:
        prompt = LOCOMO_JUDGE_PROMPT.format(query=question, reference=gold, prediction=prediction)
        raw = await self._ask(prompt, json_mode=True, schema=LABEL_SCHEMA)
        try:
            correct, confidence, reason = parse_label(raw)
        except ValueError as exc:
            return self._result(LOCOMO_JUDGE_VERSION, score=None, raw=raw, parse_error=str(exc))
        # Without a confidence the label is the score (mem0's binary J).
        score = (confidence if confidence is not None else 1.0) if correct else 0.0
        return self._result(LOCOMO_JUDGE_VERSION, score=score, correct=correct, confidence=confidence,
                            reason=reason, raw=raw)

    async def consistency(self, query: str, response_a: str, response_b: str) -> JudgeResult:
        prompt = CONSISTENCY_JUDGE_PROMPT.format(query=query, response_a=response_a, response_b=response_b)
        raw = await self._ask(prompt, json_mode=True, schema=CONSISTENCY_SCHEMA)
        try:
            value = parse_consistency(raw)
        except ValueError as exc:
            return self._result(CONSISTENCY_JUDGE_VERSION, score=None, raw=raw, parse_error=str(exc))
        return self._result(CONSISTENCY_JUDGE_VERSION, score=value, raw=raw)
