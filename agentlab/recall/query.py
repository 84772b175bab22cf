"""Query expansion: the queries ``session_search`` tries, and when it stops trying.

A question often names several things at once ("the launch date, and who set the price") or wraps
its keywords in a question form that a lexical index matches badly. trpc-agent-go's behaviour
(docs/sources.md#session-recall) is kept here as pure functions: split on clauses, strip question
openers, fall back to keyword windows; broaden only while the first query found too little; merge
hits by event keeping the best score. :mod:`agentlab.recall.search` runs them against the index
and the in-session scan.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

from agentlab.recall.hits import EventHit

__all__ = [
    "LEAD_INS",
    "SEARCH_STOPWORDS",
    "clause_queries",
    "dedupe",
    "expand_query",
    "has_compound_intent",
    "keyword_fallbacks",
    "keyword_tokens",
    "merge_hits",
    "query_tokens",
    "search_with_fallback",
    "should_broaden",
]

#: Words that never make a useful search keyword (the reference's list of 52).
SEARCH_STOPWORDS: frozenset[str] = frozenset(
    """a about an and are as at be by did discuss discussed do does for from had has have how in into
    is it its me of on or say said session summary tell that the their them they this to was were
    what when where which who why with would""".split()
)

#: Question openers stripped from each clause before it becomes a query.
LEAD_INS: tuple[str, ...] = (
    "summarize the discussion about ",
    "summarize the discussion on ",
    "summarize the discussion around ",
    "summarize discussion about ",
    "what did ",
    "what were ",
    "what was ",
    "what are ",
    "what is ",
    "who said ",
    "how did ",
)

_CLAUSE_SPLIT = re.compile(r",|;| and | or ", re.IGNORECASE)
_QUERY_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_MAX_KEYWORDS = 8
_MAX_KEYWORD_FALLBACKS = 4


def dedupe(values: Sequence[str]) -> list[str]:
    """``values`` stripped, without empties and repeats, in first-seen order (queries are tried in order)."""
    seen: set[str] = set()
    out: list[str] = []
    for value in values:
        value = value.strip()
        if value and value not in seen:
            seen.add(value)
            out.append(value)
    return out


def query_tokens(text: str) -> list[str]:
    """The word tokens of ``text`` as written (letters and digits; no stop-word or length filter)."""
    return _QUERY_TOKEN.findall(text)


def keyword_tokens(text: str) -> list[str]:
    """Lowercase word tokens minus stop-words and short words (a token with a digit may be short)."""
    words = [t.lower() for t in _QUERY_TOKEN.findall(text)]
    return dedupe([w for w in words if w not in SEARCH_STOPWORDS and (len(w) >= 3 or any(c.isdigit() for c in w))])


def _strip_lead_in(clause: str) -> str:
    lower = clause.lower()
    for prefix in LEAD_INS:
        if lower.startswith(prefix):
            return clause[len(prefix):].strip()
    return clause.strip()


def clause_queries(query: str) -> list[str]:
    """One query per clause (split on , ; and / or), lead-ins stripped, plus its keyword form."""
    clauses = [c for c in _CLAUSE_SPLIT.split(query) if c.strip()]
    if len(clauses) <= 1:
        return []
    out: list[str] = []
    for clause in clauses:
        clause = " ".join(_strip_lead_in(clause.strip()).strip(" .?!:").split())
        if not clause:
            continue
        out.append(clause)
        keywords = " ".join(keyword_tokens(clause))
        if keywords and keywords != clause:
            out.append(keywords)
    return dedupe(out)


def keyword_fallbacks(query: str) -> list[str]:
    """The keyword string (first 4 + last 4 when over 8) and sliding 3/4-keyword windows; at most 4."""
    primary = " ".join(query.split())
    keywords = keyword_tokens(primary)
    if not keywords:
        return []
    if len(keywords) > _MAX_KEYWORDS:
        keywords = dedupe(keywords[:4] + keywords[-4:])
    joined = " ".join(keywords)
    if joined == primary:
        return []
    out = [joined]
    if len(keywords) >= 3:
        width = 4 if len(keywords) >= 5 else 3
        for start in range(0, len(keywords) - width + 1):
            out.append(" ".join(keywords[start : start + width]))
            if len(out) >= _MAX_KEYWORD_FALLBACKS:
                break
    return dedupe(out)


def expand_query(query: str) -> list[str]:
    """The queries ``session_search`` may try, in order: the query, its clauses, keyword fallbacks."""
    primary = " ".join(query.split())
    if not primary:
        return []
    return dedupe([primary, *clause_queries(primary), *keyword_fallbacks(primary)])


def has_compound_intent(query: str) -> bool:
    """Whether the query asks about several things (a clause separator), so one hit is not enough."""
    lower = query.lower()
    return "," in lower or ";" in lower or " and " in lower or " or " in lower


def should_broaden(query: str, primary_hits: int, top_k: int) -> bool:
    """Whether to try the expanded queries after the first found ``primary_hits`` of ``top_k``."""
    if primary_hits == 0:
        return True
    if primary_hits >= top_k:
        return False
    if has_compound_intent(query):
        return True
    return primary_hits < min(2, top_k)


def merge_hits(current: list[EventHit], incoming: list[EventHit]) -> list[EventHit]:
    """Union by session:event keeping the best score; best first, newer first on ties."""
    by_key: dict[str, EventHit] = {h.ref.doc_id: h for h in current}
    for hit in incoming:
        known = by_key.get(hit.ref.doc_id)
        if known is None or hit.score > known.score:
            by_key[hit.ref.doc_id] = hit
    return sorted(by_key.values(), key=lambda h: (-h.score, -h.ref.timestamp, -h.ref.position))


async def search_with_fallback(query: str, top_k: int,
                               run: Callable[[str], Awaitable[list[EventHit]]]) -> list[EventHit]:
    """Run the query, then broaden with clause/keyword queries by the reference rules."""
    queries = expand_query(query)
    merged: list[EventHit] = []
    primary_found = False
    for number, q in enumerate(queries):
        found: list[EventHit] = await run(q)
        merged = merge_hits(merged, found)
        if number == 0:
            primary_found = bool(found)
            if not should_broaden(q, len(found), top_k):
                break
            continue
        if not primary_found and merged:
            break
        if len(merged) >= top_k:
            break
    return merged[:top_k]
