"""QMSum test split (Zhong et al., "QMSum: A New Benchmark for Query-based Multi-domain Meeting
Summarization", NAACL 2021; github.com/Yale-LILY/QMSum, MIT).

Reads the 35 per-meeting files ``test/<meeting_id>.json`` (the meeting id exists only in the file
name). Each meeting has transcript turns (speaker, content), topics, general queries and specific
queries; a specific query carries ``relevant_text_span`` pairs of 0-based transcript turn indices.

Case selection (docs/sources.md#summary-benchmark-setup): flatten every meeting's specific queries (ids
``<meeting>_specific_<NN>``, NN 1-based, two digits), keep those whose supporting evidence ends at
least ``min_distance_from_end`` turns before the end of the transcript (distance =
``len(transcript) - 1 - max_end``, ``max_end`` clamped to the last turn), then order round-robin by
meeting (meetings sorted by id, cases within a meeting sorted by id). On the genuine test split this
gives 244 specific queries and 189 selected cases with the published threshold 80.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from agentlab.bench.datasets.base import (
    DatasetError,
    ResolvedDataset,
    dataset_spec,
    read_json,
    require,
    resolve_files,
)

NAME = "qmsum"
#: The published selection threshold (support distance from the end of the transcript, in turns).
DEFAULT_MIN_DISTANCE_FROM_END = 80

#: Meeting id prefix -> QMSum domain (the ALL split mixes the three).
_DOMAIN_PREFIXES = (("Bed", "Academic"), ("Bmr", "Academic"), ("Bro", "Academic"), ("ES", "Product"),
                    ("IS", "Product"), ("TS", "Product"), ("education", "Committee"), ("covid", "Committee"))


def meeting_domain(meeting_id: str) -> str:
    """The QMSum domain (Academic, Product, Committee) a meeting id belongs to, by its prefix; ``Unknown``
    for an id of none of them.
    """
    for prefix, domain in _DOMAIN_PREFIXES:
        if meeting_id.startswith(prefix):
            return domain
    return "Unknown"


@dataclass(frozen=True)
class TranscriptTurn:
    """One utterance of a meeting transcript."""

    speaker: str
    content: str


@dataclass(frozen=True)
class TextSpan:
    """A 0-based, inclusive range of transcript turns."""

    start: int
    end: int


@dataclass(frozen=True)
class Topic:
    """A topic of the meeting's topic list and the transcript spans it covers."""

    topic: str
    spans: tuple[TextSpan, ...]


@dataclass(frozen=True)
class Query:
    """One query about a meeting with its gold answer and the transcript spans that support it (general
    queries have none).
    """

    kind: str  # "specific" | "general"
    #: 1-based position in the meeting's list of this kind (the NN of the case id).
    number: int
    query: str
    answer: str
    spans: tuple[TextSpan, ...] = ()


@dataclass(frozen=True)
class Meeting:
    """One meeting: its transcript, topic list and the general and specific queries about it."""

    meeting_id: str
    domain: str
    turns: tuple[TranscriptTurn, ...]
    topics: tuple[Topic, ...]
    general_queries: tuple[Query, ...]
    specific_queries: tuple[Query, ...]

    def turn_text(self, index: int) -> str:
        """The seeded text of one turn (0-based index): ``[Turn 001] Speaker: content``."""
        turn = self.turns[index]
        return f"[Turn {index + 1:03d}] {turn.speaker.strip()}: {turn.content.strip()}"

    def turn_texts(self) -> list[str]:
        """Every turn as seeded into a session, in order (dry runs count these without a model)."""
        return [self.turn_text(i) for i in range(len(self.turns))]

    def transcript_text(self, separator: str = "\n") -> str:
        """The whole transcript as seeded turns joined by ``separator``."""
        return separator.join(self.turn_texts())


