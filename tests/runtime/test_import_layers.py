"""Imports flow down the architecture's layers (docs/layout.md, CONTRIBUTING), with no cycle.

Components import the contract (``agentlab.core``) without loading the agent and runner; every
import in ``agentlab/`` — at import time, inside functions, under ``TYPE_CHECKING``, and the
lazy ``_EXPORTS`` tables — goes to the same layer or one below.
"""

from __future__ import annotations

import ast
import gc
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_lazy_runtime_package_still_exports_its_names() -> None:
    import agentlab.runtime as runtime

    assert runtime.LLMAgent.__name__ == "LLMAgent"
    assert runtime.Runner.__module__ == "agentlab.runtime.runner"
    assert set(runtime.__all__) <= set(dir(runtime))
    with pytest.raises(AttributeError):
        runtime.NoSuchThing  # noqa: B018


def test_every_exported_name_is_listed_once() -> None:
    import agentlab.runtime as runtime

    assert sorted(runtime.__all__) == sorted(runtime._EXPORTS)


# ----------------------------------------------------------------------------- layers

#: Modules the runtime builds on: they must load without any part of ``agentlab.runtime``.
COMPONENTS = ["agentlab.core", "agentlab.core.mechanism", "agentlab.summary", "agentlab.recall",
              "agentlab.recall.tools", "agentlab.recall.preload", "agentlab.compaction", "agentlab.memory", "agentlab.memory.preload",
              "agentlab.memory.tools"]


