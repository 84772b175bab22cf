"""QMSum's judge: is the answer faithful to, and equivalent with, the reference.

JSON ``{"correct", "confidence", "reason"}``; score = confidence if correct else 0, as the published
summary benchmark scores it (docs/sources.md#summary-benchmark-metrics). The prompt text is part of
every judge call's cache key: change it only with a new version.
"""

from __future__ import annotations

from agentlab.bench.scoring.judge import CORRECT_CONFIDENCE_REPLY, JudgeTemplate, confidence_if_correct

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

QMSUM_JUDGE = JudgeTemplate(name="qmsum", version=QMSUM_JUDGE_VERSION, text=QMSUM_JUDGE_PROMPT,
                            reply=CORRECT_CONFIDENCE_REPLY, verdict=confidence_if_correct)
