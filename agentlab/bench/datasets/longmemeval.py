"""LongMemEval (Wu et al., "LongMemEval: Benchmarking Chat Assistants on Long-Term Interactive
Memory", ICLR 2025; github.com/xiaowu0162/LongMemEval, MIT).

Files (one JSON list of 500 questions each): ``longmemeval_s_cleaned.json`` (~50 sessions per
question; the published summary run used this one), ``longmemeval_m_cleaned.json`` (~500 sessions),
``longmemeval_oracle.json`` (evidence sessions only), and the pre-cleaning ``longmemeval_s.json`` /
``longmemeval_m.json``. Record fields: ``question_id`` (``..._abs`` for abstention), ``question_type``
(one of :data:`QUESTION_TYPES`), ``question``, ``answer``, ``question_date``,
``haystack_session_ids``, ``haystack_dates``, ``haystack_sessions`` (each a list of
``{role, content[, has_answer]}``) and ``answer_session_ids``.

No copy of the data could be obtained where this loader was written, so its tests run on
:func:`write_longmemeval_fixture`, a generator of small files in the same schema.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agentlab.bench.datasets.base import DatasetError, read_json, require, resolve_file

NAME = "longmemeval"
FILES: dict[str, str] = {
    "s_cleaned": "longmemeval_s_cleaned.json",
    "m_cleaned": "longmemeval_m_cleaned.json",
    "oracle": "longmemeval_oracle.json",
    "s": "longmemeval_s.json",
    "m": "longmemeval_m.json",
}
DEFAULT_VARIANT = "s_cleaned"
QUESTION_TYPES: tuple[str, ...] = (
    "single-session-user", "single-session-assistant", "single-session-preference",
    "temporal-reasoning", "knowledge-update", "multi-session",
)
#: The published summary run: single-session-user, the first 70 after the type filter.
PUBLISHED_QUESTION_TYPE = "single-session-user"
PUBLISHED_CASES = 70


@dataclass(frozen=True)
class HaystackTurn:
    """One message of a haystack session; ``has_answer`` marks the turn that holds the evidence."""

    role: str  # "user" | "assistant"
    content: str
    has_answer: bool = False


@dataclass(frozen=True)
class HaystackSession:
    """One dated chat session of a question's haystack."""

    session_id: str
    date: str
    turns: tuple[HaystackTurn, ...]


@dataclass(frozen=True)
class LongMemEvalQuestion:
    """One question with its own haystack of sessions (each question brings its own history), its gold
    answer and the ids of the sessions that hold the evidence.
    """

    question_id: str
    question_type: str
    question: str
    answer: str
    question_date: str
    sessions: tuple[HaystackSession, ...]
    answer_session_ids: tuple[str, ...]

    @property
    def is_abstention(self) -> bool:
        """Abstention items (id ending ``_abs``): the answer is not in the haystack, so the right reply is
        to say so.
        """
        return self.question_id.endswith("_abs")

    def evidence_turns(self) -> list[tuple[int, int]]:
        """(session index, turn index) of every ``has_answer`` turn (for evidence recall@k)."""
        return [(si, ti) for si, s in enumerate(self.sessions) for ti, t in enumerate(s.turns) if t.has_answer]


@dataclass(frozen=True)
class LongMemEvalData:
    """The parsed questions of one variant's file and that file's sha256 (stored with every run)."""

    questions: tuple[LongMemEvalQuestion, ...]
    variant: str
    sha256: str

    def select(self, question_types: Iterable[str] = (PUBLISHED_QUESTION_TYPE,), limit: int = 0) -> list[LongMemEvalQuestion]:
        """Questions of the given types in file order, then the first ``limit`` (0 = all)."""
        wanted = set(question_types)
        unknown = wanted - set(QUESTION_TYPES)
        if unknown:
            raise ValueError(f"unknown LongMemEval question type(s) {sorted(unknown)}; known: {', '.join(QUESTION_TYPES)}")
        picked = [q for q in self.questions if q.question_type in wanted]
        return picked[:limit] if limit > 0 else picked


def parse_question(raw: object, where: str) -> LongMemEvalQuestion:
    """One question object of the file; :class:`DatasetError` naming ``where`` and the field when the shape
    is wrong.
    """
    qid = require(raw, "question_id", str, where)
    where = f"{where} ({qid})"
    qtype = require(raw, "question_type", str, where)
    if qtype not in QUESTION_TYPES:
        raise DatasetError(f"{where}: unknown question_type {qtype!r}")
    ids = require(raw, "haystack_session_ids", list, where)
    dates = require(raw, "haystack_dates", list, where)
    sessions_raw = require(raw, "haystack_sessions", list, where)
    if not (len(ids) == len(dates) == len(sessions_raw)):
        raise DatasetError(
            f"{where}: haystack_session_ids ({len(ids)}), haystack_dates ({len(dates)}) and "
            f"haystack_sessions ({len(sessions_raw)}) differ in length"
        )
    sessions = []
    for si, (sid, date, turns_raw) in enumerate(zip(ids, dates, sessions_raw, strict=True)):
        if not isinstance(turns_raw, list):
            raise DatasetError(f"{where}: haystack_sessions[{si}] should be a list of turns")
        turns = []
        for ti, turn in enumerate(turns_raw):
            at = f"{where}: haystack_sessions[{si}][{ti}]"
            role = require(turn, "role", str, at)
            if role not in {"user", "assistant"}:
                raise DatasetError(f"{at}: role should be user or assistant, got {role!r}")
            turns.append(HaystackTurn(role, require(turn, "content", str, at), bool(turn.get("has_answer", False))))
        sessions.append(HaystackSession(str(sid), str(date), tuple(turns)))
    answer = raw["answer"] if isinstance(raw, dict) and "answer" in raw else None
    if answer is None:
        raise DatasetError(f"{where}: missing field 'answer'")
    return LongMemEvalQuestion(
        question_id=qid,
        question_type=qtype,
        question=require(raw, "question", str, where),
        answer=str(answer),
        question_date=str(require(raw, "question_date", str, where)),
        sessions=tuple(sessions),
        answer_session_ids=tuple(str(s) for s in require(raw, "answer_session_ids", list, where)),
    )


