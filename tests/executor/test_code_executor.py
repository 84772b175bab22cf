"""CodeExecutor: opt-in, workspace staging, timeout, output cap, scrubbed env, cancellation with no process left."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from agentlab.artifacts import ArtifactScope, InMemoryArtifactService
from agentlab.executor import ArtifactRef, CodeExecutor, WorkspaceError, WorkspaceNotEnabled

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the process checks")


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            found.append(int(entry))
    return found


def wait_gone(pgid: int, seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_it_refuses_to_start_without_the_explicit_opt_in() -> None:
    with pytest.raises(WorkspaceNotEnabled, match="workspace_opt_in=True"):
        CodeExecutor()
    with pytest.raises(WorkspaceNotEnabled):
        CodeExecutor(workspace_opt_in="yes")  # type: ignore[arg-type]  # only True opts in


async def test_code_runs_in_a_fresh_workspace_with_staged_inputs_and_outputs_saved_as_artifacts() -> None:
    store = InMemoryArtifactService()
    scope = ArtifactScope(store, "desk", "alice", "s1")
    await scope.save("certs/pay.pem", "CN=pay.example.com\nnot_after=2026-11-29\n")
    executor = CodeExecutor(workspace_opt_in=True, artifacts=scope)
    code = ("import os, pathlib\n"
            "cert = pathlib.Path('in/cert.pem').read_text()\n"
            "pathlib.Path('report.md').write_text('# Report\\n' + cert + open('note.txt').read())\n"
            "print(os.getcwd())\n")
    result = await executor.run(code=code, inputs={"in/cert.pem": ArtifactRef("certs/pay.pem"), "note.txt": "expired"},
                                outputs={"report.md": "user:report.md", "absent.txt": "absent.txt"})
    assert result.ok, result.stderr
    assert result.stdout.strip() == str(Path(result.workspace).resolve())
    assert not Path(result.workspace).exists()  # removed after the run
    assert result.missing_outputs == ("absent.txt",)
    report = await scope.load("user:report.md")
    assert report is not None and report.text == "# Report\nCN=pay.example.com\nnot_after=2026-11-29\nexpired"
    assert result.saved["user:report.md"].revision == 0


async def test_bad_requests_are_refused_before_anything_runs() -> None:
    executor = CodeExecutor(workspace_opt_in=True)
    with pytest.raises(WorkspaceError, match="exactly one"):
        await executor.run()
    with pytest.raises(WorkspaceError, match="not a shell string"):
        await executor.run("ls -l")
    with pytest.raises(WorkspaceError, match="'..' segment"):
        await executor.run(["true"], inputs={"../escape.txt": "x"})
    with pytest.raises(WorkspaceError, match="need CodeExecutor"):
        await executor.run(["true"], outputs=["report.md"])
    scoped = CodeExecutor(workspace_opt_in=True, artifacts=ArtifactScope(InMemoryArtifactService(), "a", "u", "s"))
    with pytest.raises(WorkspaceError, match="no artifact named 'missing.txt'"):
        await scoped.run(["true"], inputs={"x": ArtifactRef("missing.txt")})
    with pytest.raises(WorkspaceError, match="must be > 0"):
        await executor.run(["true"], timeout=0)
    with pytest.raises(WorkspaceError, match="cannot start"):
        await executor.run(["/nonexistent/program"])


async def test_an_output_linked_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("do not copy")
    scope = ArtifactScope(InMemoryArtifactService(), "a", "u", "s")
    executor = CodeExecutor(workspace_opt_in=True, artifacts=scope)
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        await executor.run(code=f"import os; os.symlink({str(secret)!r}, 'report.md')", outputs=["report.md"])
    assert await scope.list() == []


async def test_the_environment_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    result = await CodeExecutor(workspace_opt_in=True).run(
        code="import os, json; print(json.dumps(dict(os.environ)))", env={"CASE": "4711"})
    import json

    seen = json.loads(result.stdout)
    assert "OPENAI_API_KEY" not in seen and "sk-should-not-leak" not in result.stdout
    assert seen["CASE"] == "4711"
    assert seen["HOME"] == result.workspace
    assert set(seen) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "TMPDIR", "PYTHONDONTWRITEBYTECODE",
                         "CASE"}


async def test_output_over_the_cap_is_cut_counted_and_flagged() -> None:
    result = await CodeExecutor(workspace_opt_in=True, max_output_bytes=1000).run(
        code="import sys\nsys.stdout.write('x' * 50000)\nsys.stderr.write('e' * 10)\n")
    assert result.ok
    assert result.stdout == "x" * 1000 and result.stdout_truncated
    assert result.stderr == "e" * 10 and not result.stderr_truncated
    assert result.output_bytes == 50010


async def test_the_timeout_ends_the_run_and_its_background_children() -> None:
    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print('started', flush=True)\n"
            "time.sleep(60)\n")
    started = time.monotonic()
    result = await CodeExecutor(workspace_opt_in=True, kill_grace=0.2).run(code=code, timeout=1.0)
    assert result.timed_out and not result.ok
    assert result.exit_code is not None and result.exit_code < 0  # ended by a signal
    assert result.stdout == "started\n"
    assert time.monotonic() - started < 10


async def test_a_child_left_in_the_background_does_not_outlive_a_normal_exit(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], stdout=subprocess.DEVNULL,"
            " stderr=subprocess.DEVNULL)\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n")
    result = await CodeExecutor(workspace_opt_in=True).run(code=code, timeout=20)
    assert result.ok, result.stderr
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 3
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        stat = Path(f"/proc/{child}/stat").read_text() if Path(f"/proc/{child}/stat").exists() else ""
        if stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]:
            break
        await asyncio.sleep(0.05)
    alive = Path(f"/proc/{child}/stat").exists() and \
        Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    assert not alive


async def test_cancelling_the_run_ends_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "main.pid"
    code = ("import os, subprocess, sys, time\n"
            f"open({str(pid_file)!r}, 'w').write(str(os.getpgid(0)))\n"
            "for _ in range(3):\n"
            "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "time.sleep(60)\n")
    task = asyncio.create_task(CodeExecutor(workspace_opt_in=True, kill_grace=0.2).run(code=code, timeout=60))
    deadline = time.monotonic() + 20
    while (not pid_file.exists() or not pid_file.read_text()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    pgid = int(pid_file.read_text())
    while len(group_members(pgid)) < 4 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert len(group_members(pgid)) == 4  # the script and its three children are running
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wait_gone(pgid) == []