#: Model backends the components never use: loading them cost ``import agentlab.recall`` ~0.35 s.
BACKENDS = ("agentlab.model.openai_compat", "agentlab.model.embedded", "agentlab.model.cache", "openai")


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_component_loads_no_runtime_module_and_no_model_backend(component: str) -> None:
    code = (f"import sys, {component}; "
            "print(','.join(sorted(m for m in sys.modules "
            f"if m.startswith('agentlab.runtime') or m in {BACKENDS!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> set[str]:
    """The modules one import statement names (``from a import b`` names ``a`` and, maybe, ``a.b``)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        target = ".".join([*base, *([node.module] if node.module else [])])
    else:
        target = node.module or ""
    return {target, *(f"{target}.{alias.name}" for alias in node.names)}


def _import_time_imports(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Modules imported while ``module`` itself is being imported (not in functions, not for type checkers)."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(_import_targets(node, module, is_package))
            elif isinstance(node, ast.If):
                if not _is_type_checking(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, (ast.Try, ast.With)):
                visit(node.body)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))
            elif isinstance(node, ast.ClassDef):
                visit(node.body)

    visit(tree.body)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return cycles


def test_no_import_cycle_through_the_runtime_and_its_components() -> None:
    """The import-time graph of ``agentlab`` has no cycle that touches the runtime or a component.

    An edge A -> B means importing A imports B (and so B's parent packages) before A is done;
    imports inside functions and under ``TYPE_CHECKING`` run later or never and are no edge.
    """
    # Collect first: on CPython 3.11.7 a garbage finalizer that runs during ast.parse (e.g. of a run
    # interrupted by an earlier test) makes it raise 'AST constructor recursion depth mismatch'.
    gc.collect()
    root = Path(__file__).resolve().parents[2]
    modules: dict[str, set[str]] = {}
    for path in (root / "agentlab").rglob("*.py"):
        name = _module_name(path, root)
        imports = _import_time_imports(ast.parse(path.read_text()), name, path.name == "__init__.py")
        modules[name] = imports
    graph: dict[str, set[str]] = {}
    for name, imports in modules.items():
        edges: set[str] = set()
        for target in imports:
            parts = target.split(".")
            # importing a.b.c runs a/__init__, a/b/__init__ and a/b/c
            edges.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        # A module's own packages are imported before it: an edge to one of them is no cycle.
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = {t for t in edges if t in modules and t != name and t not in own}

    cycles = _cycles(graph)
    layers = ("agentlab.runtime", "agentlab.core.mechanism", "agentlab.summary", "agentlab.recall",
              "agentlab.compaction", "agentlab.memory")
    touching = [c for c in cycles if any(m == p or m.startswith(p + ".") for m in c for p in layers)]
    assert graph["agentlab.core.mechanism"], "the graph was not built (no imports found)"
    assert touching == [], touching


def test_the_import_walker_and_the_cycle_finder_see_what_they_must() -> None:
    """Guards for the test above: real imports are found, and a cycle is reported."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("from __future__ import annotations\nimport x.y\nfrom .z import w\n"
                     "if TYPE_CHECKING:\n    import hidden\ndef f():\n    import late\n")
    assert _import_time_imports(tree, "pkg.mod", False) == {"__future__", "__future__.annotations", "x.y",
                                                            "pkg.z", "pkg.z.w"}


def test_the_lazy_model_package_still_exports_its_names() -> None:
    import agentlab.model as model

    assert sorted(model.__all__) == sorted([*model._EXPORTS, "tokens"])
    assert all(getattr(model, name) is not None for name in model.__all__)


# ----------------------------------------------------------------------- strict layers

#: The layers, bottom (1) to top (7). A module's layer is that of its longest listed prefix.
LAYERS: dict[str, int] = {
    "agentlab.events": 1, "agentlab.policy_json": 1, "agentlab.progress": 1, "agentlab._lazy": 1,
    "agentlab.duckdb_files": 1, "agentlab.extensions": 1,
    "agentlab.model": 2, "agentlab.session": 2, "agentlab.artifacts": 2, "agentlab.executor": 2,
    "agentlab.core": 3,
    "agentlab.summary": 4, "agentlab.compaction": 4, "agentlab.recall": 4, "agentlab.memory": 4,
    "agentlab.policies": 4, "agentlab.skills": 4, "agentlab.artifacts.tools": 4, "agentlab.artifacts.offload": 4,
    "agentlab.runtime": 5,
    "agentlab.bench": 6, "agentlab.testing": 6, "agentlab.serve": 6,
    # the bench's packages by job; its command line sits above them all (only ``__main__`` calls it)
    "agentlab.bench.tasks": 6, "agentlab.bench.datasets": 6, "agentlab.bench.scoring": 6,
    "agentlab.bench.store": 6, "agentlab.bench.retention": 6, "agentlab.bench.retrieval": 6,
    "agentlab.bench.running": 6, "agentlab.bench.league": 6,
    "agentlab.bench.cli": 7, "agentlab.bench.__main__": 7,
    "agentlab.notebooks": 7, "agentlab.examples": 7,
}
#: The facade re-exports every layer lazily (strings only); importing it never loads them.
FACADE = "agentlab"


def _unit(module: str) -> str | None:
    """The longest ``LAYERS`` key that ``module`` is or lies under (``None``: unplaced)."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in LAYERS:
            return key
    return None


def _every_import(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Every module ``module`` may import: anywhere in the file, and the values of an ``_EXPORTS`` table."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(_import_targets(node, module, is_package))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS"
                                                   for t in node.targets):
            if isinstance(node.value, ast.Dict):
                found.update(v.value for v in node.value.values
                             if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return found


def _package_graph(root: Path, *, parents: bool = False) -> dict[str, set[str]]:
    """Module -> the agentlab modules it imports (every import, see :func:`_every_import`).

    ``parents``: also keep a module's imports of its own parent packages (``from agentlab.recall
    import X`` inside ``agentlab.recall.search``): the package's ``__init__`` imports its
    submodules, so such an import closes a cycle through the package.
    """
    # Collect first: on CPython 3.11.7 a garbage finalizer that runs during ast.parse (e.g. of a run
    # interrupted by an earlier test) makes it raise 'AST constructor recursion depth mismatch'.
    gc.collect()
    sources = {_module_name(p, root): p for p in (root / "agentlab").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        edges: set[str] = set()
        for target in _every_import(ast.parse(path.read_text()), name, path.name == "__init__.py"):
            parts = target.split(".")
            prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
            if parents:  # the module an import names (the longest prefix that is one), not every package on the way
                edges.update(next(([p] for p in prefixes if p in sources), []))
            else:
                edges.update(prefixes)
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = {t for t in edges
                       if t in sources and t != name and (parents or t not in own) and t != FACADE}
    return graph


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Every edge that goes up a layer, as "a (n) -> b (m)"."""
    found = []
    for name, targets in sorted(graph.items()):
        unit = _unit(name)
        if unit is None:
            continue
        for target in sorted(targets):
            target_unit = _unit(target)
            if target_unit is not None and LAYERS[target_unit] > LAYERS[unit]:
                found.append(f"{name} ({LAYERS[unit]}) -> {target} ({LAYERS[target_unit]})")
    return found


ROOT = Path(__file__).resolve().parents[2]


