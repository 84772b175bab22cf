"""MT-Bench-101 on a local Ray instance (2 CPUs) against the local OpenAI-compatible test server.

The driver of a Ray run is killed with SIGKILL mid-run; the rerun (on Ray again) must store every
case exactly once, keep the cases finished before the kill untouched, and end with the same
predictions and scores as the in-process executor on the same cases. A last in-process rerun
finds nothing to do: the executor is not part of the run id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentlab.bench.store.results import ResultStore
from agentlab.testing.openai_server import OpenAITestServer
from agentlab.testing.processes import alive, descendants

pytestmark = pytest.mark.slow

CASES = 16
LATENCY = 0.2  # seconds per completion: a summary-mode case takes a few seconds, so the kill lands mid-run


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def _bench(args: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "agentlab.bench", *args, "--json", "--no-progress"],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _cases(db: Path, mode: str) -> dict[str, tuple[Any, ...]]:
    with ResultStore(db, read_only=True) as store:
        rows = store.query("SELECT c.case_id, c.status, c.prediction, c.written FROM cases c JOIN runs r USING (run_id) "
                           "WHERE r.mode = ?", [mode])
        scores = store.query("SELECT s.case_id, s.metric, s.value FROM scores s JOIN runs r USING (run_id) "
                             "WHERE r.mode = ? ORDER BY s.metric", [mode])
        (n_rows,), = store.query("SELECT count(*) FROM cases c JOIN runs r USING (run_id) WHERE r.mode = ?", [mode])
    assert n_rows == len(rows) == len({r[0] for r in rows})  # each case stored once
    return {case_id: (status, prediction, written, [(m, v) for c, m, v in scores if c == case_id])
            for case_id, status, prediction, written in rows}


def test_ray_run_survives_a_killed_driver_and_matches_in_process(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    data_dir = os.environ.get("AGENTLAB_DATA_DIR", "")
    if not data_dir or not (Path(data_dir) / "mt_bench_101").is_dir():
        pytest.skip("needs AGENTLAB_DATA_DIR with MT-Bench-101")
    with OpenAITestServer(latency=LATENCY) as server:
        base = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
        local_env = {**base, "AGENTLAB_CACHE_DB": str(tmp_path / "local-cache.duckdb")}
        ray_env = {**base, "AGENTLAB_CACHE_DB": str(tmp_path / "ray-cache.duckdb")}
        common = ["mtbench101", "--limit", str(CASES), "--model", server.model_spec]
        local_db, ray_db = tmp_path / "local.duckdb", tmp_path / "ray.duckdb"
        ray_args = ["--executor", "ray", "--workers", "2", "--concurrency", "1", "--db", str(ray_db)]

        # The reference: both modes in-process.
        for mode in ("baseline", "summary"):
            _bench([*common, "--mode", mode, "--db", str(local_db)], local_env, tmp_path)

        # On Ray: the baseline to the end, then the summary mode killed mid-run.
        first = _bench([*common, "--mode", "baseline", *ray_args], ray_env, tmp_path)
        assert (first["executor"], len(first["workers"]), first["ok"]) == ("ray", 2, CASES)
        with ResultStore(local_db, read_only=True) as store:
            (summary_calls,), = store.query("SELECT count(*) FROM calls JOIN runs USING (run_id) "
                                            "WHERE mode = 'summary' AND NOT cache_hit")
        summary_requests = int(summary_calls)
        start = server.stats.answers.total()
        driver = subprocess.Popen([sys.executable, "-m", "agentlab.bench", *common, "--mode", "summary", *ray_args,
                                   "--no-progress"], env=ray_env, cwd=tmp_path, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while server.stats.answers.total() - start < summary_requests // 2:
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "the Ray run made no progress"
            time.sleep(0.05)
        started_by_driver = descendants(driver.pid)
        names = {pid: _name(pid) for pid in started_by_driver}
        actors = {pid for pid, name in names.items() if "CaseWorker" in name}
        assert len(actors) == 2, names
        driver.send_signal(signal.SIGKILL)
        driver.communicate(timeout=30)
        # The actors go down with the driver. Ray's dashboard and runtime-env agents of the local
        # instance may linger after a SIGKILL (nothing is left to stop them): the test cleans up.
        deadline = time.monotonic() + 20
        while alive(actors) and time.monotonic() < deadline:
            time.sleep(0.5)
        lingering_actors = alive(actors)
        for pid in alive(started_by_driver):
            os.kill(pid, signal.SIGKILL)

        kept = _cases(ray_db, "summary")
        assert 0 < len(kept) < CASES, f"the kill should land mid-run; {len(kept)} of {CASES} stored"

        again = _bench([*common, "--mode", "summary", *ray_args], ray_env, tmp_path)
        assert (again["already_done"], again["attempted"], again["ok"], again["failed"]) == (
            len(kept), CASES - len(kept), CASES - len(kept), 0)
        # Finished in-process: nothing left to do.
        last = _bench([*common, "--mode", "summary", "--db", str(ray_db)], ray_env, tmp_path)
        assert (last["executor"], last["already_done"], last["attempted"]) == ("in-process", CASES, 0)

    for mode in ("baseline", "summary"):
        on_ray, local = _cases(ray_db, mode), _cases(local_db, mode)
        assert len(on_ray) == len(local) == CASES
        assert {k: (v[0], v[1], v[3]) for k, v in on_ray.items()} == {k: (v[0], v[1], v[3]) for k, v in local.items()}
    final = _cases(ray_db, "summary")
    assert all(final[case_id][2] == row[2] for case_id, row in kept.items())  # finished cases not redone
    assert any(scores for *_, scores in final.values())
    assert not lingering_actors, f"Ray workers outlived the killed driver by 20 s: {sorted(lingering_actors)}"
