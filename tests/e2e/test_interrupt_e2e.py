"""SIGTERM (a CI timeout, `kill`) while the embedded model is mid-generation: the process ends promptly.

Three cases run, so both server slots hold a ~5.7k-token summary prompt when the signal comes.
The run must say what it kept and exit with 130 within 30 s, not wait for llama.cpp to finish
the generations in flight.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_sigterm_mid_generation_exits_promptly(tmp_path: Path) -> None:
    pytest.importorskip("xllamacpp")
    data_dir = os.environ.get("AGENTLAB_DATA_DIR", "")
    if not data_dir or not (Path(data_dir) / "qmsum").is_dir():
        pytest.skip("needs AGENTLAB_DATA_DIR with the QMSum test split")
    env = {**os.environ, "AGENTLAB_CACHE_DB": str(tmp_path / "cache.duckdb")}
    db = tmp_path / "r.duckdb"
    # Summary builds send ~5.7k-token prompts: two are in flight after 20 s.
    proc = subprocess.Popen([sys.executable, "-m", "agentlab.bench", "qmsum", "--mode", "summary", "--limit", "3",
                             "--no-baselines",
                             "--db", str(db), "--no-progress"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(20)
    assert proc.poll() is None, proc.communicate()
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    waited = time.perf_counter() - sent
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "Rerun the same command" in err
    # The two prompts in flight would take ~35 s more to finish (~5.7k tokens at ~170 tok/s each, then
    # their answers); ending in under 30 s shows the run did not wait for them. The time itself varies
    # with the machine (1.1-13.6 s measured on one idle 2-core machine, 16.3 s once in CI), so a timing
    # goal belongs in benchmarks/, not here.
    assert waited < 30, f"the process took {waited:.1f} s to end after SIGTERM"
