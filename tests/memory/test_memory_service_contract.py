"""One contract, both backends: CRUD, isolation, history, and search in every mode."""

from __future__ import annotations

import pytest

from agentlab.memory import DuckDBMemoryService, InMemoryMemoryService, Memory
from agentlab.recall.embed import HashEmbedder

APP, USER = "app", "u1"


async def test_add_get_and_list_newest_first(memory_service):
    first = await memory_service.add(APP, USER, "The user prefers Go for backend work", topics=["work", "go"])
    second = await memory_service.add(APP, USER, "The user hiked Mount Fuji", kind="episode",
                                      event_time="2023-07-14", participants=["Ana"], location="Japan",
                                      source_session_id="s1")
    assert first.id != second.id and first.created_at <= second.created_at
    got = await memory_service.get(APP, USER, second.id)
    assert got == second
    assert got.kind == "episode" and got.event_time == "2023-07-14" and got.participants == ("Ana",)
    assert got.location == "Japan" and got.source_session_id == "s1"
    assert [m.id for m in await memory_service.list(APP, USER)] == [second.id, first.id]
    assert [m.id for m in await memory_service.list(APP, USER, kind="fact")] == [first.id]
    assert [m.id for m in await memory_service.list(APP, USER, limit=1)] == [second.id]
    assert await memory_service.get(APP, USER, "mem-missing") is None


async def test_memories_are_isolated_per_app_and_user(memory_service):
    await memory_service.add(APP, USER, "The user drinks green tea")
    await memory_service.add(APP, "u2", "The user drinks black coffee")
    await memory_service.add("other-app", USER, "The user drinks mate")
    assert [m.text for m in await memory_service.list(APP, USER)] == ["The user drinks green tea"]
    hits = await memory_service.search(APP, USER, "drinks")
    assert [h.memory.text for h in hits] == ["The user drinks green tea"]


async def test_update_changes_only_given_fields_and_keeps_history_when_asked(memory_service):
    m = await memory_service.add(APP, USER, "The user works at Acme", topics=["work"], event_time="2022")
    plain = await memory_service.update(APP, USER, m.id, text="The user works at Acme as an engineer")
    assert plain.text == "The user works at Acme as an engineer"
    assert plain.topics == ("work",) and plain.event_time == "2022" and plain.history == ()
    assert plain.updated_at > m.updated_at and plain.created_at == m.created_at

    kept = await memory_service.update(APP, USER, m.id, text="The user works at Acme as a senior engineer",
                                       keep_history=True)
    assert [v.text for v in kept.history] == ["The user works at Acme as an engineer"]
    linked = await memory_service.update(APP, USER, m.id, superseded_by="mem-newer", topics=["job"])
    assert linked.superseded_by == "mem-newer" and linked.topics == ("job",)
    assert linked.text == kept.text and len(linked.history) == 1
    assert await memory_service.get(APP, USER, m.id) == linked
    with pytest.raises(KeyError, match="no memory 'mem-nope'"):
        await memory_service.update(APP, USER, "mem-nope", text="x")


async def test_delete_and_clear(memory_service):
    a = await memory_service.add(APP, USER, "The user likes jazz")
    await memory_service.add(APP, USER, "The user likes opera")
    await memory_service.add(APP, "u2", "The user likes rock")
    assert await memory_service.search(APP, USER, "jazz")
    assert await memory_service.delete(APP, USER, a.id) is True
    assert await memory_service.delete(APP, USER, a.id) is False
    assert await memory_service.search(APP, USER, "jazz") == []
    assert await memory_service.clear(APP, USER) == 1
    assert await memory_service.list(APP, USER) == []
    assert len(await memory_service.list(APP, "u2")) == 1


async def test_bad_input_is_rejected_with_a_clear_message(memory_service):
    with pytest.raises(ValueError, match="non-empty text"):
        await memory_service.add(APP, USER, "   ")
    with pytest.raises(ValueError, match="memory kind must be one of fact, episode"):
        await memory_service.add(APP, USER, "x", kind="opinion")
    m = await memory_service.add(APP, USER, "The user is left-handed", memory_id="mem-fixed")
    assert m.id == "mem-fixed"
    with pytest.raises(ValueError, match="already exists"):
        await memory_service.add(APP, USER, "dup id", memory_id="mem-fixed")
    with pytest.raises(ValueError, match="unknown memory search mode"):
        await memory_service.search(APP, USER, "hand", mode="fuzzy")


