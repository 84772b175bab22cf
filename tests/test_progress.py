"""Progress inside a case: the reporter module, and the summariser, extractor and embedder reporting steps."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from agentlab.events import user_event
from agentlab.memory import InMemoryMemoryService, MemoryExtractor, MemoryPolicy
from agentlab.model import tokens
from agentlab.model.base import ModelInfo
from agentlab.model.scripted import ScriptedModel
from agentlab.progress import Progress, listening, observe_progress, report_progress
from agentlab.recall.embed import HashEmbedder
from agentlab.recall.index import EMBED_BATCH, DenseIndex
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import Summarizer, SummaryPolicy, SummaryWorker

sys.path.insert(0, str(Path(__file__).resolve().parent / "summary"))
from summary_helpers import seeded, turns  # noqa: E402


def test_reports_reach_the_listeners_of_their_context_only() -> None:
    seen: list[Progress] = []
    report_progress("summary", 1)  # nobody listens: a no-op
    assert not listening()

    def broken(_: Progress) -> None:
        raise RuntimeError("a display bug")

    with observe_progress(seen.append), observe_progress(broken):
        assert listening()
        report_progress("summary", 2, tokens=400, tokens_total=1200)  # the broken listener is skipped
    report_progress("summary", 3)
    assert seen == [Progress("summary", 2, tokens=400, tokens_total=1200)]
    assert seen[0].describe() == "summary step 2, 400/1,200 tokens"
    assert Progress("embedding", 64, 130, unit="texts").describe() == "embedding texts 64/130"


async def test_concurrent_tasks_keep_their_own_listeners() -> None:
    got: dict[str, list[int]] = {"a": [], "b": []}

    async def case(name: str) -> None:
        with observe_progress(lambda p: got[name].append(p.done)):
            for step in (1, 2):
                report_progress(name, step)
                await asyncio.sleep(0)
            # a worker thread runs in a copy of this context and reports to the same listener
            await asyncio.to_thread(report_progress, name, 3)

    await asyncio.gather(case("a"), case("b"))
    assert got == {"a": [1, 2, 3], "b": [1, 2, 3]}


async def test_a_rolling_summary_reports_each_step_and_the_tokens_covered() -> None:
    svc = InMemorySessionService()
    session = await seeded(svc, turns(12, words=30))  # ~24 events of ~70 tokens
    model = ScriptedModel(default_reply="rolling summary", info=ModelInfo("tiny", 1000))  # 700-token budget
    policy = SummaryPolicy()
    worker = SummaryWorker(svc, Summarizer(model, policy), policy)
    total = sum(tokens.count_event(e) for e in session.events)
    seen: list[Progress] = []
    with observe_progress(seen.append):
        while await worker.summarize(session, force=True):
            pass
    assert len(seen) >= 3 and [p.done for p in seen] == list(range(1, len(seen) + 1))
    assert all(p.what == "summary" and p.tokens_total == total for p in seen)
    covered = [p.tokens for p in seen]
    assert covered == sorted(covered) and 0 < covered[0] < total and covered[-1] == total


async def test_memory_extraction_reports_chunk_k_of_n() -> None:
    svc = InMemorySessionService()
    session = await svc.create_session("app", "u1", "s1")
    for i in range(4):
        await svc.append_event(session, user_event(f"Message number {i}: " + "word " * 30, timestamp=100.0 + i))
    model = ScriptedModel(default_reply='{"operations": []}')
    extractor = MemoryExtractor(model, MemoryPolicy(delta_chunk_tokens=110))  # two messages a chunk
    seen: list[Progress] = []
    with observe_progress(seen.append):
        result = await extractor.extract(session, InMemoryMemoryService(), svc)
    assert result.status == "extracted"
    assert [(p.what, p.unit, p.done, p.total) for p in seen] == [("memory extraction", "chunk", 1, 2),
                                                                   ("memory extraction", "chunk", 2, 2)]
    assert seen[0].tokens is not None and seen[0].tokens < seen[1].tokens == seen[1].tokens_total


def test_embedding_a_large_index_reports_batches_and_gives_the_same_vectors() -> None:
    texts = [f"event {i} about kayaks and fjords number {i % 7}" for i in range(2 * EMBED_BATCH + 5)]
    index = DenseIndex(HashEmbedder())
    for i, text in enumerate(texts):
        index.add(f"d{i}", text)
    seen: list[Progress] = []
    with observe_progress(seen.append):
        assert index.flush() == len(texts)
    assert [(p.done, p.total) for p in seen] == [(EMBED_BATCH, len(texts)), (2 * EMBED_BATCH, len(texts)),
                                                 (len(texts), len(texts))]
    ids, matrix = index._current_matrix()
    whole = HashEmbedder().embed([texts[int(d[1:])] for d in ids])
    assert matrix == pytest.approx(whole)
