"""The client libraries the serve tests drive are a test-only extra; agentlab never imports them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

CLIENT_MODULES = ("agents", "langchain_openai", "langchain_core")

SCRIPT = f"""
import importlib, importlib.abc, pkgutil, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {CLIENT_MODULES!r}:
            raise ImportError(f"{{name}} is blocked: a test-only client")
        return None

sys.meta_path.insert(0, Block())
import agentlab.serve
for info in pkgutil.walk_packages(agentlab.serve.__path__, "agentlab.serve."):
    importlib.import_module(info.name)
from agentlab.serve.__main__ import main
print("ok")
"""


def test_clients_are_an_extra_not_a_dependency() -> None:
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    extra = " ".join(project["optional-dependencies"]["clients"])
    for package in ("openai-agents", "langchain-openai"):
        assert package not in core and package in extra


def test_serve_imports_without_the_clients() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")
