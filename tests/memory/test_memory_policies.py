"""MemoryPolicy knobs and what each update policy decides for near-duplicates, updates, deletes."""

from __future__ import annotations

import json

import pytest

from agentlab.memory import InMemoryMemoryService, MemoryPolicy
from agentlab.memory.policies import (
    MemoryOperation,
    Scope,
    apply_decision,
    coverage,
    decide,
    should_extract,
    word_jaccard,
)
from agentlab.recall.embed import HashEmbedder

SCOPE = Scope("app", "u1", "s-new")
STORED = "Alice works as a nurse at the city hospital"
CASES = {
    "exact": "alice works as a nurse at the City Hospital.",
    "near": "Alice works as a nurse at the big city hospital",
    "moderate": "Alice works as a nurse at a children's clinic",
    "unrelated": "Alice adopted a grey kitten named Miso",
}
EXPECTED = {
    "merge_similar": {"exact": "skip", "near": "skip", "moderate": "update", "unrelated": "add"},
    "preserve_history": {"exact": "skip", "near": "add", "moderate": "add", "unrelated": "add"},
    "append_only": {"exact": "skip", "near": "add", "moderate": "add", "unrelated": "add"},
}


def test_fixture_texts_sit_in_the_intended_overlap_bands():
    assert word_jaccard(CASES["exact"], STORED) == 1.0
    assert 0.70 <= word_jaccard(CASES["near"], STORED) < 1.0
    assert 0.40 <= word_jaccard(CASES["moderate"], STORED) < 0.70
    assert word_jaccard(CASES["unrelated"], STORED) < 0.30


async def _store(search_mode: str = "lexical"):
    service = InMemoryMemoryService(HashEmbedder() if search_mode != "lexical" else None)
    stored = await service.add("app", "u1", STORED, topics=["work"])
    return service, stored


@pytest.mark.parametrize("search_mode", ["lexical", "hybrid"])
@pytest.mark.parametrize("policy_name", list(EXPECTED))
@pytest.mark.parametrize("case", list(CASES))
async def test_add_decision_by_policy_and_overlap(policy_name, case, search_mode):
    service, stored = await _store(search_mode)
    policy = MemoryPolicy(update_policy=policy_name, search_mode=search_mode, embedder="hash")
    decision = await decide(MemoryOperation("add", CASES[case]), service, SCOPE, policy)
    assert decision.action == EXPECTED[policy_name][case], decision.reason
    if decision.action in ("skip", "update"):
        assert decision.target_id == stored.id

    applied = await apply_decision(decision, service, SCOPE, policy)
    memories = await service.list("app", "u1")
    if decision.action == "add":
        assert len(memories) == 2 and applied.memory_id in {m.id for m in memories}
        new = await service.get("app", "u1", applied.memory_id)
        assert new.source_session_id == "s-new"
    elif decision.action == "update":
        assert [m.text for m in memories] == [CASES[case]]
        assert memories[0].topics == ("work",)  # merged, not lost
    else:
        assert [m.text for m in memories] == [STORED]


async def test_merge_similar_near_duplicate_with_new_topics_only_adds_the_topics():
    service, stored = await _store()
    policy = MemoryPolicy()
    decision = await decide(MemoryOperation("add", CASES["near"], topics=("career",)), service, SCOPE, policy)
    assert decision.action == "update_topics" and decision.target_id == stored.id
    await apply_decision(decision, service, SCOPE, policy)
    after = await service.get("app", "u1", stored.id)
    assert after.text == STORED and after.topics == ("work", "career")


async def test_merge_similar_thresholds_are_the_policy_fields():
    service, stored = await _store()
    # With an update tier that needs Jaccard 0.6 and similarity 0.95, moderate overlap is a new memory.
    strict = MemoryPolicy(update_jaccard=0.6, update_similarity=0.95)
    decision = await decide(MemoryOperation("add", CASES["moderate"]), service, SCOPE, strict)
    assert decision.action == "add"
    # Lowering the skip Jaccard to 0.45 turns the same text into a duplicate.
    loose = MemoryPolicy(skip_jaccard=0.45)
    assert (await decide(MemoryOperation("add", CASES["moderate"]), service, SCOPE, loose)).action == "skip"


async def test_merge_similar_applies_updates_and_deletes_as_proposed():
    service, stored = await _store()
    policy = MemoryPolicy()
    update = await decide(MemoryOperation("update", "Alice is a head nurse", memory_id=stored.id), service, SCOPE, policy)
    assert update.action == "update"
    await apply_decision(update, service, SCOPE, policy)
    after = await service.get("app", "u1", stored.id)
    assert after.text == "Alice is a head nurse" and after.history == ()  # merge_similar keeps no history
    delete = await decide(MemoryOperation("delete", memory_id=stored.id), service, SCOPE, policy)
    assert delete.action == "delete"
    await apply_decision(delete, service, SCOPE, policy)
    assert await service.list("app", "u1") == []
    missing = await decide(MemoryOperation("delete", memory_id="mem-gone"), service, SCOPE, policy)
    assert missing.action == "error" and "unknown memory id" in missing.reason


async def test_preserve_history_keeps_a_safe_enrichment_as_update_with_history():
    service, stored = await _store()
    policy = MemoryPolicy(update_policy="preserve_history")
    richer = "Alice works as a nurse at the city hospital on night shifts"
    assert coverage(STORED, richer) >= 0.95 and coverage(richer, STORED) >= 0.70
    decision = await decide(MemoryOperation("update", richer, memory_id=stored.id), service, SCOPE, policy)
    assert decision.action == "update", decision.reason
    await apply_decision(decision, service, SCOPE, policy)
    after = await service.get("app", "u1", stored.id)
    assert after.text == richer and [v.text for v in after.history] == [STORED]


