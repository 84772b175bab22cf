"""Benchmark harnesses: datasets, tasks, metrics, judge, executor, DuckDB store and analysis.

Run from the shell with ``python -m agentlab.bench`` (see :mod:`agentlab.bench.cli.main`); from a
notebook use :mod:`agentlab.bench.analysis` (``*_df()`` functions). A new benchmark is one module in
:mod:`agentlab.bench.tasks` implementing :class:`Task` (the interface is documented there).
"""

from agentlab.bench.config import Settings, load_settings
from agentlab.bench.facts import ModeRoles
from agentlab.bench.scoring.judge import Judge, JudgeResult
from agentlab.bench.scoring.metrics import Score
from agentlab.bench.store.results import DEFAULT_DB, ResultStore
from agentlab.bench.tasks import (
    Case,
    CaseError,
    CaseResult,
    CaseSelection,
    RunContext,
    Task,
    collect_run,
    get_task,
    register,
)

__all__ = [
    "DEFAULT_DB",
    "Case",
    "CaseError",
    "CaseResult",
    "CaseSelection",
    "Judge",
    "JudgeResult",
    "ModeRoles",
    "ResultStore",
    "RunContext",
    "Score",
    "Settings",
    "Task",
    "collect_run",
    "get_task",
    "load_settings",
    "register",
]
