"""Packages that only tests use live in the ``dev`` extra, and the library never imports them.

``bm25s`` is the reference our own BM25 (``agentlab/recall/index.py``) is checked against; a user
installing agentlab should not get it. A subprocess makes it unimportable and imports every
agentlab module (the notebook-only ones too: they must not need it either).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

TEST_ONLY = ("bm25s", "playwright")

SCRIPT = f"""
import importlib, importlib.abc, pkgutil, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {TEST_ONLY!r}:
            raise ImportError(f"{{name}} is blocked: a test-only package")
        return None

sys.meta_path.insert(0, Block())
import agentlab
imported = 0
for info in pkgutil.walk_packages(agentlab.__path__, "agentlab."):
    if info.name.endswith(".__main__"):
        continue
    importlib.import_module(info.name)
    imported += 1
print("imported", imported)
"""


def _name(requirement: str) -> str:
    return requirement.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()


def test_test_only_packages_are_dev_extras_not_core_dependencies() -> None:
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    # The test-only extras: dev, and ui (the browser driver of tests/ui/, installed by make test-ui).
    test_only = {_name(r) for extra in ("dev", "ui") for r in project["optional-dependencies"][extra]}
    for package in TEST_ONLY:
        assert package not in core and package in test_only, package


def test_every_module_imports_without_test_only_packages() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 40
