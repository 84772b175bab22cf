"""The bench is a house the next maintainer can read: packages by job, a small public face, no private reach.

* at most six modules at ``agentlab/bench/``'s top level besides ``__init__`` and ``__main__``;
* no module of ``agentlab/`` imports another module's private name (``from x import _name``);
* only the command line (``agentlab/bench/cli/``) knows its ``CliError``: the layers below raise
  :class:`agentlab.bench.usage.UsageError`, which the CLI prints the same one-line way;
* the old flat module paths are gone, with no shim left behind.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

import agentlab
from agentlab.bench.usage import UsageError

PACKAGE = Path(agentlab.__file__).resolve().parent
BENCH = PACKAGE / "bench"
TOP_LEVEL_LIMIT = 6


def test_the_bench_top_level_holds_at_most_six_modules() -> None:
    modules = sorted(p.name for p in BENCH.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    packages = sorted(p.parent.name for p in BENCH.glob("*/__init__.py"))
    assert {"cli", "tasks", "datasets", "store"} <= set(packages)  # the packages were found
    assert len(modules) <= TOP_LEVEL_LIMIT, f"move these into the packages {packages}: {modules}"


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_imports(source: str, module: str, is_package: bool) -> list[str]:
    """``from x import _name`` of ``module`` whose ``x`` is another module, as ``"module <- x._name"``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        if target == module:
            continue
        found += [f"{module} <- {target}.{a.name}" for a in node.names
                  if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 100
    found = [hit for f in files for hit in private_imports(f.read_text(encoding="utf-8"), _module_of(f),
                                                            f.name == "__init__.py")]
    assert found == [], f"make these public in the module that owns them (or move them): {found}"


def test_the_private_import_scan_can_fail() -> None:
    assert private_imports("from agentlab.bench.cli.run import _x, y\n", "agentlab.bench.league.play", False) == [
        "agentlab.bench.league.play <- agentlab.bench.cli.run._x"]
    assert private_imports("def f():\n    from .rows import _piece\n", "agentlab.bench.retention.questions", False) == [
        "agentlab.bench.retention.questions <- agentlab.bench.retention.rows._piece"]
    assert private_imports("from __future__ import annotations\nfrom x import __version__\n", "a.b", False) == []


def test_only_the_command_line_knows_its_error() -> None:
    users = sorted(p.relative_to(BENCH).as_posix() for p in BENCH.rglob("*.py")
                   if "CliError" in p.read_text(encoding="utf-8"))
    assert "cli/common.py" in users  # its home was scanned
    assert [u for u in users if not u.startswith("cli/")] == []


def test_a_usage_error_below_the_cli_prints_as_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from agentlab.bench.cli.main import main

    assert issubclass(UsageError, ValueError)
    assert main(["qmsum", "--dry-run", "--limit", "-1"]) == 2  # spec.py raises it
    assert capsys.readouterr().err == "error: --limit must be >= 0 (0 = all cases), got -1\n"


@pytest.mark.parametrize("old", ["cli_run", "cli_common", "store", "store_schema", "league_table", "executor",
                                 "metrics", "retention_rows", "locomo_retrieval", "arms", "trajectory_store"])
def test_the_old_flat_paths_are_gone(old: str) -> None:
    assert not (BENCH / f"{old}.py").exists()
    spec = importlib.util.find_spec(f"agentlab.bench.{old}")
    assert spec is None or spec.submodule_search_locations  # a package of that name, never a module shim


def test_the_layout_page_names_every_module_of_the_bench_packages() -> None:
    text = (PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    jobs = ("cli", "running", "scoring", "store", "retention", "retrieval", "league")
    missing = []
    for job in jobs:
        block = text.split(f"  bench/{job}/", 1)[1].split("\n  bench/", 1)[0].split("\nagentlab/", 1)[0]
        missing += [f"{job}/{p.name}" for p in sorted((BENCH / job).glob("*.py"))
                    if p.name != "__init__.py" and not re.search(rf"(?<![\w/]){re.escape(p.name)}", block)]
    top = [p.name for p in BENCH.glob("*.py") if p.name not in ("__init__.py", "__main__.py") and p.name not in text]
    assert missing + top == [], "docs/layout.md: describe these in their package's line"
