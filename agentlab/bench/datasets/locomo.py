"""LoCoMo-10 (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024; github.com/snap-research/LoCoMo, CC BY-NC 4.0).

``locomo10.json`` holds 10 conversations between two speakers, split into dated sessions of turns
(``dia_id`` like ``D3:7``; some turns share an image, given as URL + BLIP caption), and 1,986 QA
items with a category 1–5, evidence ``dia_id``s and, for adversarial items, an
``adversarial_answer`` instead of an ``answer``.

The category numbers were never documented in the paper, and three name mappings are in use (see
``CATEGORY_NAMES_OFFICIAL``, ``CATEGORY_NAMES_MEMORY_REPORT`` and ``CATEGORY_NAMES_MEM0``); every QA
keeps its raw number so all three can be reported. Counts in the genuine file: 1: 282, 2: 321,
3: 96, 4: 841, 5: 446.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from agentlab.bench.datasets.base import DatasetError, read_json, require, resolve_file

NAME = "locomo"
FILE = "locomo10.json"

#: Names used by the official scorer (``task_eval/evaluation.py`` CATEGORY_MAPPING, locomo issue #29).
CATEGORY_NAMES_OFFICIAL: dict[int, str] = {
    1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial",
}
#: Names used by the published memory report (docs/sources.md#locomo-setup). Derived from its
#: per-category counts (single-hop 282, multi-hop 321, temporal 96, open-domain 841, adversarial 446), which match the
#: file's category numbers 1, 2, 3, 4, 5 in that order. It disagrees with the official mapping on
#: categories 1–4 (e.g. its "single-hop" is the official "multi-hop").
CATEGORY_NAMES_MEMORY_REPORT: dict[int, str] = {
    1: "single-hop", 2: "multi-hop", 3: "temporal", 4: "open-domain", 5: "adversarial",
}
#: Names mem0's maintainers give the numbers (github.com/mem0ai/mem0 issue #2609, answering which
#: number is which category in mem0's LoCoMo evaluation): a third mapping, agreeing with the report
#: on 1 and 4 only and with the official scorer on 2 only. Tables show all three; none is picked.
CATEGORY_NAMES_MEM0: dict[int, str] = {
    1: "single-hop", 2: "temporal", 3: "multi-hop", 4: "open-domain", 5: "adversarial",
}
#: Where each mapping comes from, for tables and notebooks that show them side by side.
CATEGORY_MAPPING_SOURCES: dict[str, str] = {
    "official": "snap-research/LoCoMo task_eval/evaluation.py CATEGORY_MAPPING (locomo issue #29)",
    "memory_report": "trpc-agent-go-benchmark memory/results/REPORT.md per-category counts",
    "mem0": "mem0ai/mem0 issue #2609 (maintainers' mapping)",
}
ADVERSARIAL_CATEGORY = 5


def category_names(category: int) -> dict[str, str]:
    """A category number's three names, keyed like :data:`CATEGORY_MAPPING_SOURCES`."""
    return {"official": CATEGORY_NAMES_OFFICIAL[category], "memory_report": CATEGORY_NAMES_MEMORY_REPORT[category],
            "mem0": CATEGORY_NAMES_MEM0[category]}

_SESSION_KEY = re.compile(r"^session_(\d+)$")


@dataclass(frozen=True)
class Turn:
    """One utterance of a session: who said it, its ``dia_id`` (what evidence refers to), the text and any
    shared image.
    """

    speaker: str
    dia_id: str
    text: str
    img_urls: tuple[str, ...] = ()
    blip_caption: str | None = None

    def render(self, include_image_caption: bool = False) -> str:
        """``Speaker: text`` (plus the shared image's caption when asked, as the paper's prompt did)."""
        line = f"{self.speaker}: {self.text}"
        if include_image_caption and self.blip_caption:
            line += f" [shares {self.blip_caption}]"
        return line


@dataclass(frozen=True)
class Session:
    """One dated session of a conversation (``date_time`` as the file writes it, e.g. "1:56 pm on 8 May,
    2023").
    """

    number: int
    date_time: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class QA:
    """One question about a conversation, with its gold answer, raw category number and evidence
    ``dia_id``s.
    """

    qa_id: str  # "<sample_id>_qa_<NNNN>" (1-based position in the file's list)
    question: str
    #: The gold answer as text (ints such as 2022 become "2022"); for category 5 the
    #: ``adversarial_answer`` when no ``answer`` is given.
    answer: str
    category: int
    evidence: tuple[str, ...]
    adversarial_answer: str | None = None

    @property
    def category_official(self) -> str:
        """The category name under the official scorer's mapping."""
        return CATEGORY_NAMES_OFFICIAL[self.category]

    @property
    def category_memory_report(self) -> str:
        """The category name under the published memory report's mapping."""
        return CATEGORY_NAMES_MEMORY_REPORT[self.category]

    @property
    def category_mem0(self) -> str:
        """The category name under mem0's mapping."""
        return CATEGORY_NAMES_MEM0[self.category]


@dataclass(frozen=True)
class Observation:
    """One fact of the file's ``observation`` field: the session it was drawn from, whose fact it is, and
    the ``dia_id``s it cites (a list or a comma-joined string in the file, split here).
    """

    session: int
    speaker: str
    text: str
    dia_ids: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    """One two-speaker conversation: its sessions in order and the questions asked about it.

    ``observations`` and ``summaries`` (session number -> ``session_<n>_summary``) are the file's
    generated facts and session summaries, empty when a file has none (a trimmed copy).
    """

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    qa: tuple[QA, ...]
    observations: tuple[Observation, ...] = ()
    summaries: tuple[tuple[int, str], ...] = ()

    @property
    def turn_count(self) -> int:
        """Turns over all sessions."""
        return sum(len(s.turns) for s in self.sessions)

    def turn_by_dia_id(self) -> dict[str, Turn]:
        """``dia_id`` -> turn, to show a question's evidence turns."""
        return {t.dia_id: t for s in self.sessions for t in s.turns}


