"""No module of ``agentlab/`` is over 600 lines: a module that long does several things.

There are no exceptions: split a module that grows past the limit by what its parts do (the
issue-34 splits — ``serve/proxy.py``, ``bench/league/play.py``, ``session/duckdb.py``, ``bench/store/results.py``,
``bench/running/distributed.py``, ``bench/running/executor.py`` — show how, each keeping its old import paths).
"""

from __future__ import annotations

from pathlib import Path

import agentlab

LIMIT = 600
ROOT = Path(agentlab.__file__).resolve().parent


def line_counts() -> dict[str, int]:
    """``path relative to agentlab/`` → its number of lines, for every module of the package."""
    return {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for p in sorted(ROOT.rglob("*.py"))}


def test_no_module_is_over_600_lines() -> None:
    counts = line_counts()
    assert len(counts) > 100  # the package was found
    over = [f"{path}: {n} lines" for path, n in counts.items() if n > LIMIT]
    assert over == [], f"split these by what their parts do (limit {LIMIT}): {over}"
