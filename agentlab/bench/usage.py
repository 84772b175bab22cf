"""What every command of the bench shares below the CLI: the user-error type and the two ways it prints.

:class:`UsageError` is a mistake in what a run, a league or a table asks for (a flag out of range,
an unknown arm, a metric the runs do not score). The layers under the CLI (:mod:`agentlab.bench.spec`,
:mod:`agentlab.bench.league`, :mod:`agentlab.bench.retention`, :mod:`agentlab.bench.running`) raise
it; ``python -m agentlab.bench`` prints its message as one line (``error: …``, exit status 2),
exactly as it prints its own errors.
"""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

#: What ``--variant NAME`` may contain (it is shown in tables and typed back into ``--variant``).
VARIANT_NAME = re.compile(r"[A-Za-z0-9_.=;:+,-]+")
#: Cases run with the embedded model when no --limit is given.
EMBEDDED_DEFAULT_LIMIT = 5


class UsageError(ValueError):
    """A user's mistake in what a command asks for: printed by the CLI as one line, exit status 2."""


def print_json(obj: Any, out: TextIO) -> None:
    """Write ``obj`` to ``out`` as indented JSON (non-ASCII kept, anything else as its ``str``)."""
    out.write(json.dumps(obj, ensure_ascii=False, indent=1, default=str) + "\n")


def print_banner(text: str, out: TextIO) -> None:
    """Write ``text`` to ``out`` framed by lines of ``!``: a notice the reader must not miss."""
    line = "!" * min(100, max(40, len(text) + 8))
    out.write(f"{line}\n!!! {text}\n{line}\n")
