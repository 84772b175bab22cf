"""Action supports: the values an agent's step uses that it could only have read in a tool result.

A trajectory's *assistant step* is one assistant event (its reply text and its tool calls). The
step's **used text** is its reply text plus every scalar value of its tool-call arguments (the
arguments parsed as JSON, strings as they are, numbers as JSON writes them; arguments that are not
JSON are taken as one string).

**Units of a tool result** (what a result offers to later steps):

* a result whose content parses as a JSON object or list: every scalar value in it, at any depth
  (strings as they are, numbers as JSON writes them; booleans and null are never units);
* any other result (SWE-agent's file views, searches, test output): its *identifier-like tokens* —
  runs matching :data:`IDENTIFIER` (letters, digits, ``_``, joined by ``.``, ``/``, ``-``, ``:``,
  optionally after a leading ``/``) — and its *code lines* — each line with a leading SWE-agent
  line-number prefix (``123:``) removed, then stripped, of at least :data:`MIN_LINE_CHARS`
  characters and holding one of ``()[]{}=:,.'"``.

A unit is **non-trivial** when it has at least :data:`MIN_CHARS` characters, is not in
:data:`STOP_WORDS`, and is not a run of lower-case letters alone (``economy``, ``available``,
``return``): it holds a digit, an upper-case letter after the first character or a ``_ . / - : @``
or space. For an identifier-like token of a non-JSON result a capital first letter alone is not
enough (``Found`` is prose, ``HAT001`` and ``missingColon`` are not).

A unit **occurs** in a text when it is a substring of it whose neighbours are not letters, digits
or ``_`` (for code lines: a substring after collapsing whitespace runs to one space on both
sides). The **supports** of a step are the non-trivial units of the tool results *before* the step
that occur in the step's used text and that only a tool had told the agent:

1. **Not the user's.** The unit occurs in none of the user messages before the step nor in the
   system prompt, in any surface form :class:`UserForms` normalises: case aside (the user typed
   ``hat229``, the tool returned ``HAT229``), and an ISO date ``YYYY-MM-DD`` whose month and day
   the user gave in words or digits ("May 27", "27th of May", "5/27"; with the year when the user
   gave one) — ``2024-05-27`` after "I fly on May 27" is the user's date, not the tool's.
2. **Not the agent's own first.** The unit does not occur in the used text of an assistant step
   before the first tool result that holds it: a file the agent created (``reproduce.py``), a code
   line it wrote in an edit and later saw in a file view, a value it put in a call itself
   (``one_way``) and the tool echoed back are the agent's, not the tool's.
3. **Once per text.** A text a tool gave in several forms (a JSON value of one result, an
   identifier-like token of another) is one support, its sources merged; the first form seen
   decides how it is matched (a code line by its whitespace-normalised text, any other unit at
   word boundaries).

Each support keeps the ids of the earlier results it occurs in (its *sources*).

What this leaves out: a value the agent re-derived in other words (a price summed from two
results), a value read but not repeated (a decision not to rebook) and a value both a tool and the
user gave (not a support: the user's words would keep it). The user's forms cover dates and case;
a number the user spelled out ("two bags") is not normalised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agentlab.events import Event

#: The version of the definitions above (units, non-trivial, occurs, supports); stored with every
#: row of the ``trajectory_retention`` table. Bump it when a definition changes.
SUPPORTS_VERSION = "supports-v2"
#: Shortest support, in characters.
MIN_CHARS = 4
#: Shortest code line counted as a unit, in characters (after stripping).
MIN_LINE_CHARS = 12
#: Values that are never supports, whatever their length (compared lower-cased).
STOP_WORDS: frozenset[str] = frozenset({"true", "false", "null", "none", "nan", "0.0", "1.0", "0000"})
#: An identifier-like token of a non-JSON result.
IDENTIFIER = re.compile(r"/?[A-Za-z0-9_]+(?:[./:\-][A-Za-z0-9_]+)*")
_LINE_NUMBER = re.compile(r"^\s*\d+:")
_CODE_CHARS = set("()[]{}=:,.'\"")
_MARK_CHARS = set("_./-:@ ")


@dataclass(frozen=True)
class Unit:
    """One value a tool result offers: its text and kind (``value``, ``token`` or ``line``)."""

    text: str
    kind: str


@dataclass(frozen=True)
class Support:
    """One support of a step: the unit and the earlier tool results it occurs in (event ids, oldest first)."""

    text: str
    kind: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Step:
    """One assistant step of a trajectory and its supports."""

    #: Index of the assistant event in the ledger (the request holds ``events[:index]``).
    index: int
    event_id: str
    supports: tuple[Support, ...]


def _number(value: float | int) -> str:
    return json.dumps(value)


def json_scalars(value: Any) -> Iterator[str]:
    """Every string and number in a parsed JSON value, depth first (booleans and null skipped)."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, (int, float)):
        yield _number(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from json_scalars(v)
    elif isinstance(value, list):
        for v in value:
            yield from json_scalars(v)


def _parsed(text: str) -> Any:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None


def non_trivial(text: str, *, token: bool = False) -> bool:
    """Whether ``text`` may be a support (see the module docstring); ``token``: an identifier-like token."""
    if len(text) < MIN_CHARS or text.lower() in STOP_WORDS:
        return False
    if any(c.isdigit() or c in _MARK_CHARS for c in text):
        return True
    return any(c.isupper() for c in (text[1:] if token else text))


def result_units(content: str) -> list[Unit]:
    """The non-trivial units of one tool result's content, deduplicated, in first-seen order."""
    parsed = _parsed(content)
    seen: dict[str, Unit] = {}
    if isinstance(parsed, (dict, list)):
        for v in json_scalars(parsed):
            v = v.strip()
            if v not in seen and non_trivial(v):
                seen[v] = Unit(v, "value")
        return list(seen.values())
    for m in IDENTIFIER.finditer(content):
        tok = m.group(0)
        if tok not in seen and non_trivial(tok, token=True):
            seen[tok] = Unit(tok, "token")
    for raw in content.splitlines():
        line = " ".join(_LINE_NUMBER.sub("", raw, count=1).split())
        if len(line) >= MIN_LINE_CHARS and any(c in _CODE_CHARS for c in line) and line not in seen:
            seen[line] = Unit(line, "line")
    return list(seen.values())


@lru_cache(maxsize=65536)
def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9_])" + re.escape(text) + r"(?![A-Za-z0-9_])")


