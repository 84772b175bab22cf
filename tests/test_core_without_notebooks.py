"""The core package works without the notebook stack (``agentlab[notebooks]``), as on a cluster node.

A subprocess makes matplotlib, ipywidgets, IPython and Jupyter unimportable, then imports every
agentlab module except the notebook-only package ``agentlab.notebooks`` and runs the CLI: an import of the notebook
stack at module level anywhere else fails this test.
"""

from __future__ import annotations

import subprocess
import sys

NOTEBOOK_ONLY = "agentlab.notebooks"

SCRIPT = f"""
import importlib, importlib.abc, pkgutil, sys

BLOCKED = ("matplotlib", "ipywidgets", "IPython", "jupyterlab", "jupyter_server", "ipykernel", "notebook")

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is blocked: the notebook stack is not installed")
        return None

sys.meta_path.insert(0, Block())
import agentlab
imported = 0
for info in pkgutil.walk_packages(agentlab.__path__, "agentlab."):
    if info.name.startswith({NOTEBOOK_ONLY + "."!r}) or info.name.endswith(".__main__"):
        continue
    importlib.import_module(info.name)
    imported += 1
from agentlab.bench.cli import main as cli
assert cli.main(["list"]) == 0
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not loaded, loaded
print("imported", imported)
"""


def test_core_modules_import_without_the_notebook_stack() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.strip().splitlines()[-1].split()[1]) > 40  # it really walked the package
