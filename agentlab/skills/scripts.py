"""Running one skill script: a subprocess with a timeout, an output cap and a scrubbed environment.

This is the one place a skill's script is executed. It is a stand-in for the code workspace that
agentlab's artifacts work is adding (a ``CodeExecutor``, docs/sources.md#skills-and-evolution):
when that lands, :func:`run_script` is the function to swap for a call into it, and nothing else
in the skills package needs to change.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Environment variables a script inherits (everything else is dropped: no credentials leak in).
KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


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
    """Run the script at ``path`` in a fresh temporary folder and return its combined output.

    The child runs in its own process group (``start_new_session``), so on timeout the whole group
    — the script and anything it started — is killed; stdout and stderr are merged and cut at
    ``output_cap_bytes``; the environment holds only :data:`KEPT_ENV`, ``HOME`` and ``TMPDIR``
    (the temporary folder) and ``extra_env``. The folder is removed afterwards.

    Replace this function with a call into the code workspace's executor when one exists (the
    seed's CodeExecutor); its callers only need a :class:`ScriptResult`.
    """
    command = _command(path, list(args or []))
    with tempfile.TemporaryDirectory(prefix="skill-run-") as work:
        env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
        env.update({"HOME": work, "TMPDIR": work, **(extra_env or {})})
        process = await asyncio.create_subprocess_exec(
            *command, cwd=work, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        assert process.stdout is not None
        stream = process.stdout
        chunks: list[bytes] = []
        size = 0
        truncated = False

        async def read_capped() -> None:
            nonlocal size, truncated
            while True:
                block = await stream.read(4096)
                if not block:
                    return
                if size < output_cap_bytes:
                    chunks.append(block[: output_cap_bytes - size])
                if size + len(block) > output_cap_bytes:
                    truncated = True
                size += len(block)

        timed_out = False
        try:
            await asyncio.wait_for(asyncio.gather(read_capped(), process.wait()), timeout_seconds)
        except asyncio.TimeoutError:
            timed_out = True
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await process.wait()
        output = b"".join(chunks).decode("utf-8", errors="replace")
        return ScriptResult(exit_code=None if timed_out else process.returncode, output=output,
                            timed_out=timed_out, truncated=truncated)


__all__ = ["KEPT_ENV", "ScriptResult", "run_script"]