def test_every_module_has_a_layer() -> None:
    graph = _package_graph(ROOT)
    assert len(graph) > 100, "the graph was not built"
    assert [m for m in graph if m != FACADE and _unit(m) is None] == []


def test_every_bench_package_is_listed() -> None:
    """A new package under ``agentlab/bench/`` gets its own line in ``LAYERS`` (and so its place)."""
    packages = sorted(p.parent.name for p in (ROOT / "agentlab" / "bench").glob("*/__init__.py"))
    assert len(packages) >= 8, packages
    assert [p for p in packages if f"agentlab.bench.{p}" not in LAYERS] == []


def test_nothing_in_the_bench_but_its_entry_point_imports_its_command_line() -> None:
    graph = _package_graph(ROOT)
    callers = sorted(m for m, targets in graph.items() if not m.startswith("agentlab.bench.cli")
                     and any(t == "agentlab.bench.cli" or t.startswith("agentlab.bench.cli.") for t in targets))
    assert "agentlab.bench.__main__" in callers  # the walker sees the one import that must be there
    assert [m for m in callers if m.startswith("agentlab.bench")] == ["agentlab.bench.__main__"]


def test_no_import_goes_up_a_layer_and_no_mechanism_imports_the_runtime() -> None:
    """Imports inside functions and under ``TYPE_CHECKING`` count: they are dependencies all the same."""
    graph = _package_graph(ROOT)
    assert _upward(graph) == []
    mechanisms = [m for m in graph if LAYERS.get(_unit(m) or "", 0) == 4]
    assert "agentlab.summary.mechanism" in mechanisms and "agentlab.compaction" in mechanisms
    assert [(m, t) for m in mechanisms for t in graph[m] if t.startswith("agentlab.runtime")] == []


def test_no_import_cycle_counting_every_import() -> None:
    """Inside ``agentlab.bench`` too: the config/store/tasks circle of the arms issue is gone."""
    assert _cycles(_package_graph(ROOT)) == []


def test_no_module_imports_its_own_package_back() -> None:
    """Every import counted, a submodule's import of its own package included, over the whole package."""
    assert _cycles(_package_graph(ROOT, parents=True)) == []


def test_an_import_of_the_own_package_is_caught(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(ROOT / "agentlab", tmp_path / "agentlab", ignore=shutil.ignore_patterns("__pycache__"))
    render = tmp_path / "agentlab" / "recall" / "render.py"
    render.write_text(render.read_text().replace("from agentlab.recall.policy import ", "from agentlab.recall import ", 1))
    assert _cycles(_package_graph(tmp_path)) == []  # the looser graph does not see it
    assert any("agentlab.recall.render" in c for c in _cycles(_package_graph(tmp_path, parents=True)))


def test_a_planted_upward_import_and_a_planted_cycle_are_caught(tmp_path: Path) -> None:
    """The checks above can fail: a copy of the package with one bad import each is rejected."""
    import shutil

    shutil.copytree(ROOT / "agentlab", tmp_path / "agentlab", ignore=shutil.ignore_patterns("__pycache__"))
    compaction = tmp_path / "agentlab" / "compaction.py"
    compaction.write_text(compaction.read_text() + "\n\ndef _planted() -> None:\n"
                          "    from agentlab.runtime.agent import LLMAgent  # noqa: F401\n")
    core = tmp_path / "agentlab" / "core" / "rules.py"
    core.write_text(core.read_text().replace("from __future__ import annotations\n",
                                             "from __future__ import annotations\n\nfrom typing import TYPE_CHECKING\n"
                                             "if TYPE_CHECKING:\n    import agentlab.summary.mechanism\n", 1))
    graph = _package_graph(tmp_path)
    assert _upward(graph) == ["agentlab.compaction (4) -> agentlab.runtime (5)",
                              "agentlab.compaction (4) -> agentlab.runtime.agent (5)",
                              "agentlab.core.rules (3) -> agentlab.summary (4)",
                              "agentlab.core.rules (3) -> agentlab.summary.mechanism (4)"]
    # core.rules -> summary.mechanism -> ... -> core.rules is a cycle once the type-only import counts
    assert any("agentlab.core.rules" in c and "agentlab.summary.mechanism" in c
               for c in _cycles(graph))
    # a cycle inside bench counts like any other
    assert _cycles({"agentlab.bench.a": {"agentlab.bench.b"}, "agentlab.bench.b": {"agentlab.bench.a"}}) == [
        ["agentlab.bench.a", "agentlab.bench.b"]]
