"""Finished cases reach the store in batches written off the event loop (the executor's hot path)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentlab.bench.running.executor import CaseWriter
from agentlab.bench.scoring.metrics import Score
from agentlab.bench.store.results import CaseRecord, ResultStore
from agentlab.events import Message, Usage
from agentlab.model import CachedModel, CallCache, CallRecord, ModelRequest, ScriptedModel


def _record(case_id: str, status: str = "ok", **kw: object) -> CaseRecord:
    return CaseRecord("run", case_id, status, **kw)  # type: ignore[arg-type]


def _call() -> CallRecord:
    return CallRecord(model="m", purpose="answer", usage=Usage(7, 2), latency_ms=1.0, cache_hit=False)


def _stored(store: ResultStore) -> list[tuple[str, str, int, int]]:
    return [tuple(r) for r in store.query(  # type: ignore[misc]
        "SELECT c.case_id, c.status, (SELECT count(*) FROM calls k WHERE k.case_id = c.case_id), "
        "(SELECT count(*) FROM scores s WHERE s.case_id = c.case_id) FROM cases c ORDER BY c.case_id")]


def test_write_cases_stores_a_batch_and_replaces_earlier_attempts(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        store.write_case(_record("a", "failed", error="x", calls=[_call()]))
        store.write_cases([_record("a", calls=[_call(), _call()], scores=[Score("f1", 0.5, "v")]),
                           _record("b", metadata={"k": None}, scores=[Score("f1", None, "v", "no reply")])])
        assert _stored(store) == [("a", "ok", 2, 1), ("b", "ok", 0, 1)]


def test_a_refused_record_writes_nothing_of_its_batch(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        twice = [Score("f1", 0.5, "v"), Score("f1", 0.6, "v")]
        with pytest.raises(ValueError, match="scored twice"):
            store.write_cases([_record("a"), _record("b", scores=twice)])
        assert _stored(store) == []


class SlowStore(ResultStore):
    """Each write takes 0.2 s (a slow fsync); the batches it was given are recorded."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.batches: list[int] = []
        self.threads: set[str] = set()

    def write_cases(self, records: Sequence[CaseRecord]) -> None:
        self.batches.append(len(records))
        self.threads.add(threading.current_thread().name)
        time.sleep(0.2)
        super().write_cases(records)


def test_cases_finished_during_a_write_go_together_in_the_next_one(tmp_path: Path) -> None:
    with SlowStore(tmp_path / "r.duckdb") as store:
        writer = CaseWriter(store, [])
        started = time.perf_counter()
        for i in range(10):
            writer.add(_record(f"c{i}"))
        queued = time.perf_counter() - started
        writer.flush()
        assert queued < 0.15  # add() did not wait for a write
        assert sum(store.batches) == 10 and len(store.batches) <= 2
        assert store.threads == {"agentlab-case-writer"}
        assert len(_stored(store)) == 10


def test_a_lone_case_is_stored_without_waiting_for_a_flush(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        writer = CaseWriter(store, [])
        writer.add(_record("only"))
        deadline = time.time() + 10
        while not _stored(store) and time.time() < deadline:
            time.sleep(0.01)
        assert _stored(store) == [("only", "ok", 0, 0)]
        writer.flush()


async def test_the_call_cache_is_in_the_file_before_the_cases(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "c.duckdb")
    await CachedModel(ScriptedModel([], default_reply="ok"), cache).generate(ModelRequest([Message.user("q")]))
    assert cache._pending

    class Checking(ResultStore):
        pending_at_write: list[int] = []

        def write_cases(self, records: Sequence[CaseRecord]) -> None:
            self.pending_at_write.append(len(cache._pending))
            super().write_cases(records)

    with Checking(tmp_path / "r.duckdb") as store:
        writer = CaseWriter(store, [cache, None, cache])
        writer.add(_record("a"))
        writer.flush()
        assert store.pending_at_write == [0] and writer.caches == [cache]
    cache.close()


def test_a_failed_write_is_raised_by_the_next_flush(tmp_path: Path) -> None:
    class Broken(ResultStore):
        def write_cases(self, records: Sequence[CaseRecord]) -> None:
            raise RuntimeError("disk full")

    with Broken(tmp_path / "r.duckdb") as store:
        writer = CaseWriter(store, [])
        writer.add(_record("a"))
        with pytest.raises(RuntimeError, match="disk full"):
            writer.flush()
        writer.flush()  # reported once


def test_add_refuses_a_record_the_store_would_refuse(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.duckdb") as store:
        writer = CaseWriter(store, [])
        with pytest.raises(ValueError, match="scored twice"):
            writer.add(_record("a", scores=[Score("f1", 0.5, "v"), Score("f1", 0.5, "v")]))
        writer.flush()
        assert _stored(store) == []
