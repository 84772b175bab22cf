"""``CodeExecutor``: run code in a per-run workspace (a temporary folder), as a subprocess.

    executor = CodeExecutor(workspace_opt_in=True)
    result = await executor.run(code="print(open('cert.txt').read())", inputs={"cert.txt": "CN=pay"},
                                timeout=10)
    result.exit_code, result.stdout, result.timed_out

What one :meth:`CodeExecutor.run` does, in order:

1. makes a fresh temporary folder (the *workspace*) and stages ``inputs`` in it — text, bytes,
   or an :class:`ArtifactRef` read from the ``artifacts`` scope (relative paths only; a path that
   walks out of the workspace is refused);
2. starts ``argv`` (a list, never a shell string) — or ``code`` written to a file and run by
   ``language``'s interpreter — with the workspace as its current folder, in a **new process
   group**, with a **scrubbed environment**: only :data:`PASSED_ENV` of this process's variables,
   ``HOME`` and ``TMPDIR`` pointing into the workspace, and the caller's ``env``;
3. reads stdout and stderr as they come, keeping at most ``max_output_bytes`` of each (the rest
   is counted and dropped, so a flood cannot fill memory, and ``*_truncated`` says so);
4. stops at ``timeout`` seconds: SIGTERM to the whole group, then SIGKILL after
   ``kill_grace`` seconds. When the task awaiting ``run`` is cancelled, the same happens before
   the cancellation goes on. When the main process ends, the group is killed too, so a child it
   left in the background does not outlive the run;
5. saves the ``outputs`` that exist as artifacts (``{workspace path: artifact name}``; a file
   linked to outside the workspace is refused) and removes the workspace (``keep_workspace``
   keeps it for debugging).

**Opt-in.** This runs code on this machine with this user's rights. ``CodeExecutor()`` without
``workspace_opt_in=True`` raises :class:`WorkspaceNotEnabled` — nothing starts by accident.

**What it does not isolate.** The workspace is an ordinary folder, not a sandbox: the code can
read and write anything this user can (absolute paths, ``..``), open network connections, use
all CPU and memory (no resource limits), and start a process in a new session (``setsid``) that
escapes the process-group kill. The scrubbed environment hides this process's variables (API
keys), not files that hold secrets. Run untrusted code in a container or VM instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentlab.artifacts.names import ArtifactError, check_name
from agentlab.artifacts.service import ArtifactInfo, ArtifactScope

#: The variables of this process a run sees (everything else is left out).
PASSED_ENV: tuple[str, ...] = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
#: Interpreters of ``code`` by language: (argv before the file, the file's name).
LANGUAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "python": ((sys.executable, "-I"), "main.py"),
    "sh": (("/bin/sh",), "main.sh"),
}
#: Default run time limit, seconds.
DEFAULT_TIMEOUT = 30.0
#: Default cap of each of stdout and stderr, bytes.
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024


class WorkspaceNotEnabled(RuntimeError):
    """A ``CodeExecutor`` built without ``workspace_opt_in=True``."""


class WorkspaceError(ValueError):
    """A bad run request (no command, a path out of the workspace, a missing input artifact)."""


@dataclass(frozen=True)
class ArtifactRef:
    """An input staged from an artifact of the run's scope (the latest revision when ``revision`` is ``None``)."""

    name: str
    revision: int | None = None


@dataclass(frozen=True)
class ExecutionResult:
    """What one run did."""

    argv: tuple[str, ...]
    #: The process's exit code; negative for a signal (POSIX), ``None`` if it was never reaped.
    exit_code: int | None
    stdout: str
    stderr: str
    #: Whether the run was stopped at its timeout.
    timed_out: bool
    #: Whether stdout / stderr went over ``max_output_bytes`` (the kept text is their head).
    stdout_truncated: bool
    stderr_truncated: bool
    #: Bytes the process wrote to stdout and stderr in all (kept or not).
    output_bytes: int
    seconds: float
    #: The outputs saved as artifacts: artifact name -> its new revision's info.
    saved: dict[str, ArtifactInfo] = field(default_factory=dict)
    #: Requested outputs the run did not write.
    missing_outputs: tuple[str, ...] = ()
    #: The workspace folder (removed after the run unless ``keep_workspace``).
    workspace: str = ""

    @property
    def ok(self) -> bool:
        """Exit code 0 and not timed out."""
        return self.exit_code == 0 and not self.timed_out


