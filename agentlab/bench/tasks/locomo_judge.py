"""LoCoMo's judge: a CORRECT / WRONG label with a confidence.

mem0-style J is the label; the published memory report's "LLM score" is the confidence if CORRECT,
else 0 (the label alone when a reply gives no confidence). Known pitfall
(docs/sources.md#metric-pitfalls): lenient judges accept vague but on-topic answers, so the prompt asks for the same fact, not the same topic.
The prompt text is part of every judge call's cache key: change it only with a new version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentlab.bench.scoring.judge import CONFIDENCE_LEVELS, Choice, JudgeTemplate, Number, Text, Verdict

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


def label_verdict(fields: Mapping[str, Any]) -> Verdict:
    """Confidence when CORRECT (1.0 without a confidence: mem0's binary J), else 0."""
    correct, confidence = fields["label"] == "CORRECT", fields["confidence"]
    score = (confidence if confidence is not None else 1.0) if correct else 0.0
    return Verdict(score, correct, confidence, fields["reason"])


LOCOMO_JUDGE = JudgeTemplate(
    name="locomo",
    version=LOCOMO_JUDGE_VERSION,
    text=LOCOMO_JUDGE_PROMPT,
    reply=(Choice(name="label", options=("CORRECT", "WRONG")),
           Number(name="confidence", levels=CONFIDENCE_LEVELS, needed=False), Text(name="reason", max_length=160)),
    verdict=label_verdict,
)
