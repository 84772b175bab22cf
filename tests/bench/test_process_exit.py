"""``python -m agentlab.bench`` ends right after its work is stored (agentlab.bench.running.process_exit):
what a normal exit does that matters still happens, and the exit waits whenever a normal one would.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(tmp_path)], capture_output=True,
                          text=True, timeout=120, check=False, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_finish_writes_caches_runs_atexit_and_keeps_the_code(tmp_path: Path) -> None:
    done = _python("""
        import atexit, sys
        from pathlib import Path
        from agentlab.bench.running.process_exit import finish
        from agentlab.events import Message, Usage
        from agentlab.model.base import ModelRequest, ModelResponse
        from agentlab.model.cache import CallCache

        folder = Path(sys.argv[1])
        cache = CallCache(folder / "cache.duckdb")
        request = ModelRequest([Message.user("q")])
        cache.put(request.cache_key("m"), ModelResponse(Message.assistant("a"), Usage(3, 1), "m"), request, "m")
        atexit.register(lambda: (folder / "atexit-ran").write_text("yes"))
        print("buffered line", end="")  # no newline: still in the buffer when finish() is called
        finish(3)
    """, tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered line"
    assert (tmp_path / "atexit-ran").read_text() == "yes"
    assert not (tmp_path / "cache.duckdb.wal").exists()  # closed and checkpointed, as a normal exit leaves it
    con = duckdb.connect(str(tmp_path / "cache.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM call_cache").fetchone() == (1,)
    con.close()


def test_finish_waits_for_a_running_non_daemon_thread(tmp_path: Path) -> None:
    done = _python("""
        import sys, threading, time
        from pathlib import Path
        from agentlab.bench.running.process_exit import finish

        def late() -> None:
            time.sleep(0.5)
            (Path(sys.argv[1]) / "thread-done").write_text("yes")

        threading.Thread(target=late).start()
        finish(0)
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "thread-done").read_text() == "yes"


def test_the_command_line_exits_with_main_s_status() -> None:
    bad = subprocess.run([sys.executable, "-m", "agentlab.bench", "no_such_benchmark"], capture_output=True, text=True,
                         timeout=120, check=False, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown benchmark")
    listed = subprocess.run([sys.executable, "-m", "agentlab.bench", "list"], capture_output=True, text=True,
                            timeout=120, check=False, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert listed.returncode == 0 and "mtbench101" in listed.stdout
