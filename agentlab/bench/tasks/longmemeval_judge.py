"""LongMemEval's judge: LLMScore as published — 1.0 without a call when the exact-match rule holds,
else the judge's confidence when it finds the answer faithful and equivalent to the reference.

JSON ``{"correct", "confidence", "reason"}``. The prompt text is part of every judge call's cache
key: change it only with a new version.
"""

from __future__ import annotations

from agentlab.bench.scoring.judge import (
    CORRECT_CONFIDENCE_REPLY,
    JudgeTemplate,
    Verdict,
    confidence_if_correct,
)
from agentlab.bench.scoring.metrics import exact_match

LONGMEMEVAL_JUDGE_VERSION = "longmemeval-judge-v1"
LONGMEMEVAL_JUDGE_PROMPT = """You grade an assistant's answer to a question about the user's past conversations.

Question: {query}
Reference answer: {reference}
Candidate answer: {prediction}

Decide whether the candidate answer is faithful and semantically equivalent to the reference
answer for this question. Extra harmless detail is fine; a different or missing fact is not.
Reply with a JSON object only:
{{"correct": true or false, "confidence": a number from 0.0 to 1.0, "reason": "one short sentence"}}"""


def exact_match_verdict(*, query: str, reference: str, prediction: str) -> Verdict | None:
    """Correct with full confidence, without a call, when the exact-match rule already holds."""
    if exact_match(prediction, reference) == 1.0:
        return Verdict(1.0, correct=True, confidence=1.0, reason="exact match")
    return None


LONGMEMEVAL_JUDGE = JudgeTemplate(name="longmemeval", version=LONGMEMEVAL_JUDGE_VERSION, text=LONGMEMEVAL_JUDGE_PROMPT,
                                  reply=CORRECT_CONFIDENCE_REPLY, verdict=confidence_if_correct,
                                  precheck=exact_match_verdict)
