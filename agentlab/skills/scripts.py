"""Running one skill script in the code workspace (:class:`agentlab.executor.CodeExecutor`).

This is the one place a skill's script is executed: a subprocess in a per-run temporary folder
with a timeout, an output cap, a scrubbed environment and a process-group kill. What the workspace
does not isolate (files, network, CPU and memory) is said in :mod:`agentlab.executor`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from agentlab.executor import CodeExecutor


@dataclass(frozen=True)
class ScriptResult:
    """What one script run produced."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False

    def render(self) -> str:
        """The result as the model reads it."""
        head = ("timed out (the process group was killed)" if self.timed_out
                else f"exit code {self.exit_code}")
        tail = "\n[output truncated]" if self.truncated else ""
        return f"{head}\n{self.output}{tail}".rstrip("\n")


def _command(path: Path, args: list[str]) -> list[str]:
    if path.suffix == ".py":
        return [sys.executable, str(path), *args]
    if path.suffix == ".sh":
        return ["/bin/sh", str(path), *args]
    if os.access(path, os.X_OK):
        return [str(path), *args]
    raise ValueError(f"{path.name} is neither .py, .sh nor executable; make it executable or use one of those")


async def run_script(path: Path, args: list[str] | None = None, *, timeout_seconds: float = 30.0,
                     output_cap_bytes: int = 16_000, extra_env: dict[str, str] | None = None) -> ScriptResult:
    """Run the script at ``path`` in the code workspace and return its output (stdout, then stderr).

    The run is :class:`agentlab.executor.CodeExecutor`'s: a fresh temporary folder as the current
    folder, a new process group killed whole on timeout (the script and anything it started), a
    scrubbed environment (:data:`agentlab.executor.workspace.PASSED_ENV`, ``HOME`` and ``TMPDIR`` in the
    workspace, and ``extra_env``), each stream cut at ``output_cap_bytes``. The skills profile that
    offers ``skill_run`` (``workspace``) is the opt-in the executor asks for.
    """
    command = _command(path, list(args or []))
    executor = CodeExecutor(workspace_opt_in=True, timeout=timeout_seconds, max_output_bytes=output_cap_bytes)
    result = await executor.run(command, env=extra_env)
    output = result.stdout + result.stderr
    truncated = result.stdout_truncated or result.stderr_truncated or len(output) > output_cap_bytes
    return ScriptResult(exit_code=None if result.timed_out else result.exit_code,
                        output=output[:output_cap_bytes], timed_out=result.timed_out, truncated=truncated)


__all__ = ["ScriptResult", "run_script"]
