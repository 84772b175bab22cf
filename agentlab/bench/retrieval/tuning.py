"""How :data:`agentlab.bench.retrieval.locomo.TUNED` was chosen: a grid on the development conversations only.

``python -m agentlab.bench.retrieval.tuning --unit dialog --retriever hybrid`` scores every
:class:`~agentlab.bench.retrieval.locomo.RetrieverConfig` of the grid on the questions of
:data:`~agentlab.bench.retrieval.locomo.DEV_CONVERSATIONS` and prints them best first by **dev
recall**: the mean of recall@k over the unit's depths (the paper's k), on the dev split only, ties
broken by recall at the smallest k. The dev split is the questions of ``conv-26`` and ``conv-30`` (the
first two conversations of ``locomo10.json``, 304 of its 1,986 questions); the other eight
conversations are held out and never scored here. The paper's row plays no part in the ranking: a
configuration is chosen for recall, not for its margin over DRAGON. ``--grid field=v1,v2`` replaces
a field's default values (repeatable). Dense vectors come from the embedding cache, so a rerun
embeds only texts it has not seen.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any, TextIO

from agentlab.bench.retrieval.locomo import (
    DEV_CONVERSATIONS,
    PROTOCOL_KS,
    RETRIEVERS,
    TUNED,
    UNITS,
    RetrieverConfig,
    protocol_recall,
)

#: The values tried per retriever (fields that do not affect a retriever are left at the tuned value).
DEFAULT_GRID: dict[str, dict[str, list[Any]]] = {
    "lexical": {"stem": [False, True], "lexical_context_turns": [0, 1, 2], "lexical_date": [False, True],
                "lexical_sources": [False, True]},
    "dense": {"dense_context_turns": [0, 1, 2], "dense_sources": [False, True], "dense_sentences": [False, True]},
    "hybrid": {"rrf_k": [10, 60], "dense_weight": [0.5, 1.0, 1.5]},
}


def _parse_value(text: str, kind: type) -> Any:
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() == "true"
    return kind(text)


def parse_grid(assignments: Sequence[str], retriever: str) -> dict[str, list[Any]]:
    """The grid: :data:`DEFAULT_GRID` of ``retriever`` with ``field=v1,v2`` assignments replacing fields."""
    grid = dict(DEFAULT_GRID[retriever])
    kinds = {f.name: type(getattr(RetrieverConfig(), f.name)) for f in fields(RetrieverConfig)}
    for assignment in assignments:
        name, _, values = assignment.partition("=")
        if name not in kinds or not values:
            raise ValueError(f"--grid {assignment!r}: expected field=v1,v2 with a field of {', '.join(kinds)}")
        grid[name] = [_parse_value(v.strip(), kinds[name]) for v in values.split(",")]
    return grid


def dev_cases() -> tuple[list[Any], Any]:
    """The LoCoMo cases of the development conversations, and the settings they were loaded with."""
    from agentlab.bench.config import load_settings
    from agentlab.bench.tasks import get_task

    task = get_task("locomo")
    settings = load_settings("locomo", task.default_settings())
    cases = [c for c in task.load_cases(settings).cases if c.data.conversation.sample_id in DEV_CONVERSATIONS]
    return cases, settings


def tune(unit: str, retriever: str, grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every configuration of ``grid`` scored on the dev questions, best first by dev recall (module docstring)."""
    cases, settings = dev_cases()
    names = list(grid)
    scored = []
    for values in itertools.product(*(grid[n] for n in names)):
        config = replace(TUNED[unit], **dict(zip(names, values, strict=True)))
        out = protocol_recall(cases, unit, retriever, settings, config=config)
        recall = {f"@{k}": out["overall"][f"recall@{k}"] for k in PROTOCOL_KS[unit]}
        scored.append({"config": dict(zip(names, values, strict=True)),
                       "mean": sum(recall.values()) / len(recall), **recall})
    first = f"@{PROTOCOL_KS[unit][0]}"
    return sorted(scored, key=lambda row: (-row["mean"], -row[first]))


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """Print the dev-split grid for one unit and retriever."""
    parser = argparse.ArgumentParser(prog="python -m agentlab.bench.retrieval.tuning",
                                     description="Score retriever choices on the LoCoMo dev conversations.")
    parser.add_argument("--unit", choices=UNITS, required=True)
    parser.add_argument("--retriever", choices=RETRIEVERS, required=True)
    parser.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2")
    args = parser.parse_args(argv)
    try:
        grid = parse_grid(args.grid, args.retriever)
    except ValueError as exc:
        parser.error(str(exc))
    from agentlab.duckdb_files import DatabaseFileError

    try:
        rows = tune(args.unit, args.retriever, grid)
    except DatabaseFileError as exc:  # the embedding cache is held by another run
        parser.exit(2, f"error: {exc}\n")
    out.write(f"dev split: the questions of {', '.join(DEV_CONVERSATIONS)}; unit {args.unit}, retriever "
              f"{args.retriever}; best first by dev recall (mean recall@k over k = "
              f"{', '.join(map(str, PROTOCOL_KS[args.unit]))}, percent)\n")
    for row in rows:
        cells = "  ".join(f"{k} {v:5.1f}" for k, v in row.items() if k.startswith("@"))
        out.write(f"  mean {row['mean']:5.1f}  {cells}  {row['config']}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
