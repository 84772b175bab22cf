"""No import cycle among ``agentlab``'s modules (issue 34): each module can be imported on its own.

The graph is the module-level imports, read with :mod:`ast` (no module is imported): imports
inside functions (the lazy ones that keep ``agentlab.bench`` from loading pandas at start-up) and
under ``if TYPE_CHECKING:`` run later or never, so they cannot make a cycle at import time and are
left out. ``from .x import y`` counts as an edge to ``x`` and to ``x.y`` when that is a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agentlab

ROOT = Path(agentlab.__file__).resolve().parent


def modules() -> dict[str, Path]:
    """Dotted module name → its file, for every module of the package."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ("agentlab", *path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def module_level_imports(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    """What a module imports when it is loaded (absolute dotted names, relative imports resolved)."""
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if "TYPE_CHECKING" in ast.unparse(node.test):
                    continue
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                out.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name.split(".") if is_package else name.split(".")[:-1]
                    package = package[:len(package) - (node.level - 1)]
                    base = ".".join([*package, base] if base else package)
                out.add(base)
                out.update(f"{base}.{alias.name}" for alias in node.names)

    visit(tree.body)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module → the package's modules it imports at module level."""
    found = modules()
    return {name: {d for d in module_level_imports(ast.parse(path.read_text(encoding="utf-8")), name,
                                                   path.name == "__init__.py") if d in found and d != name}
            for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_resolve_and_type_checking_imports_are_left_out() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nfrom . import x\nfrom ..y import z\n"
                     "if TYPE_CHECKING:\n    import agentlab.never\ndef f():\n    import agentlab.later\n")
    assert module_level_imports(tree, "agentlab.bench.tasks.mod", is_package=False) == {
        "typing", "typing.TYPE_CHECKING", "agentlab.bench.tasks", "agentlab.bench.tasks.x",
        "agentlab.bench.y", "agentlab.bench.y.z"}


def test_no_import_cycle_among_the_package_modules() -> None:
    graph = import_graph()
    assert len(graph) > 100 and sum(len(d) for d in graph.values()) > 300  # the package and its imports were read
    assert cycles(graph) == []
