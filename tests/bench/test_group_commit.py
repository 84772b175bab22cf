"""The case writer commits at most once per GROUP_COMMIT_SECONDS; a case after a quiet spell goes at once."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

import agentlab.bench.running.executor as executor
from agentlab.bench.running.executor import CaseWriter
from agentlab.bench.store.results import CaseRecord, ResultStore


class CountingStore(ResultStore):
    """Records when each batch was written and how many cases it held."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes: list[tuple[float, int]] = []

    def write_cases(self, records: Sequence[CaseRecord]) -> None:
        self.writes.append((time.monotonic(), len(records)))
        super().write_cases(records)


def _stored(store: ResultStore) -> int:
    return int(store.query("SELECT count(*) FROM cases")[0][0])


def _wait_for(store: ResultStore, n: int, within: float = 10.0) -> float:
    started = time.monotonic()
    while _stored(store) < n:
        assert time.monotonic() - started < within, f"{_stored(store)} of {n} cases stored after {within} s"
        time.sleep(0.005)
    return time.monotonic() - started


def test_a_stream_of_cases_is_written_in_few_batches_and_a_lone_case_at_once(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "GROUP_COMMIT_SECONDS", 0.3)
    with CountingStore(tmp_path / "r.duckdb") as store:
        writer = CaseWriter(store, [])
        writer.add(CaseRecord("run", "first", "ok"))
        assert _wait_for(store, 1) < 0.25  # nothing was written before: no waiting
        for i in range(30):  # a case every 20 ms for 0.6 s
            writer.add(CaseRecord("run", f"c{i:02d}", "ok"))
            time.sleep(0.02)
        writer.flush()
        assert _stored(store) == 31
        # One write per 0.3 s (the first alone), not one per case (each write is two commits).
        assert len(store.writes) <= 5 and store.writes[0][1] == 1
        gaps = [b[0] - a[0] for a, b in zip(store.writes, store.writes[1:-1], strict=False)]
        assert all(gap >= 0.29 for gap in gaps), gaps

        time.sleep(0.35)  # a quiet spell: the next case is written at once again
        writer.add(CaseRecord("run", "after", "ok"))
        assert _wait_for(store, 32) < 0.25
        writer.flush()


def test_flush_does_not_wait_for_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "GROUP_COMMIT_SECONDS", 30.0)
    with CountingStore(tmp_path / "r.duckdb") as store:
        writer = CaseWriter(store, [])
        writer.add(CaseRecord("run", "a", "ok"))
        _wait_for(store, 1)
        writer.add(CaseRecord("run", "b", "ok"))  # inside the 30 s window
        started = time.monotonic()
        writer.flush()
        assert time.monotonic() - started < 5 and _stored(store) == 2
