"""Importing a peer's package in a differential test: skip when it is absent, or fail.

Plain ``make test`` runs without the ``peers`` extra: a missing package skips the module with the
reason. ``make test-peers`` sets ``AGENTLAB_REQUIRE_PEERS=1``, which turns that skip into a
failure, so a broken install cannot pass as "all skipped".
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

REQUIRE_ENV = "AGENTLAB_REQUIRE_PEERS"


def require(module: str, package: str) -> ModuleType:
    """``module`` imported, else a skip (or, under ``AGENTLAB_REQUIRE_PEERS=1``, a failure)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = (f"peer package {package!r} is not installed ({exc}); install the test-only extra "
                  f"with `pip install -e '.[peers]'` or run `make test-peers`")
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason, allow_module_level=True)
        raise  # unreachable: skip raises