def scrubbed_env(workspace: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a run: :data:`PASSED_ENV` from this process, home and temp in the workspace, then ``extra``."""
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env.setdefault("PATH", os.defpath)
    tmp = workspace / ".tmp"
    tmp.mkdir(exist_ok=True)
    env.update(HOME=str(workspace), TMPDIR=str(tmp), PYTHONDONTWRITEBYTECODE="1")
    env.update(extra or {})
    return env


def workspace_path(workspace: Path, relative: str) -> Path:
    """``relative`` inside ``workspace`` (links resolved); a path that leaves it is a :class:`WorkspaceError`."""
    try:
        check_name(relative)
    except ArtifactError as exc:
        raise WorkspaceError(f"workspace path: {exc}") from None
    path = workspace / relative
    if not path.resolve().is_relative_to(workspace.resolve()):
        raise WorkspaceError(f"workspace path {relative!r} leads outside the workspace (a link?); refused")
    return path


class _Capped:
    """Reads a stream to its end, keeping its first ``cap`` bytes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.seen = 0

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65536):
            self.seen += len(chunk)
            room = self.cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]

    def text(self) -> str:
        return bytes(self.kept).decode("utf-8", errors="replace")


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class CodeExecutor:
    """Runs code in a per-run workspace (see the module docstring for what it does and does not isolate).

    ``workspace_opt_in`` must be ``True``. ``timeout`` (seconds) and ``max_output_bytes`` (per
    stream) are the defaults of every run; ``kill_grace`` the seconds between SIGTERM and SIGKILL;
    ``artifacts`` the scope inputs are read from and outputs saved to; ``keep_workspace`` leaves
    the folder in place after the run.
    """

    def __init__(self, *, workspace_opt_in: bool = False, timeout: float = DEFAULT_TIMEOUT,
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES, kill_grace: float = 1.0,
                 artifacts: ArtifactScope | None = None, keep_workspace: bool = False) -> None:
        if workspace_opt_in is not True:
            raise WorkspaceNotEnabled(
                "CodeExecutor runs code on this machine with your user's rights and no sandbox (no network or "
                "filesystem isolation); pass workspace_opt_in=True to allow it")
        if timeout <= 0 or max_output_bytes <= 0 or kill_grace < 0:
            raise ValueError("CodeExecutor: timeout and max_output_bytes must be > 0, kill_grace >= 0")
        self.timeout = timeout
        self.max_output_bytes = max_output_bytes
        self.kill_grace = kill_grace
        self.artifacts = artifacts
        self.keep_workspace = keep_workspace

    async def run(self, argv: Sequence[str] | None = None, *, code: str | None = None, language: str = "python",
                  inputs: Mapping[str, str | bytes | ArtifactRef] | None = None,
                  outputs: Mapping[str, str] | Sequence[str] = (), timeout: float | None = None,
                  env: Mapping[str, str] | None = None, max_output_bytes: int | None = None) -> ExecutionResult:
        """Run ``argv`` (or ``code`` in ``language``) in a new workspace; see the module docstring.

        ``outputs`` is ``{workspace path: artifact name}``, or a list of paths saved under their own
        names; saving needs an ``artifacts`` scope. Bad requests raise :class:`WorkspaceError`
        before anything starts.
        """
        if (argv is None) == (code is None):
            raise WorkspaceError("CodeExecutor.run: give argv (a list) or code, exactly one")
        if isinstance(argv, str):
            raise WorkspaceError("CodeExecutor.run: argv is a list of arguments, not a shell string")
        if (timeout is not None and timeout <= 0) or (max_output_bytes is not None and max_output_bytes <= 0):
            raise WorkspaceError("CodeExecutor.run: timeout and max_output_bytes must be > 0")
        if code is not None and language not in LANGUAGES:
            raise WorkspaceError(f"CodeExecutor.run: unknown language {language!r}; one of {', '.join(LANGUAGES)}")
        wanted = dict(outputs) if isinstance(outputs, Mapping) else {p: p for p in outputs}
        needs_scope = bool(wanted) or any(isinstance(v, ArtifactRef) for v in (inputs or {}).values())
        if needs_scope and self.artifacts is None:
            raise WorkspaceError("CodeExecutor.run: artifact inputs or outputs need CodeExecutor(artifacts=ArtifactScope(...))")
        for name in wanted.values():
            check_name(name)
        workspace = Path(tempfile.mkdtemp(prefix="agentlab-workspace-"))
        try:
            await self._stage(workspace, inputs or {})
            if code is not None:
                prefix, filename = LANGUAGES[language]
                (workspace / filename).write_text(code, encoding="utf-8")
                command: tuple[str, ...] = (*prefix, filename)
            else:
                command = tuple(str(a) for a in argv or ())
                if not command:
                    raise WorkspaceError("CodeExecutor.run: argv is empty")
            result = await self._execute(command, workspace, timeout or self.timeout,
                                         max_output_bytes or self.max_output_bytes, env)
            saved, missing = await self._save_outputs(workspace, wanted)
            return replace(result, saved=saved, missing_outputs=tuple(missing), workspace=str(workspace))
        finally:
            if not self.keep_workspace:
                shutil.rmtree(workspace, ignore_errors=True)

    def run_sync(self, argv: Sequence[str] | None = None, **kwargs: Any) -> ExecutionResult:
        """:meth:`run` for code without an event loop."""
        return asyncio.run(self.run(argv, **kwargs))

    async def _stage(self, workspace: Path, inputs: Mapping[str, str | bytes | ArtifactRef]) -> None:
        for relative, value in inputs.items():
            path = workspace_path(workspace, relative)
            if isinstance(value, ArtifactRef):
                assert self.artifacts is not None
                try:
                    data: bytes = (await self.artifacts.require(value.name, value.revision)).data
                except ArtifactError as exc:
                    raise WorkspaceError(f"input {relative!r}: {exc}") from None
            elif isinstance(value, str):
                data = value.encode("utf-8")
            else:
                data = bytes(value)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    async def _execute(self, command: tuple[str, ...], workspace: Path, timeout: float, cap: int,
                       env: Mapping[str, str] | None) -> ExecutionResult:
        started = time.perf_counter()
        try:
            process = await asyncio.create_subprocess_exec(
                *command, cwd=workspace, env=scrubbed_env(workspace, env), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise WorkspaceError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
        out, err = _Capped(cap), _Capped(cap)
        readers = asyncio.gather(out.drain(process.stdout), err.drain(process.stderr))
        timed_out = False
        try:
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except asyncio.TimeoutError:
                timed_out = True
                await self._stop(process)
        except BaseException:  # cancelled (or anything else): end the whole group before going on
            await asyncio.shield(self._stop(process))
            readers.cancel()
            raise
        finally:
            _kill_group(process.pid, signal.SIGKILL)  # whatever the main process left in the background
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(readers, max(1.0, self.kill_grace))
        return ExecutionResult(argv=command, exit_code=process.returncode, stdout=out.text(), stderr=err.text(),
                               timed_out=timed_out, stdout_truncated=out.seen > cap, stderr_truncated=err.seen > cap,
                               output_bytes=out.seen + err.seen, seconds=time.perf_counter() - started)

    async def _stop(self, process: asyncio.subprocess.Process) -> None:
        """SIGTERM to the group, SIGKILL after the grace period, then reap the main process."""
        _kill_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), self.kill_grace)
        except asyncio.TimeoutError:
            pass
        _kill_group(process.pid, signal.SIGKILL)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(process.wait(), 5.0)

    async def _save_outputs(self, workspace: Path, wanted: Mapping[str, str]) -> tuple[dict[str, ArtifactInfo], list[str]]:
        saved: dict[str, ArtifactInfo] = {}
        missing: list[str] = []
        for relative, name in wanted.items():
            path = workspace_path(workspace, relative)
            if not path.is_file():
                missing.append(relative)
                continue
            assert self.artifacts is not None
            saved[name] = await self.artifacts.save(name, path.read_bytes())
        return saved, missing


__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_TIMEOUT",
    "LANGUAGES",
    "PASSED_ENV",
    "ArtifactRef",
    "CodeExecutor",
    "ExecutionResult",
    "WorkspaceError",
    "WorkspaceNotEnabled",
    "scrubbed_env",
    "workspace_path",
]
