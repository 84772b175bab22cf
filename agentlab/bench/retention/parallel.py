"""The trajectory replay spread over worker processes (one trajectory is the unit of work).

:func:`measure_in_processes` runs :func:`agentlab.bench.retention.trajectories.measure_trajectories`
over the trajectories split between ``workers`` forked processes (the trajectories and arms are
inherited by the fork, only the rows come back) and returns the rows in the order a single process
gives them: trajectory by trajectory, each in the arms' order. A row depends on its trajectory and
arm only (the mechanisms are built per trajectory), so the split changes the wall time, not a
number. Without ``fork`` (not on Linux/macOS), with one worker or one trajectory, it runs in
process. ``AGENTLAB_REPLAY_WORKERS`` sets the number of workers (default: the CPUs, at most 4).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence
from typing import Any

from agentlab.bench.retention.trajectories import DEFAULT_K, Timed, TrajectoryRow, measure_trajectories
from agentlab.bench.running.loops import run_sync

#: Environment variable naming the number of worker processes.
WORKERS_ENV = "AGENTLAB_REPLAY_WORKERS"
MAX_DEFAULT_WORKERS = 4
_JOB: dict[str, Any] = {}


def default_workers() -> int:
    """``$AGENTLAB_REPLAY_WORKERS``, else the CPUs (at most :data:`MAX_DEFAULT_WORKERS`)."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{WORKERS_ENV}={raw!r}: expected a whole number of worker processes (1 = none)") from None
        return max(1, value)
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_WORKERS))


def _shares(trajectories: Sequence[Any], workers: int) -> list[list[int]]:
    """Trajectory indices per worker, the longest dealt first so the shares end together."""
    order = sorted(range(len(trajectories)), key=lambda i: -len(trajectories[i].events))
    shares: list[list[int]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for i in order:
        w = loads.index(min(loads))
        shares[w].append(i)
        loads[w] += len(trajectories[i].events) ** 2  # a step re-projects its whole prefix
    return shares


def _work(share: list[int]) -> list[TrajectoryRow]:
    job = _JOB
    picked = [job["trajectories"][i] for i in share]
    return run_sync(measure_trajectories(picked, job["arms"], **job["kwargs"])).rows


def measure_in_processes(trajectories: Sequence[Any], arms: Sequence[Any], *, context_window: int,
                         settings: Any = None, k: int = DEFAULT_K, cache_profile: str | None = None,
                         summary_tokens: int | None = None, workers: int | None = None,
                         hidden: dict[str, Any] | None = None) -> Timed:
    """:func:`~agentlab.bench.retention.trajectories.measure_trajectories`, split over ``workers`` processes."""
    workers = default_workers() if workers is None else max(1, workers)
    workers = min(workers, len(trajectories))
    kwargs: dict[str, Any] = {"context_window": context_window, "settings": settings, "k": k,
                              "cache_profile": cache_profile, "summary_tokens": summary_tokens, "hidden": hidden}
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return run_sync(measure_trajectories(trajectories, arms, **kwargs))
    started = time.perf_counter()
    shares = _shares(trajectories, workers)
    _JOB.update(trajectories=trajectories, arms=list(arms), kwargs=kwargs)
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_work, shares, chunksize=1)
    finally:
        _JOB.clear()
    n_arms = len(arms)
    by_index: dict[int, list[TrajectoryRow]] = {}
    for share, rows in zip(shares, parts, strict=True):
        for j, i in enumerate(share):
            by_index[i] = rows[j * n_arms:(j + 1) * n_arms]
    return Timed([r for i in range(len(trajectories)) for r in by_index[i]], time.perf_counter() - started)


__all__ = ["WORKERS_ENV", "default_workers", "measure_in_processes"]
