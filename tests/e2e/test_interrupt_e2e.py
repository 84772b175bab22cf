"""Ctrl-C during a run on the embedded model: the process ends at once, and a rerun resumes.

llama.cpp finishes the generation in flight before its server shuts down, which on 2 cores can
take minutes; the CLI must not make the user wait for it after an interrupt.
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


def test_sigint_mid_generation_exits_promptly(tmp_path: Path) -> None:
    pytest.importorskip("xllamacpp")
    data_dir = os.environ.get("AGENTLAB_DATA_DIR", "")
    if not data_dir or not (Path(data_dir) / "qmsum").is_dir():
        pytest.skip("needs AGENTLAB_DATA_DIR with the QMSum test split")
    env = {**os.environ, "AGENTLAB_CACHE_DB": str(tmp_path / "cache.duckdb")}
    db = tmp_path / "r.duckdb"
    # The first case's summary build sends ~5.7k-token prompts: one is in flight after 20 s.
    proc = subprocess.Popen([sys.executable, "-m", "agentlab.bench", "qmsum", "--mode", "summary", "--limit", "1",
                             "--db", str(db), "--no-progress"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(20)
    assert proc.poll() is None, proc.communicate()
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    waited = time.perf_counter() - sent
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "Rerun the same command" in err
    assert waited < 15, f"the process took {waited:.1f} s to end after SIGINT"