@pytest.mark.parametrize("mode", ["lexical", "dense", "hybrid"])
async def test_search_ranks_the_relevant_memory_first_in_every_mode(memory_service, mode):
    await memory_service.add(APP, USER, "The user lives in Lisbon with two cats")
    target = await memory_service.add(APP, USER, "The user prefers Go for backend services", topics=["programming"])
    await memory_service.add(APP, USER, "The user visited Rome in May", kind="episode", event_time="2023-05-02")
    hits = await memory_service.search(APP, USER, "which language for backend services", mode=mode, top_k=2)
    assert hits and hits[0].memory.id == target.id
    assert len(hits) <= 2 and all(h.score > 0 for h in hits)
    episodes = await memory_service.search(APP, USER, "visited Rome backend", kind="episode", mode=mode)
    assert [h.memory.kind for h in episodes] == ["episode"]
    assert await memory_service.search(APP, USER, "   ", mode=mode) == []


async def test_search_sees_updates_and_metadata(memory_service):
    m = await memory_service.add(APP, USER, "The user owns a bicycle")
    assert await memory_service.search(APP, USER, "motorbike") == []
    await memory_service.update(APP, USER, m.id, text="The user owns a motorbike", topics=["vehicles"])
    hits = await memory_service.search(APP, USER, "motorbike")
    assert [h.memory.text for h in hits] == ["The user owns a motorbike"]
    # topics, participants and places are searchable too
    assert [h.memory.id for h in await memory_service.search(APP, USER, "vehicles")] == [m.id]


async def test_similarities_use_the_embedder(memory_service):
    m = await memory_service.add(APP, USER, "The user prefers Go for backend services")
    other = await memory_service.add(APP, USER, "Completely unrelated gardening note about tomatoes")
    same, far = await memory_service.similarities(APP, USER, "The user prefers Go for backend services",
                                                  [m.id, other.id])
    assert same == pytest.approx(1.0, abs=1e-5)
    assert far < 0.3


async def test_dense_search_without_an_embedder_says_what_is_missing(tmp_path):
    for service in (InMemoryMemoryService(), DuckDBMemoryService(tmp_path / "m.duckdb")):
        await service.add(APP, USER, "The user likes tea")
        with pytest.raises(ValueError, match="needs an embedder"):
            await service.search(APP, USER, "tea", mode="hybrid")
        service.ensure_embedder("hash")
        assert (await service.search(APP, USER, "tea", mode="hybrid"))[0].memory.text == "The user likes tea"
        await service.close()


async def test_duckdb_memories_survive_reopen_and_search_rebuilds(tmp_path):
    path = tmp_path / "m.duckdb"
    async with DuckDBMemoryService(path) as service:
        m = await service.add(APP, USER, "The user's dog is called Pixel", topics=["pets"], kind="fact")
        await service.update(APP, USER, m.id, text="The user's dog is called Pixel and is three", keep_history=True)
    async with DuckDBMemoryService(path, HashEmbedder()) as reopened:
        again = await reopened.get(APP, USER, m.id)
        assert again is not None and again.text.endswith("is three") and len(again.history) == 1
        assert again.topics == ("pets",)
        hits = await reopened.search(APP, USER, "dog name", mode="hybrid")
        assert hits[0].memory.id == m.id


def test_memory_round_trips_through_dict():
    m = Memory(id="mem-1", app_name=APP, user_id=USER, text="t", kind="episode", topics=("a",),
               event_time="2024-01-01", participants=("Bo",), location="Oslo", source_session_id="s",
               created_at=1.0, updated_at=2.0, superseded_by="mem-2")
    assert Memory.from_dict(m.to_dict()) == m


async def test_a_write_during_the_first_index_load_is_not_lost(memory_service):
    await memory_service.add(APP, USER, "The user plays the cello")
    original_load = memory_service._load

    async def load_with_a_concurrent_write(app_name, user_id):
        rows = await original_load(app_name, user_id)
        # Another task writes after the rows were read but before the index is installed.
        await memory_service.add(APP, USER, "The user plays the violin too")
        return rows

    memory_service._load = load_with_a_concurrent_write
    assert [h.memory.text for h in await memory_service.search(APP, USER, "cello")] == ["The user plays the cello"]
    memory_service._load = original_load
    assert [h.memory.text for h in await memory_service.search(APP, USER, "violin")] == ["The user plays the violin too"]
