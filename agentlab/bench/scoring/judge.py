"""LLM judges: one generic call; each benchmark's prompt, reply schema and version live beside its task.

A benchmark declares a :class:`JudgeTemplate` (``agentlab/bench/tasks/<bench>_judge.py``): its name,
version, prompt text, the fields of the JSON reply (:class:`Flag`, :class:`Number`,
:class:`Choice`, :class:`Text`) and the rule that turns a parsed reply into a :class:`Verdict`.
:meth:`Judge.grade` renders it, asks the judge model (temperature 0, the schema sent so backends that
enforce schemas compile it into a grammar), checks the reply against the fields (types, allowed
values, ranges) and returns a :class:`JudgeResult`. Adding a benchmark adds a template; this module
does not change.

A reply that does not parse is a :class:`JudgeResult` with ``parse_error`` set and ``score`` None:
it is never silently scored (the published summary benchmark defaulted such replies to 0.5 / "correct if the word
true appears"). It is stored as NULL (left out of a mean, and counted), except where the published
score divides by all questions (LoCoMo, LongMemEval): there it is stored as 0, with the parse error
in the detail. A failing judge *call* (``ModelError``) propagates, so the case is recorded as
failed and retried on the next run. Every result carries the judge model name and the template's
version, and both are stored with the scores (``scores.version`` = ``<version>@<judge spec>``); the
versions of a task's templates are also part of a judged run's config (:func:`judge_versions`).
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentlab.bench.scoring.metrics import Score
from agentlab.events import Message
from agentlab.model.base import GenerationConfig, Model, ModelRequest

#: Judge replies are short; this cap keeps a rambling model from spending tokens.
JUDGE_MAX_TOKENS = 256
#: How the ``detail`` of a score from an unparsable judge reply starts (the tables count these).
PARSE_ERROR_PREFIX = "parse_error:"
#: Grammars cannot bound a free number, so an enforced confidence is one of 0.0, 0.1, ..., 1.0.
CONFIDENCE_LEVELS = tuple(round(i / 10, 1) for i in range(11))


# -------------------------------------------------------------------------------- reply fields


@dataclass(frozen=True, kw_only=True)
class ReplyField:
    """One key of a judge's JSON reply: its JSON-schema fragment and how a value is read and checked.

    The schema sent asks for every field; ``needed`` says whether the *parser* insists on it, so a
    backend that ignores the schema may still leave out a field the verdict can do without (a
    reason, LoCoMo's confidence).
    """

    name: str
    needed: bool = True

    def json_schema(self) -> dict[str, Any]:
        """The field's JSON-schema fragment (what a grammar-enforcing backend is held to)."""
        raise NotImplementedError

    def read(self, value: Any) -> Any:
        """The checked value; raises ``ValueError`` naming the field and the problem."""
        raise NotImplementedError

    def when_absent(self) -> Any:
        """The value of a field that is not ``needed`` and was left out."""
        return None

    def missing(self) -> str:
        """The parse error of a ``needed`` field that is absent."""
        return f"missing {self.name!r}"


@dataclass(frozen=True, kw_only=True)
class Flag(ReplyField):
    """A true/false field; the strings ``"true"`` / ``"false"`` are accepted too (any case)."""

    def json_schema(self) -> dict[str, Any]:
        """``{"type": "boolean"}``."""
        return {"type": "boolean"}

    def read(self, value: Any) -> bool:
        """The boolean (numbers such as 1 are refused: they are not a yes or no)."""
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
            return value.strip().lower() == "true"
        raise ValueError(f"{self.name!r} should be true or false, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class Number(ReplyField):
    """A number within ``low``..``high`` (numeric strings accepted).

    ``levels``, when given, is what the schema offers (a grammar cannot bound a free number); the
    parser still takes any number in range, since a backend that does not enforce the schema may
    answer 0.75.
    """

    low: float = 0.0
    high: float = 1.0
    levels: tuple[float, ...] = ()

    def json_schema(self) -> dict[str, Any]:
        """The allowed levels as an enum, else a bounded number."""
        if self.levels:
            return {"enum": list(self.levels)}
        return {"type": "number", "minimum": self.low, "maximum": self.high}

    def read(self, value: Any) -> float:
        """The number, checked against the range."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            try:
                value = float(str(value).strip())
            except ValueError:
                raise ValueError(f"{self.name!r} should be a number, got {value!r}") from None
        number = float(value)
        if not self.low <= number <= self.high:
            raise ValueError(f"{self.name!r} {number} is outside {self.low:g}..{self.high:g}")
        return number


@dataclass(frozen=True, kw_only=True)
class Choice(ReplyField):
    """One of ``options`` (compared after trimming, ignoring case); the option's own spelling is kept."""

    options: tuple[str, ...]

    def json_schema(self) -> dict[str, Any]:
        """The options as an enum."""
        return {"enum": list(self.options)}

    def read(self, value: Any) -> str:
        """The matching option."""
        wanted = str(value).strip().upper()
        for option in self.options:
            if option.upper() == wanted:
                return option
        raise ValueError(f"{self.name!r} should be {' or '.join(self.options)}, got {value!r}")

    def missing(self) -> str:
        """An absent choice is reported as the wrong value None (it names the options)."""
        return f"{self.name!r} should be {' or '.join(self.options)}, got None"


@dataclass(frozen=True, kw_only=True)
class Text(ReplyField):
    """Free text such as the judge's reason; ``max_length`` bounds what a grammar lets it write."""

    max_length: int | None = None
    needed: bool = False

    def json_schema(self) -> dict[str, Any]:
        """A string, bounded when ``max_length`` is set."""
        schema: dict[str, Any] = {"type": "string"}
        if self.max_length is not None:
            schema["maxLength"] = self.max_length
        return schema

    def read(self, value: Any) -> str:
        """The value as text (never fails: a reason is informative, not scored)."""
        return str(value)

    def when_absent(self) -> str:
        """An absent text is empty."""
        return ""


# ------------------------------------------------------------------------------------ template


@dataclass(frozen=True)
class Verdict:
    """What a parsed reply means: the score, and the label, confidence and reason when the reply has them."""

    score: float
    correct: bool | None = None
    confidence: float | None = None
    reason: str = ""


@dataclass(frozen=True)
class JudgeTemplate:
    """A benchmark's judge prompt: name, version, text, reply fields and the rule for its score.

    One object rather than separate arguments, so a prompt always travels with its own version and
    schema (a bumped prompt with a stale version, or another prompt's schema, cannot be passed).

    ``text`` is a :meth:`str.format` template whose placeholders are the fields :meth:`Judge.grade`
    takes. ``reply`` lists the JSON reply's fields in the order a grammar emits them; empty means a
    free-text reply, read by ``read_text``. With ``reply`` set, ``read_text`` is the fallback for a
    reply that holds no JSON object (e.g. an older rubric's ``Score: x`` line). ``precheck`` may
    settle a case without a call (LongMemEval: an exact match is correct); it returns None to ask.
    """

    name: str
    version: str
    text: str
    reply: tuple[ReplyField, ...]
    verdict: Callable[[Mapping[str, Any]], Verdict]
    read_text: Callable[[str], dict[str, Any]] | None = None
    precheck: Callable[..., Verdict | None] | None = None

    def __post_init__(self) -> None:
        if not self.reply and self.read_text is None:
            raise ValueError(f"judge template {self.name!r}: a free-text reply needs read_text")
        names = [f.name for f in self.reply]
        if len(set(names)) != len(names):
            raise ValueError(f"judge template {self.name!r}: reply fields repeat a name: {names}")

    @property
    def placeholders(self) -> frozenset[str]:
        """The field names the text needs."""
        return frozenset(name for _, name, _, _ in string.Formatter().parse(self.text) if name)

    @property
    def schema(self) -> str | None:
        """The JSON schema sent with the request (None for a free-text reply)."""
        if not self.reply:
            return None
        return GenerationConfig.schema_text({
            "type": "object",
            "properties": {f.name: f.json_schema() for f in self.reply},
            "required": [f.name for f in self.reply],
            "additionalProperties": False,
        })

    def render(self, **fields: str) -> str:
        """The prompt; a missing or unexpected field is an error, never an empty or dropped value."""
        missing = sorted(self.placeholders - fields.keys())
        extra = sorted(fields.keys() - self.placeholders)
        if missing or extra:
            raise TypeError(f"judge template {self.name!r} takes {sorted(self.placeholders)}; "
                            f"missing {missing}, unexpected {extra}")
        return self.text.format(**fields)

    def parse(self, raw: str) -> dict[str, Any]:
        """The reply's checked fields; raises ``ValueError`` naming the problem."""
        if not self.reply:
            assert self.read_text is not None  # checked in __post_init__
            return self.read_text(raw)
        try:
            obj = extract_json_object(raw)
        except ValueError:  # json.JSONDecodeError is a ValueError too
            if self.read_text is None:
                raise
            return self.read_text(raw)
        for f in self.reply:
            if f.needed and f.name not in obj:
                raise ValueError(f.missing())
        return {f.name: f.read(obj[f.name]) if f.name in obj else f.when_absent() for f in self.reply}


def judge_versions(templates: Iterable[JudgeTemplate]) -> dict[str, str]:
    """``{name: version}`` of a task's judge templates, for the run config."""
    return {t.name: t.version for t in templates}


# -------------------------------------------------------------------------------- common rules


#: The reply of a correct/confidence judge (QMSum, LongMemEval): the grammar emits ``correct`` first
#: and ends with the ``reason``.
CORRECT_CONFIDENCE_REPLY: tuple[ReplyField, ...] = (
    Flag(name="correct"), Number(name="confidence", levels=CONFIDENCE_LEVELS), Text(name="reason", max_length=160))


def confidence_if_correct(fields: Mapping[str, Any]) -> Verdict:
    """Score = confidence when judged correct, else 0 (QMSum and LongMemEval).

    The published rule: docs/sources.md#summary-benchmark-metrics.
    """
    correct, confidence = fields["correct"], fields["confidence"]
    return Verdict(confidence if correct else 0.0, correct, confidence, fields.get("reason", ""))


# -------------------------------------------------------------------------------------- result


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

    @property
    def version(self) -> str:
        """``<prompt version>@<judge spec>``: what ``scores.version`` holds for this judgement."""
        return f"{self.prompt_version}@{self.judge_model}"

    def to_scores(self, metric: str = "llm_score", *, unparsed_scores_zero: bool = False) -> list[Score]:
        """Rows for the store: ``<metric>`` (and ``<metric>_correct`` when a label exists).

        The version names prompt and judge model, so scores from different judges never mix.
        A reply that did not parse is stored as NULL (left out of means and counted), unless
        ``unparsed_scores_zero``: benchmarks whose published score divides by *all* questions
        (LoCoMo's LLM score, LongMemEval's fixed denominator) store 0 instead. Either way the
        detail starts with :data:`PARSE_ERROR_PREFIX`, so the tables can count such replies.
        """
        detail = f"{PARSE_ERROR_PREFIX} {self.parse_error}" if self.parse_error else (self.reason or None)
        zeroed = bool(self.parse_error) and unparsed_scores_zero
        if zeroed:
            detail = f"{detail}; scored 0 (the published score divides by all questions)"
        rows = [Score(metric, 0.0 if zeroed else self.score, self.version, detail)]
        if self.correct is not None or self.parse_error:
            label = None if self.correct is None else float(self.correct)
            rows.append(Score(f"{metric}_correct", 0.0 if zeroed else label, self.version, detail))
        return rows


# ------------------------------------------------------------------------------------- parsing


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply (code fences and surrounding prose tolerated)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the reply")
    value = json.loads(text[start:end + 1])
    if not isinstance(value, dict):
        raise ValueError("the JSON value is not an object")
    return value


_SCORE_LINE = re.compile(r"score\s*[:：]\s*\**\s*([01](?:\.\d+)?|\.\d+)", re.IGNORECASE)


def parse_score_line(raw: str) -> float:
    """The value of the last ``Score: x`` line; raises ``ValueError`` if absent or out of range."""
    matches = _SCORE_LINE.findall(raw)
    if not matches:
        raise ValueError("no 'Score: <decimal>' line in the reply")
    value = float(matches[-1])
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"score {value} is outside 0..1")
    return value


# --------------------------------------------------------------------------------------- judge


class Judge:
    """Asks a judge model; its spec (e.g. ``openai:gpt-4o-mini``) is stored with every score."""

    def __init__(self, model: Model, spec: str | None = None, *, max_tokens: int = JUDGE_MAX_TOKENS) -> None:
        self.model = model
        self.spec = spec or model.info.name
        self.max_tokens = max_tokens

    def request(self, template: JudgeTemplate, **fields: str) -> ModelRequest:
        """The request :meth:`grade` sends (temperature 0; JSON mode and the schema for a JSON reply)."""
        schema = template.schema
        return ModelRequest(
            messages=[Message.user(template.render(**fields))],
            config=GenerationConfig(
                temperature=0.0, max_tokens=self.max_tokens, response_format="json" if schema else None,
                json_schema=schema,
            ),
            purpose="judge",
        )

    async def grade(self, template: JudgeTemplate, **fields: str) -> JudgeResult:
        """Judge one case with ``template``; a reply that does not parse is recorded, not scored."""
        if template.precheck is not None:
            settled = template.precheck(**fields)
            if settled is not None:
                return self._result(template, settled, skipped_call=True)
        request = self.request(template, **fields)
        response = await self.model.generate(request)
        raw = response.message.content or ""
        try:
            verdict = template.verdict(template.parse(raw))
        except ValueError as exc:
            return JudgeResult(None, self.spec, template.version, raw=raw, parse_error=str(exc))
        return self._result(template, verdict, raw=raw)

    def _result(self, template: JudgeTemplate, verdict: Verdict, **kwargs: Any) -> JudgeResult:
        return JudgeResult(verdict.score, self.spec, template.version, correct=verdict.correct,
                           confidence=verdict.confidence, reason=verdict.reason, **kwargs)
