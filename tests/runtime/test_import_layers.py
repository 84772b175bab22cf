"""Components import the projection types without loading the agent and runner (no import cycle)."""

from __future__ import annotations

import ast
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


# ----------------------------------------------------------------------------- issue 16: layers

#: Modules the runtime builds on: they must load without any part of ``agentlab.runtime``.
COMPONENTS = ["agentlab.projection", "agentlab.summary", "agentlab.recall", "agentlab.recall.tools",
              "agentlab.recall.preload", "agentlab.compaction", "agentlab.memory", "agentlab.memory.preload",
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


def _import_time_imports(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Modules imported while ``module`` itself is being imported (not in functions, not for type checkers)."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names)
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
    layers = ("agentlab.runtime", "agentlab.projection", "agentlab.summary", "agentlab.recall",
              "agentlab.compaction", "agentlab.memory")
    touching = [c for c in cycles if any(m == p or m.startswith(p + ".") for m in c for p in layers)]
    assert graph["agentlab.projection"], "the graph was not built (no imports found)"
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