def parse_file(path: Path, variant: str = DEFAULT_VARIANT, sha256: str = "") -> LongMemEvalData:
    """Parse a LongMemEval file already on disk (a variant's file or a test fixture)."""
    raw = read_json(path, "LongMemEval")
    if not isinstance(raw, list):
        raise DatasetError(f"{path}: expected a JSON list of questions, got {type(raw).__name__}")
    questions = tuple(parse_question(q, f"{path}: item {i}") for i, q in enumerate(raw))
    return LongMemEvalData(questions, variant, sha256)


def load_longmemeval(variant: str = DEFAULT_VARIANT, *, manifest: str | os.PathLike[str] | None = None,
                     allow_download: bool | None = None) -> LongMemEvalData:
    """Load one LongMemEval file (``s_cleaned``, ``m_cleaned``, ``oracle``, ``s`` or ``m``)."""
    if variant not in FILES:
        raise ValueError(f"unknown LongMemEval variant {variant!r}; known: {', '.join(FILES)}")
    resolved = resolve_file(NAME, FILES[variant], manifest=manifest, allow_download=allow_download)
    return parse_file(resolved.local_path, variant, resolved.sha256 or "")


def load_file_or_variant(path: str, variant: str) -> LongMemEvalData:
    """The file at ``path`` in the same schema (``[dataset] path``, hashed here) when given, else ``variant``'s file.

    The sha256 of what was read is part of the run id: a ``DatasetError`` says so if it is unknown.
    """
    if path.strip():
        file = Path(path.strip()).expanduser()
        if not file.is_file():
            raise DatasetError(f"longmemeval: [dataset] path {file} is not a file")
        return parse_file(file, variant=variant, sha256=hashlib.sha256(file.read_bytes()).hexdigest())
    if variant not in FILES:
        raise DatasetError(f"longmemeval: unknown [dataset] variant {variant!r}; known: {', '.join(FILES)}")
    try:
        data = load_longmemeval(variant)
    except DatasetError as exc:
        raise DatasetError(f"{exc} Or pass a file in the same schema with --set dataset.path=FILE.") from None
    if not data.sha256:
        raise DatasetError(f"longmemeval: the {variant} file was accepted without a sha256; pass it with "
                           "--set dataset.path=FILE so it is hashed")
    return data


# ------------------------------------------------------------------------------- test fixture


def write_longmemeval_fixture(path: str | os.PathLike[str], n_questions: int = 6, *, sessions_per_question: int = 3,
                              turns_per_session: int = 4, question_types: Iterable[str] = QUESTION_TYPES) -> Path:
    """Write a small, deterministic LongMemEval file in the real schema and return its path.

    Question ``i`` cycles through ``question_types``; its haystack has ``sessions_per_question``
    sessions of alternating user/assistant turns, and exactly one session (the middle one) holds the
    evidence: a user turn marked ``has_answer`` that states the answer. Every fifth question is an
    abstention item (``_abs``) whose answer is not in the haystack.
    """
    types = list(question_types)
    pets = ["a beagle named Rufus", "a cat named Miso", "a parrot named Kiwi", "a turtle named Flash"]
    cities = ["Lisbon", "Osaka", "Tallinn", "Quito", "Perth", "Accra"]
    records = []
    for i in range(n_questions):
        qtype = types[i % len(types)]
        abstain = i % 5 == 4
        qid = f"fx{i:04d}" + ("_abs" if abstain else "")
        city = cities[i % len(cities)]
        evidence_index = sessions_per_question // 2
        sessions, ids, dates = [], [], []
        for s in range(sessions_per_question):
            sid = f"answer_{i:04d}_{s}" if s == evidence_index and not abstain else f"sharegpt_{i:04d}_{s}"
            turns = []
            for t in range(turns_per_session):
                if t % 2 == 0:
                    if s == evidence_index and t == 0 and not abstain:
                        turns.append({"role": "user", "content": f"By the way, I moved to {city} last spring "
                                      f"with {pets[i % len(pets)]}.", "has_answer": True})
                    else:
                        turns.append({"role": "user", "content": f"Can you suggest recipe number {s * 10 + t} "
                                      "for a quick weeknight dinner?"})
                else:
                    turns.append({"role": "assistant", "content": f"Here is idea {s * 10 + t}: a lentil "
                                  "stew with lemon and garlic, ready in thirty minutes."})
            sessions.append(turns)
            ids.append(sid)
            dates.append(f"2023/05/{10 + s:02d} (Wed) {9 + s:02d}:00")
        records.append({
            "question_id": qid,
            "question_type": qtype,
            "question": "Which city did I move to last spring?" if not abstain else "Which city did my sister move to?",
            "answer": city if not abstain else "The information provided is not enough to answer.",
            "question_date": "2023/06/01 (Thu) 10:00",
            "haystack_session_ids": ids,
            "haystack_dates": dates,
            "haystack_sessions": sessions,
            "answer_session_ids": [ids[evidence_index]] if not abstain else [],
        })
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(records, indent=1), encoding="utf-8")
    return target