def occurs(unit: str, text: str, kind: str = "value") -> bool:
    """Whether ``unit`` occurs in ``text`` (code lines whitespace-normalised; others at word boundaries)."""
    if kind == "line":
        return unit in " ".join(text.split())
    return unit in text and _pattern(unit).search(text) is not None


def used_text(event: Event) -> str:
    """The reply text of an assistant event plus the scalar values of its tool-call arguments, one per line."""
    message = event.message
    if message is None:
        return ""
    parts = [message.content] if message.content else []
    for call in message.tool_calls:
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            parts.append(call.arguments)
            continue
        parts += list(json_scalars(args))
    return "\n".join(parts)


_MONTHS = {name: i + 1 for i, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
    ("december", "dec"))) for name in names}
_MONTH = r"(?P<{g}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{g}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(?P<{g}>(?:19|20)\d\d))?"
#: Dates in words or digits: "May 27", "May 27th, 2024", "27 May", "27th of May", "5/27", "5/27/2024".
_USER_DATES = (
    re.compile(r"\b" + _MONTH.format(g="m") + r"\s+" + _DAY.format(g="d") + r"\b" + _YEAR.format(g="y"),
               re.IGNORECASE),
    re.compile(r"\b" + _DAY.format(g="d") + r"\s+(?:of\s+)?" + _MONTH.format(g="m") + r"\b" + _YEAR.format(g="y"),
               re.IGNORECASE),
    re.compile(r"\b(?P<m>1[0-2]|0?[1-9])/(?P<d>[0-3]?\d)(?:/(?P<y>(?:19|20)\d\d))?\b"),
)
_ISO_DATE = re.compile(r"(?<![\d-])((?:19|20)\d\d)-([01]\d)-([0-3]\d)(?![\d-])")


