"""LongMemEval end to end on the embedded model, through the CLI, on a generated file.

The real LongMemEval file cannot be had on this machine, so ``python -m agentlab.bench fixture
longmemeval`` writes two single-session-user questions in the real schema. Each mode
(``long_context``, ``summary``, ``recall``) runs with ``--limit 2`` as a user would run it (a
separate process per command, the embedded SmolLM2 with the [smoke] caps, the judge on), then
``report longmemeval --json`` must hold the three derived tables. Answer quality is not checked
(SmolLM2-135M is a smoke-test model); that every case is stored, scored or failed with a code, is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

MODES = ("long_context", "summary", "recall")


def cli(*args: str, env: dict[str, str], cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "agentlab.bench", *args, "--json"], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_every_mode_and_the_report_on_a_generated_file(tmp_path: Path) -> None:
    pytest.importorskip("xllamacpp")
    env = {**os.environ, "AGENTLAB_CACHE_DB": str(tmp_path / "cache.duckdb")}
    fixture = tmp_path / "longmemeval_fixture.json"
    db = tmp_path / "results.duckdb"
    made = subprocess.run([sys.executable, "-m", "agentlab.bench", "fixture", "longmemeval", str(fixture),
                           "--questions", "2", "--question-type", "single-session-user"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr

    for mode in MODES:
        result = cli("longmemeval", "--mode", mode, "--limit", "2", "--model", "embedded", "--db", str(db),
                     "--set", f"dataset.path={fixture}", "--no-progress", env=env, cwd=tmp_path)
        assert result["smoke_test"] is True and result["selected"] == 2
        assert result["attempted"] + result["already_done"] == 2
        metrics = {s["metric"] for s in result["scores"]}
        assert {"rougeL", "f1", "bleu1", "exact_match"} <= metrics, metrics

    report = cli("report", "longmemeval", "--db", str(db), env=env, cwd=tmp_path)
    assert report["smoke_test"] is True
    assert {r["mode"] for r in report["runs"]} == set(MODES)
    assert {r["mode"] for r in report["token_savings"]} == {"summary", "recall"}
    for row in report["token_savings"]:
        assert row["baseline_mode"] == "long_context" and row["n_cases"] == 2
    assert {r["mode"] for r in report["quality_loss"]} == {"summary", "recall"}
    assert {r["metric"] for r in report["recovery"]} >= {"rougeL", "f1"}
    # The generated haystack is small enough for SmolLM2's window: no case may fail on its size.
    with_errors = [r for r in report["scores"] if r.get("n_failed")]
    assert not with_errors, with_errors
