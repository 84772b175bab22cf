"""A graph run killed with ``kill -9`` mid-graph resumes at the next node: every side effect once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

from agentlab.session.duckdb import DuckDBSessionService

SCRIPT = textwrap.dedent('''
    import asyncio, os, sys
    from agentlab.runtime import FunctionTool, Runner
    from agentlab.runtime.graph import END, START, GraphAgent, Key, StateGraph, StateSchema, ToolNode, append
    from agentlab.session.duckdb import DuckDBSessionService

    DB, LEDGER, HOLD = sys.argv[1], sys.argv[2], sys.argv[3]

    def record(step: str) -> str:
        """Record a side effect.

        Args:
            step: Which step.
        """
        with open(LEDGER, "a") as f:
            f.write(step + "\\n")
        return "recorded " + step

    def effect(name):
        def node(state):
            record(name)
            return {"done": name}
        return node

    async def held(state):
        if os.path.exists(HOLD):
            print("HOLDING", flush=True)
            await asyncio.sleep(3600)
        record("c")
        return {"done": "c"}

    g = StateGraph(StateSchema({"input": Key(str), "done": Key(list, append, [])}))
    g.add_node("a", effect("a"))
    g.add_node("b", ToolNode(FunctionTool(record), lambda s: {"step": "b"}, "done"))
    g.add_node("c", held)
    g.add_node("d", ToolNode(FunctionTool(record), lambda s: {"step": "d"}, "done"))
    for x, y in [(START, "a"), ("a", "b"), ("b", "c"), ("c", "d"), ("d", END)]:
        g.add_edge(x, y)

    async def main():
        svc = DuckDBSessionService(DB)
        runner = Runner("app", GraphAgent("job", g.compile()), svc)
        await runner.ask("u", "s", sys.argv[4])
        await svc.close()
        print("FINISHED", flush=True)

    asyncio.run(main())
''')


def test_kill_9_mid_graph_then_resume_runs_each_node_once(tmp_path):
    script = tmp_path / "graph_job.py"
    script.write_text(SCRIPT)
    db, ledger, hold = tmp_path / "s.duckdb", tmp_path / "ledger.txt", tmp_path / "hold"
    hold.write_text("")
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    args = [sys.executable, str(script), str(db), str(ledger), str(hold)]
    child = subprocess.Popen([*args, "start"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and "HOLDING" not in line:
            line = child.stdout.readline()
            if not line and child.poll() is not None:
                break
        assert "HOLDING" in line, "the child never reached node c"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert ledger.read_text().split() == ["a", "b"]

    hold.unlink()
    done = subprocess.run([*args, "resume"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "FINISHED" in done.stdout
    assert ledger.read_text().split() == ["a", "b", "c", "d"]  # each side effect exactly once

    session = asyncio.run(_read(db))
    phases = [(e.metadata.get("phase"), e.metadata.get("node")) for e in session.events]
    assert [n for p, n in phases if p == "node_finish"] == ["a", "b", "c", "d"]
    assert [n for p, n in phases if p == "node_start"] == ["a", "b", "c", "c", "d"]
    assert ("run_resume", None) in phases
    assert session.state["graph:job"]["status"] == "done"
    assert session.state["graph:job"]["state"]["done"] == ["a", "recorded b", "c", "recorded d"]


async def _read(db):
    svc = DuckDBSessionService(db)
    try:
        return await svc.get_session("app", "u", "s")
    finally:
        await svc.close()