@dataclass(frozen=True)
class QMSumCase:
    """One question about one meeting; ``meeting`` is shared by every case of that meeting."""

    case_id: str
    meeting: Meeting
    query_type: str
    query: str
    answer: str
    spans: tuple[TextSpan, ...]

    @property
    def meeting_id(self) -> str:
        """The meeting's id (every case of a meeting shares the same :class:`Meeting`)."""
        return self.meeting.meeting_id

    @cached_property
    def support_window(self) -> tuple[int, int] | None:
        """(min start, max end) over the relevant spans, or ``None`` when there are none."""
        if not self.spans:
            return None
        return min(s.start for s in self.spans), max(s.end for s in self.spans)

    @cached_property
    def support_distance_from_end(self) -> int | None:
        """Turns between the last supporting turn and the end of the transcript."""
        window = self.support_window
        if window is None or not self.meeting.turns:
            return None
        last = len(self.meeting.turns) - 1
        return last - min(window[1], last)

    def relevant_turn_indices(self) -> list[int]:
        """Every 0-based turn index covered by a relevant span (for evidence recall@k)."""
        last = len(self.meeting.turns) - 1
        covered: set[int] = set()
        for span in self.spans:
            covered.update(range(max(0, span.start), min(span.end, last) + 1))
        return sorted(covered)

    def span_hits(self, turns: Sequence[int]) -> tuple[int, bool]:
        """(relevant spans containing at least one of ``turns``, whether any of ``turns`` is relevant)."""
        last = len(self.meeting.turns) - 1
        spans = [(max(0, s.start), min(s.end, last)) for s in self.spans]
        found = sum(1 for start, end in spans if any(start <= t <= end for t in turns))
        return found, any(any(start <= t <= end for start, end in spans) for t in turns)


# ---------------------------------------------------------------------------------- selection


# ------------------------------------------------------------------------------------ parsing


