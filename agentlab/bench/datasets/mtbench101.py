"""MT-Bench-101 (Bai et al., "MT-Bench-101: A Fine-Grained Benchmark for Evaluating Large Language
Models in Multi-Turn Dialogues", ACL 2024; github.com/mtbench101/mt-bench-101, Apache-2.0).

``mtbench101.jsonl``: one dialogue per line, ``{"task": "CM", "id": 17, "history": [{"user", "bot"}...]}``;
the ``bot`` texts are the golden context. 1,388 dialogues, 4,208 turns, 13 tasks.

The published summary benchmark ran 9 tasks, 917 dialogues (docs/sources.md#summary-benchmark-setup):
CC 147, CM 80, GR 71, IC 150, PI 87, SA 73, SC 77, SI 149, TS 83. (Two other 9-task subsets also sum to 917; this one is
the one the report's tables name.) AR, CR, FR and MR are selectable by passing ``tasks``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from agentlab.bench.datasets.base import DatasetError, iter_jsonl, require, resolve_file

NAME = "mt_bench_101"
FILE = "mtbench101.jsonl"

ALL_TASKS: dict[str, str] = {
    "AR": "anaphora resolution", "CC": "content confusion", "CM": "context memory",
    "CR": "content rephrasing", "FR": "format rephrasing", "GR": "general reasoning",
    "IC": "instruction clarification", "MR": "mathematical reasoning", "PI": "proactive interaction",
    "SA": "self-affirmation", "SC": "self-correction", "SI": "separate input", "TS": "topic shift",
}
#: The 9 tasks of the published run (917 dialogues).
PUBLISHED_TASKS: tuple[str, ...] = ("CC", "CM", "GR", "IC", "PI", "SA", "SC", "SI", "TS")


@dataclass(frozen=True)
class DialogueTurn:
    """One exchange of a dialogue: the user's message and the dataset's reference bot reply (the history
    the model under test is given for earlier turns).
    """

    user: str
    bot: str


@dataclass(frozen=True)
class Dialogue:
    """One multi-turn dialogue of a task (``CC``, ``SI``, ...); ``dialogue_id`` is unique in the file."""

    task: str
    dialogue_id: int
    turns: tuple[DialogueTurn, ...]

    @property
    def case_id(self) -> str:
        """The dialogue's id in runs and tables: task and zero-padded id, e.g. ``SI_0042``."""
        return f"{self.task}_{self.dialogue_id:04d}"


@dataclass(frozen=True)
class MTBench101Data:
    """Every dialogue of the file and the file's sha256 (stored with every run)."""

    dialogues: tuple[Dialogue, ...]
    sha256: str

    def select(self, tasks: Iterable[str] = PUBLISHED_TASKS) -> list[Dialogue]:
        """Dialogues of the given tasks, in file order."""
        wanted = {t.upper() for t in tasks}
        unknown = wanted - set(ALL_TASKS)
        if unknown:
            raise ValueError(f"unknown MT-Bench-101 task(s) {sorted(unknown)}; known: {', '.join(sorted(ALL_TASKS))}")
        return [d for d in self.dialogues if d.task in wanted]


def load_mtbench101(*, manifest: str | os.PathLike[str] | None = None,
                    allow_download: bool | None = None) -> MTBench101Data:
    """The verified, parsed MT-Bench-101 file (looked up locally, else downloaded); ``DatasetError`` naming
    the line for a malformed or duplicate row.
    """
    resolved = resolve_file(NAME, FILE, manifest=manifest, allow_download=allow_download)
    path = resolved.local_path
    dialogues = []
    seen: set[int] = set()
    for lineno, row in iter_jsonl(path):
        where = f"{path}: line {lineno}"
        task = require(row, "task", str, where)
        if task not in ALL_TASKS:
            raise DatasetError(f"{where}: unknown task {task!r}")
        dialogue_id = require(row, "id", int, where)
        if dialogue_id in seen:
            raise DatasetError(f"{where}: duplicate dialogue id {dialogue_id}")
        seen.add(dialogue_id)
        history = require(row, "history", list, where)
        if not history:
            raise DatasetError(f"{where}: empty history")
        turns = tuple(
            DialogueTurn(require(t, "user", str, f"{where}: history[{i}]"), require(t, "bot", str, f"{where}: history[{i}]"))
            for i, t in enumerate(history)
        )
        dialogues.append(Dialogue(task, dialogue_id, turns))
    return MTBench101Data(tuple(dialogues), resolved.sha256 or "")