def user_dates(text: str) -> set[tuple[int | None, int, int]]:
    """The dates a user's text gives in words or digits, as (year or ``None``, month, day)."""
    out: set[tuple[int | None, int, int]] = set()
    for pattern in _USER_DATES:
        for m in pattern.finditer(text):
            month = m.group("m")
            month_n = int(month) if month.isdigit() else _MONTHS[month.lower()]
            day = int(m.group("d"))
            if 1 <= day <= 31:
                out.add((int(m.group("y")) if m.group("y") else None, month_n, day))
    return out


@dataclass
class UserForms:
    """What the user (and the system prompt) said so far, in the forms :func:`said_by_user` compares."""

    texts: list[str]
    lowered: list[str]
    dates: set[tuple[int | None, int, int]]

    @staticmethod
    def of(texts: Sequence[str]) -> UserForms:
        """The forms of ``texts``."""
        forms = UserForms([], [], set())
        for t in texts:
            forms.add(t)
        return forms

    def add(self, text: str) -> None:
        """One more user message."""
        self.texts.append(text)
        self.lowered.append(text.lower())
        self.dates |= user_dates(text)


def said_by_user(text: str, kind: str, forms: UserForms) -> bool:
    """Whether the user gave ``text``: verbatim, case aside, or (an ISO date) its month and day in words."""
    low = text.lower()
    if any(occurs(low, u, kind) for u in forms.lowered):
        return True
    if forms.dates:
        for m in _ISO_DATE.finditer(text):
            year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if (None, month, day) in forms.dates or (year, month, day) in forms.dates:
                return True
    return False


@dataclass(frozen=True)
class Rules:
    """Which of the module docstring's rules :func:`step_supports` applies (all, by default).

    Switching one off gives what it removes (``benchmarks/counts/supports_rules.py`` counts them); all off
    is the definition before them (``supports-v1``).
    """

    #: Rule 1's normalised forms (off: only the user's verbatim text, case kept).
    user_forms: bool = True
    #: Rule 2 (off: a value the agent wrote first still counts).
    agent_first: bool = True
    #: Rule 3 (off: a text in two forms is two supports).
    once_per_text: bool = True


def step_supports(events: Sequence[Event], instruction: str = "", rules: Rules = Rules()) -> list[Step]:
    """The supports of every assistant step of a ledger (definitions in the module docstring)."""
    steps: list[Step] = []
    units: dict[tuple[str, str], list[str]] = {}  # (text, kind or "") -> result event ids
    kinds: dict[tuple[str, str], str] = {}
    first_at: dict[tuple[str, str], int] = {}  # -> ledger index of the first result holding it
    forms = UserForms.of([instruction] if instruction else [])
    agent: list[tuple[int, str]] = []  # (ledger index, used text) of the assistant steps so far
    for i, event in enumerate(events):
        message = event.message
        if message is None:
            continue
        if message.role == "user":
            forms.add(message.content)
        elif message.role == "tool":
            for unit in result_units(message.content):
                key = (unit.text, "" if rules.once_per_text else unit.kind)
                ids = units.setdefault(key, [])
                if not ids:
                    kinds[key], first_at[key] = unit.kind, i
                if not ids or ids[-1] != event.id:
                    ids.append(event.id)
        elif message.role == "assistant":
            used = used_text(event)
            found = []
            for key, ids in units.items():
                text, kind = key[0], kinds[key]
                if not occurs(text, used, kind):
                    continue
                if rules.user_forms:
                    if said_by_user(text, kind, forms):
                        continue
                elif any(occurs(text, u, kind) for u in forms.texts):
                    continue
                if rules.agent_first and any(j < first_at[key] and occurs(text, t, kind) for j, t in agent):
                    continue
                found.append(Support(text, kind, tuple(ids)))
            steps.append(Step(i, event.id, tuple(found)))
            agent.append((i, used))
    return steps


__all__ = [
    "IDENTIFIER",
    "MIN_CHARS",
    "MIN_LINE_CHARS",
    "STOP_WORDS",
    "SUPPORTS_VERSION",
    "Rules",
    "Step",
    "Support",
    "Unit",
    "UserForms",
    "json_scalars",
    "non_trivial",
    "occurs",
    "result_units",
    "said_by_user",
    "step_supports",
    "used_text",
    "user_dates",
]