def _parse_spans(raw: object, where: str) -> tuple[TextSpan, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise DatasetError(f"{where}: relevant_text_span should be a list, got {type(raw).__name__}")
    spans = []
    for j, pair in enumerate(raw):
        if not isinstance(pair, list) or len(pair) != 2:
            raise DatasetError(f"{where}: relevant_text_span[{j}] should be a [start, end] pair, got {pair!r}")
        try:
            start, end = int(str(pair[0]).strip()), int(str(pair[1]).strip())
        except ValueError as exc:
            raise DatasetError(f"{where}: relevant_text_span[{j}] is not a pair of integers: {pair!r}") from exc
        if start < 0 or end < 0:
            raise DatasetError(f"{where}: relevant_text_span[{j}] has a negative index: {pair!r}")
        if end < start:  # seen in some releases of similar data; the order carries no meaning
            start, end = end, start
        spans.append(TextSpan(start, end))
    return tuple(spans)


def _parse_queries(raw: list, kind: str, where: str) -> tuple[Query, ...]:
    out = []
    for i, item in enumerate(raw):
        at = f"{where}: {kind}_query_list[{i}]"
        out.append(
            Query(
                kind=kind,
                number=i + 1,
                query=require(item, "query", str, at).strip(),
                answer=require(item, "answer", str, at).strip(),
                spans=_parse_spans(item.get("relevant_text_span"), at),
            )
        )
    return tuple(out)


def parse_meeting(meeting_id: str, data: object, where: str) -> Meeting:
    """Build a :class:`Meeting` from one meeting's JSON object; bad fields name ``where``."""
    turns_raw = require(data, "meeting_transcripts", list, where)
    turns = []
    for i, turn in enumerate(turns_raw):
        at = f"{where}: meeting_transcripts[{i}]"
        turns.append(TranscriptTurn(require(turn, "speaker", str, at), require(turn, "content", str, at)))
    topics = []
    for i, topic in enumerate(require(data, "topic_list", list, where)):
        at = f"{where}: topic_list[{i}]"
        topics.append(Topic(require(topic, "topic", str, at), _parse_spans(topic.get("relevant_text_span"), at)))
    assert isinstance(data, dict)
    return Meeting(
        meeting_id=meeting_id,
        domain=meeting_domain(meeting_id),
        turns=tuple(turns),
        topics=tuple(topics),
        general_queries=_parse_queries(require(data, "general_query_list", list, where), "general", where),
        specific_queries=_parse_queries(require(data, "specific_query_list", list, where), "specific", where),
    )


# ------------------------------------------------------------------------------------ loading


@dataclass(frozen=True)
class QMSumData:
    """Every meeting of the files read and one fingerprint over those files (stored with every run)."""

    meetings: tuple[Meeting, ...]
    #: Fingerprint of the files read (stored with every run).
    sha256: str

    def meeting(self, meeting_id: str) -> Meeting:
        """The meeting with this id; ``KeyError`` when it is not among the files read."""
        for m in self.meetings:
            if m.meeting_id == meeting_id:
                return m
        raise KeyError(meeting_id)

    def cases(self, query_type: str = "specific") -> list[QMSumCase]:
        """All cases of a query type (``specific``, ``general`` or ``all``), meetings in id order."""
        if query_type not in {"specific", "general", "all"}:
            raise ValueError(f"query_type must be specific, general or all, not {query_type!r}")
        out: list[QMSumCase] = []
        for meeting in self.meetings:
            queries: list[Query] = []
            if query_type in {"general", "all"}:
                queries.extend(meeting.general_queries)
            if query_type in {"specific", "all"}:
                queries.extend(meeting.specific_queries)
            for q in queries:
                out.append(
                    QMSumCase(
                        case_id=f"{meeting.meeting_id}_{q.kind}_{q.number:02d}",
                        meeting=meeting,
                        query_type=q.kind,
                        query=q.query,
                        answer=q.answer,
                        spans=q.spans,
                    )
                )
        return out


def load_qmsum(*, manifest: str | os.PathLike[str] | None = None, meeting_ids: Iterable[str] | None = None,
               allow_download: bool | None = None) -> QMSumData:
    """Load (and verify) the test split's per-meeting files; ``meeting_ids`` limits which ones."""
    spec = dataset_spec(NAME, manifest)
    files = [f.path for f in spec.files_under("test/") if f.path.endswith(".json")]
    if meeting_ids is not None:
        wanted = set(meeting_ids)
        files = [p for p in files if p[len("test/"):-len(".json")] in wanted]
    resolved: ResolvedDataset = resolve_files(NAME, sorted(files), manifest=manifest, allow_download=allow_download)
    meetings = []
    for f in resolved.files:
        meeting_id = f.spec.path[len("test/"):-len(".json")]
        data = read_json(f.local_path, f"QMSum meeting {meeting_id}")
        meetings.append(parse_meeting(meeting_id, data, str(f.local_path)))
    meetings.sort(key=lambda m: m.meeting_id)
    return QMSumData(tuple(meetings), resolved.sha256)


# ------------------------------------------------------------------------------ case selection


def filter_by_support_distance(cases: Iterable[QMSumCase], min_distance: int) -> list[QMSumCase]:
    """Keep cases whose evidence ends >= ``min_distance`` turns before the end (<= 0 keeps all)."""
    if min_distance <= 0:
        return list(cases)
    return [c for c in cases if c.support_distance_from_end is not None and c.support_distance_from_end >= min_distance]


def round_robin_by_meeting(cases: Sequence[QMSumCase]) -> list[QMSumCase]:
    """Interleave meetings: one case of each meeting (ids sorted) per round, cases sorted by id.

    Why: a ``--limit N`` prefix then spreads over many meetings instead of exhausting the first.
    """
    buckets: dict[str, list[QMSumCase]] = {}
    for case in cases:
        buckets.setdefault(case.meeting_id, []).append(case)
    queues = [sorted(buckets[m], key=lambda c: c.case_id) for m in sorted(buckets)]
    ordered: list[QMSumCase] = []
    depth = 0
    while len(ordered) < len(cases):
        for queue in queues:
            if depth < len(queue):
                ordered.append(queue[depth])
        depth += 1
    return ordered


def select_cases(data: QMSumData, *, query_type: str = "specific",
                 min_distance_from_end: int = DEFAULT_MIN_DISTANCE_FROM_END, limit: int = 0) -> list[QMSumCase]:
    """The published selection: filter by support distance, round-robin by meeting, then ``limit``
    (0 = all).
    """
    selected = round_robin_by_meeting(filter_by_support_distance(data.cases(query_type), min_distance_from_end))
    return selected[:limit] if limit > 0 else selected