@pytest.mark.parametrize("new_text, why", [
    ("Alice no longer works as a nurse at the city hospital", "negation"),
    ("Alice works as a nurse at the city hospital since 2019 after 4 years", None),
    ("Alice now works as a nurse at the city hospital", "state-change"),
])
async def test_preserve_history_turns_corrections_into_adds_linked_by_superseded_by(new_text, why):
    service, stored = await _store()
    policy = MemoryPolicy(update_policy="preserve_history")
    decision = await decide(MemoryOperation("update", new_text, memory_id=stored.id), service, SCOPE, policy)
    assert decision.action == "add", decision.reason
    applied = await apply_decision(decision, service, SCOPE, policy)
    old = await service.get("app", "u1", stored.id)
    assert old.text == STORED  # the old version is still there, unchanged
    if why is not None:
        assert why in decision.reason and old.superseded_by == applied.memory_id
    else:
        assert "not a safe enrichment" in decision.reason and old.superseded_by is None
    assert len(await service.list("app", "u1")) == 2


async def test_preserve_history_number_change_is_a_correction():
    service = InMemoryMemoryService()
    old = await service.add("app", "u1", "Bob has 2 kids")
    policy = MemoryPolicy(update_policy="preserve_history")
    decision = await decide(MemoryOperation("update", "Bob has 3 kids", memory_id=old.id), service, SCOPE, policy)
    assert decision.action == "add" and "changes a number (2)" in decision.reason


async def test_preserve_history_exact_duplicate_update_is_a_no_op():
    service, stored = await _store()
    policy = MemoryPolicy(update_policy="preserve_history")
    decision = await decide(MemoryOperation("update", CASES["exact"], memory_id=stored.id), service, SCOPE, policy)
    assert decision.action == "skip"


async def test_append_only_converts_updates_and_drops_deletes():
    service, stored = await _store()
    policy = MemoryPolicy(update_policy="append_only")
    update = await decide(MemoryOperation("update", "Alice is a head nurse", memory_id=stored.id), service, SCOPE, policy)
    assert update.action == "add" and update.operation.op == "add"
    dup_update = await decide(MemoryOperation("update", STORED, memory_id=stored.id), service, SCOPE, policy)
    assert dup_update.action == "skip"
    delete = await decide(MemoryOperation("delete", memory_id=stored.id), service, SCOPE, policy)
    assert delete.action == "skip" and "never deletes" in delete.reason
    await apply_decision(delete, service, SCOPE, policy)
    assert await service.get("app", "u1", stored.id) is not None


# ------------------------------------------------------------------------------ the policy object


def test_defaults_match_the_reference():
    p = MemoryPolicy()
    assert (p.update_policy, p.skip_similarity, p.skip_jaccard, p.update_similarity, p.update_jaccard,
            p.min_probe_score, p.reconcile_top_k) == ("merge_similar", 0.90, 0.70, 0.60, 0.40, 0.30, 3)
    assert (p.workers, p.queue_size, p.job_timeout_seconds) == (1, 10, 30.0)
    assert (p.preload_limit, p.search_tool, p.search_mode, p.existing_memories_limit) == (0, True, "lexical", 10)
    assert p.existing_query_max_bytes == 7 * 1024


def test_policy_round_trips_through_json_exactly():
    p = MemoryPolicy(update_policy="append_only", search_mode="hybrid", embedder="hash:64", preload_limit=5,
                     message_threshold=3, time_interval_seconds=60.0, trigger_combine="any", tags=("exp-1",))
    assert MemoryPolicy.from_json(p.to_json()) == p
    assert json.loads(p.to_json())["tags"] == ["exp-1"]


@pytest.mark.parametrize("field, value, message", [
    ("update_policy", "overwrite", "update_policy must be one of"),
    ("search_mode", "fuzzy", "search_mode must be one of"),
    ("skip_jaccard", 1.5, "skip_jaccard must be in [0, 1]"),
    ("workers", 0, "workers must be >= 1"),
    ("trigger_combine", "some", "trigger_combine must be"),
    ("embedder", "word2vec", "embedder: unknown embedder spec 'word2vec'"),
])
def test_invalid_policy_fields_are_named(field, value, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        MemoryPolicy(**{field: value})


def test_unknown_fields_in_json_are_rejected():
    with pytest.raises(ValueError, match="MemoryPolicy got unknown field"):
        MemoryPolicy.from_dict({"update_polcy": "append_only"})


def test_extraction_gate():
    off = MemoryPolicy()
    assert should_extract(off, 1, None, 0.0) and not should_extract(off, 0, None, 0.0)
    threshold = MemoryPolicy(message_threshold=2)
    assert not should_extract(threshold, 2, None, 0.0)  # strictly greater
    assert should_extract(threshold, 3, None, 0.0)
    interval = MemoryPolicy(time_interval_seconds=60)
    assert should_extract(interval, 1, None, 100.0)  # first time
    assert not should_extract(interval, 1, 50.0, 100.0) and should_extract(interval, 1, 30.0, 100.0)
    both = MemoryPolicy(message_threshold=2, time_interval_seconds=60)
    assert not should_extract(both, 5, 50.0, 100.0)
    either = MemoryPolicy(message_threshold=2, time_interval_seconds=60, trigger_combine="any")
    assert should_extract(either, 5, 50.0, 100.0) and not should_extract(either, 1, 50.0, 100.0)
