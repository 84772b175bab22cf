"""Each benchmark task module stays short enough to read top to bottom (at most 450 lines).

The harness code lives in the APIs it belongs to (summary, recall, ``bench.evidence``,
``bench.case_frames``, the model wrappers); a task module loads cases, seeds the
history, asks and scores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import agentlab.bench.tasks as tasks

LIMIT = 450
TASKS_DIR = Path(tasks.__file__).resolve().parent
#: The four benchmarks' modules, always checked (a missing one is a failure, not a skip).
BENCHMARKS = ("qmsum", "locomo", "longmemeval", "mtbench101")


def too_long(paths: list[Path], limit: int = LIMIT) -> list[str]:
    """``<file>: <n> lines`` for every file of ``paths`` longer than ``limit`` lines."""
    counts = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in paths}
    return [f"{p.name}: {n} lines (limit {limit})" for p, n in sorted(counts.items()) if n > limit]


def test_the_four_benchmark_modules_are_there() -> None:
    assert all((TASKS_DIR / f"{name}.py").is_file() for name in BENCHMARKS)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_task_module_is_at_most_450_lines(name: str) -> None:
    assert too_long([TASKS_DIR / f"{name}.py"]) == []


def test_every_other_module_of_the_tasks_package_is_at_most_450_lines() -> None:
    others = [p for p in TASKS_DIR.glob("*.py") if p.stem not in BENCHMARKS and p.name != "__init__.py"]
    assert others  # the judge and settings modules were found
    assert too_long(others) == []


def test_the_count_names_the_file_and_its_lines(tmp_path: Path) -> None:
    long = tmp_path / "long_task.py"
    long.write_text("x = 1\n" * 451, encoding="utf-8")
    short = tmp_path / "short_task.py"
    short.write_text("x = 1\n" * 450, encoding="utf-8")
    assert too_long([long, short]) == ["long_task.py: 451 lines (limit 450)"]
