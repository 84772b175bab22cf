"""Calling ``agentlab.bench.cli.main.main`` in-process, as a user would from the shell."""

from __future__ import annotations

import io
import sys

from agentlab.bench.cli import main as cli


def run_cli(*argv: str) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``python -m agentlab.bench *argv``."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stderr
    sys.stderr = err
    try:
        code = cli.main(list(argv), out=out)
    finally:
        sys.stderr = old
    return code, out.getvalue(), err.getvalue()