@dataclass(frozen=True)
class LoCoMoData:
    """The whole parsed file and its sha256 (stored with every run that reads it)."""

    conversations: tuple[Conversation, ...]
    sha256: str

    def all_qa(self) -> list[tuple[Conversation, QA]]:
        """Every (conversation, question) pair in file order."""
        return [(c, q) for c in self.conversations for q in c.qa]


def _text(value: object) -> str:
    return "" if value is None else str(value)


def parse_conversation(raw: object, where: str) -> Conversation:
    """One conversation object of the file; :class:`DatasetError` naming ``where`` and the field when the
    shape is wrong.
    """
    sample_id = require(raw, "sample_id", str, where)
    where = f"{where} ({sample_id})"
    conv = require(raw, "conversation", dict, where)
    sessions = []
    for key, value in conv.items():
        match = _SESSION_KEY.match(key)
        if not match:
            continue
        number = int(match.group(1))
        if not isinstance(value, list):
            raise DatasetError(f"{where}: conversation.{key} should be a list of turns")
        turns = []
        for i, turn in enumerate(value):
            at = f"{where}: conversation.{key}[{i}]"
            urls = turn.get("img_url") or ()
            turns.append(
                Turn(
                    speaker=require(turn, "speaker", str, at),
                    dia_id=require(turn, "dia_id", str, at),
                    text=require(turn, "text", str, at),
                    img_urls=tuple(str(u) for u in urls),
                    blip_caption=turn.get("blip_caption"),
                )
            )
        date_key = f"session_{number}_date_time"
        sessions.append(Session(number, _text(conv.get(date_key)), tuple(turns)))
    sessions.sort(key=lambda s: s.number)
    qas = []
    for i, item in enumerate(require(raw, "qa", list, where)):
        at = f"{where}: qa[{i}]"
        category = require(item, "category", int, at)
        if category not in CATEGORY_NAMES_OFFICIAL:
            raise DatasetError(f"{at}: category {category} is not 1-5")
        evidence = require(item, "evidence", list, at)
        answer = item.get("answer")
        adversarial = item.get("adversarial_answer")
        if answer is None and adversarial is None:
            raise DatasetError(f"{at}: has neither 'answer' nor 'adversarial_answer'")
        qas.append(
            QA(
                qa_id=f"{sample_id}_qa_{i + 1:04d}",
                question=require(item, "question", str, at),
                answer=_text(answer if answer is not None else adversarial),
                category=category,
                evidence=tuple(str(e) for e in evidence),
                adversarial_answer=None if adversarial is None else _text(adversarial),
            )
        )
    extra = raw if isinstance(raw, dict) else {}  # require() above proved it is an object
    return Conversation(
        sample_id=sample_id,
        speaker_a=require(conv, "speaker_a", str, where),
        speaker_b=require(conv, "speaker_b", str, where),
        sessions=tuple(sessions),
        qa=tuple(qas),
        observations=_observations(extra.get("observation"), where),
        summaries=_summaries(extra.get("session_summary"), where),
    )


_OBSERVATION_KEY = re.compile(r"^session_(\d+)_observation$")
_SUMMARY_KEY = re.compile(r"^session_(\d+)_summary$")


def _observations(raw: object, where: str) -> tuple[Observation, ...]:
    """The ``observation`` field: ``{session_<n>_observation: {speaker: [[fact, dia_id(s)], ...]}}``."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise DatasetError(f"{where}: observation should be an object of sessions")
    found = []
    for key, by_speaker in raw.items():
        match = _OBSERVATION_KEY.match(key)
        if not match or not isinstance(by_speaker, dict):
            raise DatasetError(f"{where}: observation.{key} should be session_<n>_observation: {{speaker: facts}}")
        for speaker, facts in by_speaker.items():
            for i, fact in enumerate(facts):
                if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
                    raise DatasetError(f"{where}: observation.{key}.{speaker}[{i}] should be [fact, dia_id(s)]")
                cited = fact[1] if isinstance(fact[1], list) else str(fact[1]).split(",")
                ids = tuple(str(d).strip() for d in cited if str(d).strip())
                found.append(Observation(int(match.group(1)), str(speaker), fact[0], ids))
    found.sort(key=lambda o: o.session)  # stable: the file's order within a session
    return tuple(found)


def _summaries(raw: object, where: str) -> tuple[tuple[int, str], ...]:
    """The ``session_summary`` field as (session number, summary) in session order."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise DatasetError(f"{where}: session_summary should be an object")
    pairs = []
    for key, text in raw.items():
        match = _SUMMARY_KEY.match(key)
        if not match or not isinstance(text, str):
            raise DatasetError(f"{where}: session_summary.{key} should be session_<n>_summary: text")
        pairs.append((int(match.group(1)), text))
    return tuple(sorted(pairs))


def load_locomo(*, manifest: str | os.PathLike[str] | None = None,
                allow_download: bool | None = None) -> LoCoMoData:
    """The verified, parsed ``locomo10.json`` (looked up locally, else downloaded; see
    :mod:`agentlab.bench.datasets.base`).
    """
    resolved = resolve_file(NAME, FILE, manifest=manifest, allow_download=allow_download)
    raw = read_json(resolved.local_path, "LoCoMo")
    if not isinstance(raw, list):
        raise DatasetError(f"{resolved.local_path}: expected a JSON list of conversations")
    conversations = tuple(parse_conversation(c, f"{resolved.local_path}: item {i}") for i, c in enumerate(raw))
    return LoCoMoData(conversations, resolved.sha256 or "")
