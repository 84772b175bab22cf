"""agentlab.bench has no import cycle, counting function-level and ``TYPE_CHECKING`` imports.

A cycle held apart only by imports inside functions still ties the modules together: neither can
be read, tested or moved without the other. The graph is read from the source (AST), so an import
that runs only inside a function or only for the type checker counts like any other.
"""

from __future__ import annotations

import ast
import gc
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import agentlab

PACKAGE_ROOT = Path(agentlab.__file__).resolve().parent


def module_name(path: Path, root: Path) -> str:
    """``agentlab/bench/tasks/__init__.py`` → ``agentlab.bench.tasks``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """Every module of ``known`` named by an ``import`` or ``from ... import`` anywhere in ``source``.

    ``from pkg import name`` names the submodule ``pkg.name`` when there is one, else ``pkg``
    (importing a submodule runs its parent packages first for every module alike, so that is not
    an edge); relative imports are resolved against ``module``.
    """
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    # Collect first: on CPython 3.11.7 a garbage finalizer that runs during ast.parse (e.g. of a run
    # interrupted by an earlier test) makes it raise 'AST constructor recursion depth mismatch'.
    gc.collect()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found & known


def read_graph(root: Path, prefix: str) -> dict[str, set[str]]:
    """Module → the modules of the graph it imports, for every module under ``root`` named ``prefix*``."""
    files = {module_name(p, PACKAGE_ROOT): p for p in root.rglob("*.py")}
    return {name: imported_modules(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", set(files))
            - {name} for name, path in files.items() if name.startswith(prefix)}


def import_graph(root: Path, prefix: str) -> dict[str, set[str]]:
    """:func:`read_graph`, computed in a fresh interpreter.

    In this test process, after test_executor's KeyboardInterrupt tests, CPython 3.11.7's
    ``ast.parse`` of a large module sometimes failed with "AST constructor recursion depth mismatch"
    (also in a fresh thread); a new interpreter reads the same files without that state.
    """
    done = subprocess.run([sys.executable, __file__, str(root), prefix], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT.parent)})
    return {name: set(targets) for name, targets in json.loads(done.stdout).items()}


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``), or ``None``; iterative DFS so depth is no limit."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for start in sorted(graph):
        if state.get(start):
            continue
        path: list[str] = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_agentlab_bench_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE_ROOT / "bench", "agentlab.bench")
    assert "agentlab.bench.tasks" in graph and "agentlab.bench.store.results" in graph  # the graph was read
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_store_imports_no_task_module() -> None:
    graph = import_graph(PACKAGE_ROOT / "bench", "agentlab.bench")
    assert not {m for m in graph["agentlab.bench.store.results"] if m.startswith("agentlab.bench.tasks")}


def test_a_planted_cycle_is_found_through_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "agentlab" / "bench"
    (pkg / "tasks").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("def load():\n    from agentlab.bench.tasks import get_task\n")
    (pkg / "store.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from agentlab.bench import config\n")
    (pkg / "tasks" / "__init__.py").write_text("from ..store import ResultStore\n")
    files = {module_name(p, tmp_path / "agentlab"): p for p in pkg.rglob("*.py")}
    graph = {name: imported_modules(p.read_text(), name, p.name == "__init__.py", set(files)) - {name}
             for name, p in files.items()}
    assert graph["agentlab.bench.tasks"] == {"agentlab.bench.store"}  # the relative import resolved
    cycle = find_cycle(graph)
    assert cycle is not None and set(cycle) == {"agentlab.bench.config", "agentlab.bench.tasks",
                                                "agentlab.bench.store"}
    (pkg / "config.py").write_text("X = 1\n")  # break it: no cycle left
    graph["agentlab.bench.config"] = set()
    assert find_cycle(graph) is None


if __name__ == "__main__":
    print(json.dumps({k: sorted(v) for k, v in read_graph(Path(sys.argv[1]), sys.argv[2]).items()}))
