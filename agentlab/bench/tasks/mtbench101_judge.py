"""MT-Bench-101's judges: consistency of a summary-mode answer with the baseline answer, and the
optional LLM key-information retention.

* Consistency (docs/sources.md#summary-benchmark-metrics): compares response A (baseline) with B
  (summary mode) on factual accuracy, semantic equivalence and completeness; the published rubric's six levels
  1.0/0.8/0.6/0.4/0.2/0.0. v1 asked for a free-text ``Score:`` line; v2 asks for JSON, so the reply
  is structured and a schema-enforcing backend can hold even a small judge to it. A reply without
  a JSON object is still read from its last ``Score: x`` line.
* Retention (``[retention] llm = true``): the share of answer A's key information that answer B
  keeps, as a free-text ``RETENTION_RATE:`` line (the published harness's format).

The prompt texts are part of every judge call's cache key: change them only with a new version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentlab.bench.scoring.judge import JudgeTemplate, Number, Text, Verdict, parse_score_line

CONSISTENCY_JUDGE_VERSION = "mtbench-consistency-v2"
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


def _score_verdict(fields: Mapping[str, Any]) -> Verdict:
    """The rubric score is the verdict (the reason is not stored: the score rows carry per-turn values)."""
    return Verdict(fields["score"])


def _score_line(raw: str) -> dict[str, Any]:
    """A v1-style reply (or a model that ignores JSON): the last ``Score: x`` line."""
    return {"score": parse_score_line(raw)}


CONSISTENCY_JUDGE = JudgeTemplate(
    name="mtbench-consistency",
    version=CONSISTENCY_JUDGE_VERSION,
    text=CONSISTENCY_JUDGE_PROMPT,
    reply=(Text(name="reason", max_length=240), Number(name="score", levels=CONSISTENCY_LEVELS)),
    verdict=_score_verdict,
    read_text=_score_line,
)

RETENTION_LLM_PROMPT_VERSION = "mtbench-retention-llm-v1"
RETENTION_LLM_PROMPT = """You compare two answers of an AI assistant to the same conversation turn.

Answer A (assistant that saw the full conversation history):
{baseline}

Answer B (assistant that saw a summary of the earlier history):
{test}

Estimate what share of the KEY INFORMATION in answer A is also present in answer B. Key
information means specific facts, numbers, dates and names; the main conclusions or
recommendations; important context or constraints; action items or next steps.

Reply in exactly this format:
RETENTION_RATE: <a decimal between 0.0 and 1.0>
MISSING: <comma-separated list of missing items, or none>"""


def parse_retention_rate(reply: str) -> float | None:
    """The ``RETENTION_RATE:`` value clamped to [0, 1]; None when absent (the reference assumed 0.8)."""
    for line in reply.splitlines():
        line = line.strip()
        if line.upper().startswith("RETENTION_RATE:"):
            value = line.split(":", 1)[1].strip().split()[0] if line.split(":", 1)[1].strip() else ""
            try:
                return min(1.0, max(0.0, float(value.rstrip(".,;"))))
            except ValueError:
                return None
    return None


def _rate_verdict(fields: Mapping[str, Any]) -> Verdict:
    """The retention rate is the verdict."""
    return Verdict(fields["rate"])


def _retention_fields(raw: str) -> dict[str, Any]:
    """The rate of a free-text reply; no ``RETENTION_RATE:`` line is a parse error (left out of the mean)."""
    rate = parse_retention_rate(raw)
    if rate is None:
        raise ValueError("no 'RETENTION_RATE: <decimal>' line in the reply")
    return {"rate": rate}


RETENTION_LLM_JUDGE = JudgeTemplate(
    name="mtbench-retention-llm",
    version=RETENTION_LLM_PROMPT_VERSION,
    text=RETENTION_LLM_PROMPT,
    reply=(),
    verdict=_rate_verdict,
    read_text=_retention_fields,
)
