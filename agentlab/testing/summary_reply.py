"""How the local test server answers agentlab's own summary requests: as long as the request allows.

A question is answered with the prompt's sentences that match it (``extractive_answer``), but a
summary request has no question to match: its one user turn *is* the material. Answered like a
question, every summary came out as the same short line whatever the policy asked for, so a sweep
of summary settings compared identical runs. Here a summary request gets an extractive summary of
the conversation it carries, whose length follows what the policy controls:

* the reply budget, ``max_tokens`` (``summary.max_output_tokens``), at 0.7 words a token;
* a word cap the prompt states ("under N words", ``summary.max_summary_words``);

and never more than a fifth of the conversation's words (a summary is much shorter than what it
summarises: QMSum's published run averaged 1,776 characters of summary for a 20-30k-token meeting,
``benchmarks/qmsum.toml``).

Sentences are ranked by how many frequent content words they hold (Luhn's word-significance idea:
H. P. Luhn, "The Automatic Creation of Literature Abstracts", IBM J. R&D 2(2), 1958) and returned in
conversation order, so a longer budget keeps more of the conversation. The prompt's wording
(``compact`` or ``nine_section``) does not change the reply: it is not a model.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

__all__ = ["extractive_summary", "is_summary_request", "summary_word_budget"]

#: Words per token when ``max_tokens`` becomes a word budget (the same rate as the server's answers).
WORDS_PER_TOKEN = 0.7
_WORD = re.compile(r"[A-Za-z0-9']+")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD_CAP = re.compile(r"under (\d+) words", re.IGNORECASE)
_CONVERSATION = re.compile(r"<conversation>\n?(.*?)\n?</conversation>", re.DOTALL)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _last_user(messages: Sequence[dict[str, Any]]) -> str:
    return next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")


def is_summary_request(messages: Sequence[dict[str, Any]]) -> bool:
    """Whether this is agentlab's summariser asking (its system line, then the filled template)."""
    from agentlab.summary.prompts import SUMMARY_SYSTEM_PROMPT

    return bool(messages) and messages[0].get("role") == "system" \
        and _text(messages[0].get("content")).strip() == SUMMARY_SYSTEM_PROMPT and _last_user(messages) != ""


def summary_word_budget(messages: Sequence[dict[str, Any]], max_tokens: int) -> int:
    """Words the reply may have: ``max_tokens`` at :data:`WORDS_PER_TOKEN`, or the prompt's cap if lower."""
    budget = max(8, int(max_tokens * WORDS_PER_TOKEN))
    cap = _WORD_CAP.search(_last_user(messages))
    return min(budget, int(cap.group(1))) if cap else budget


def extractive_summary(messages: Sequence[dict[str, Any]], max_words: int) -> str:
    """The conversation's most significant sentences, in their order, within ``max_words`` words."""
    from agentlab.recall.index import ENGLISH_STOPWORDS

    request = _last_user(messages)
    block = _CONVERSATION.search(request)
    source = block.group(1) if block else request
    sentences = [s.strip() for s in _SENTENCE_SPLIT.split(source) if len(s.strip()) >= 8]
    if not sentences:
        return "Nothing to summarise."
    max_words = min(max_words, max(8, len(source.split()) // 5))
    words = [[w.lower() for w in _WORD.findall(s)] for s in sentences]
    frequency = Counter(w for ws in words for w in ws if w not in ENGLISH_STOPWORDS)
    # A sentence scores the mean frequency of its distinct content words (long filler does not win).
    scored = []
    for index, ws in enumerate(words):
        content = {w for w in ws if w not in ENGLISH_STOPWORDS}
        score = sum(frequency[w] for w in content) / max(1, len(ws)) if content else 0.0
        scored.append((-score, index))
    chosen: list[int] = []
    used = 0
    for _, index in sorted(scored):
        if used >= max_words:
            break
        chosen.append(index)
        used += len(sentences[index].split())
    kept = " ".join(sentences[i] for i in sorted(chosen))
    return " ".join(kept.split()[:max_words])
