"""The BM25 index grown add by add scores exactly as one built at once; search reads only what changed."""

from __future__ import annotations

import random

import numpy as np
import pytest
from recall_helpers import APP, USER, Ledger, invocation, policy

from agentlab.recall.index import LexicalIndex
from agentlab.recall.search import UserEventIndex, session_search
from agentlab.session.duckdb import DuckDBSessionService
from agentlab.session.inmemory import InMemorySessionService

WORDS = [f"w{k}" for k in range(60)] + ["invoice", "parcel", "route", "depot"]


def text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 25)))


def scores_by_id(index: LexicalIndex, query: str) -> dict[str, float]:
    ids, scores = index.scores(query)
    return {d: float(s) for d, s in zip(ids, scores, strict=True) if d in index and s > 0}


@pytest.mark.parametrize("seed", range(6))
def test_grown_index_scores_exactly_as_a_fresh_build(seed: int) -> None:
    rng = random.Random(seed)
    grown = LexicalIndex()
    docs: dict[str, tuple[str, float]] = {}
    queries = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(12)]
    for step in range(400):
        roll = rng.random()
        if roll < 0.75 or not docs:
            doc_id = f"d{rng.randint(0, 300)}"  # sometimes an id again: its text is replaced
            docs[doc_id] = (text(rng), float(step))
            grown.add(doc_id, docs[doc_id][0], timestamp=docs[doc_id][1])
        else:
            doc_id = rng.choice(sorted(docs))
            del docs[doc_id]
            grown.remove(doc_id)
        if step % 25 == 0:
            fresh = LexicalIndex()
            for doc_id, (body, ts) in docs.items():
                fresh.add(doc_id, body, timestamp=ts)
            for query in queries:
                assert scores_by_id(grown, query) == scores_by_id(fresh, query)  # bit for bit
                assert grown.search(query, 7) == fresh.search(query, 7)


def test_scores_are_bm25s_lucene_scores() -> None:
    """Same BM25 as the bm25s build it replaces (bm25s sums in float32: equal to ~1e-6)."""
    import bm25s

    rng = random.Random(11)
    index = LexicalIndex()
    bodies = [text(rng) + " invoice" for _ in range(200)]
    for k, body in enumerate(bodies):
        index.add(f"d{k}", body)
    vocab = dict(index._vocab)
    retriever = bm25s.BM25(k1=index.k1, b=index.b)
    retriever.index(([[vocab[t] for t in index.tokenizer(b)] for b in bodies], dict(vocab)), show_progress=False)
    for query in ("invoice", "w1 w2 parcel", "route depot w7"):
        ids, ours = index.scores(query)
        query_ids = sorted({retriever.vocab_dict[t] for t in index.tokenizer(query) if t in retriever.vocab_dict})
        theirs = np.asarray(retriever.get_scores_from_ids(query_ids), dtype=np.float32)
        order = [int(d[1:]) for d in ids]
        np.testing.assert_allclose(ours, theirs[order], rtol=2e-6, atol=1e-6)


class CountingService(InMemorySessionService):
    def __init__(self) -> None:
        super().__init__()
        self.listed = 0
        self.read: list[str] = []

    async def list_sessions(self, app_name, user_id):  # type: ignore[no-untyped-def]
        self.listed += 1
        return await super().list_sessions(app_name, user_id)

    async def get_session(self, app_name, user_id, session_id):  # type: ignore[no-untyped-def]
        self.read.append(session_id)
        return await super().get_session(app_name, user_id, session_id)


async def test_search_after_appends_equals_a_fresh_index_and_reads_only_changed_sessions() -> None:
    svc = CountingService()
    led = Ledger(svc)
    rng = random.Random(5)
    sessions = {sid: await led.session(sid) for sid in ("a", "b", "c")}
    for _ in range(30):
        await led.user(rng.choice(list(sessions.values())), text(rng) + " parcel")
    current = sessions["a"]
    inv = invocation(svc, current)
    pol = policy()
    await session_search(inv, pol, "parcel", scope="all_sessions")  # the first search indexes everything
    listed = svc.listed
    for step in range(25):
        target = current if step % 3 else sessions[rng.choice(["b", "c"])]
        await led.user(target, text(rng) + " parcel")
        svc.read.clear()
        for scope in ("current_session", "other_sessions", "all_sessions"):
            query = f"parcel {rng.choice(WORDS)}"
            got = await session_search(inv, pol, query, scope=scope)
            fresh = UserEventIndex(svc, APP, USER)  # what a full rebuild would answer
            fresh.sync(await svc.list_sessions(APP, USER))
            expected = await fresh.search(query, 50, refresh=False, mode="lexical")
            mine = current.id if scope == "current_session" else None
            expected = [h for h in expected if (h.ref.session_id == current.id) == (mine is not None)]
            ranked = [(r["event_id"], r["score"]) for r in got["results"]]
            assert ranked == [(h.ref.event_id, round(h.score, 4)) for h in expected][: pol.search_top_k]
        # Only the session that changed was read, and the caller's live session not even that.
        assert svc.read == ([] if target is current else [target.id])
    assert svc.listed == listed + 25 * 3  # only the reference indexes listed sessions


@pytest.mark.parametrize("backend", ["inmemory", "duckdb"])
async def test_session_heads_follow_appends_and_deletes(backend: str) -> None:
    svc = InMemorySessionService() if backend == "inmemory" else DuckDBSessionService(":memory:")
    try:
        led = Ledger(svc)  # type: ignore[arg-type]
        assert await svc.session_heads(APP, USER) == {}
        a = await led.session("a")
        b = await led.session("b")
        heads = await svc.session_heads(APP, USER)
        assert list(heads) == ["a", "b"] and heads["a"].event_count == 0 and heads["a"].last_event_id == ""
        await led.user(a, "one")
        last = await led.user(a, "two")
        heads = await svc.session_heads(APP, USER)
        assert (heads["a"].event_count, heads["a"].last_event_id) == (2, last.id)
        assert heads["b"].event_count == 0
        await svc.delete_session(APP, USER, "a")
        assert list(await svc.session_heads(APP, USER)) == [b.id]
        assert await svc.session_heads(APP, "someone else") == {}
    finally:
        await svc.close()


async def test_duckdb_heads_kept_by_writes_match_the_stored_ledger(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Heads the service keeps from its own writes equal those read back from the file."""
    from agentlab.events import Event, Message

    path = tmp_path / "s.duckdb"
    svc = DuckDBSessionService(path)
    led = Ledger(svc)  # type: ignore[arg-type]
    a = await led.session("a")
    await svc.session_heads(APP, USER)  # loaded now, then kept up to date by the writes below
    b = await led.session("b")
    await led.user(a, "one")
    await svc.append_event(b, Event(author="x", state_delta={"k": 1}, timestamp=led.clock + 1))
    await led.user(b, "two")
    gone = await led.session("gone")
    await led.user(gone, "three")
    await svc.delete_session(APP, USER, "gone")
    with pytest.raises(KeyError):
        await svc.append_event(gone, Event(author="x", choices=[Message.user("late")]))
    kept = await svc.session_heads(APP, USER)
    await svc.close()
    reopened = DuckDBSessionService(path)
    try:
        assert await reopened.session_heads(APP, USER) == kept
        assert [h.event_count for h in kept.values()] == [1, 2]
    finally:
        await reopened.close()
