"""A Runner in a second process, on the same DuckDB file, reopens the session with every event."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import FunctionTool, LLMAgent, Runner
from agentlab.session.duckdb import DuckDBSessionService


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value-of-{key}"


async def test_second_process_reopens_session_with_every_event(tmp_path):
    db = tmp_path / "sessions.duckdb"
    svc = DuckDBSessionService(db)
    model = ScriptedModel([ScriptedModel.tool_call("lookup", {"key": "cert"}, id="c1"), "day one answer"])
    runner = Runner("app", LLMAgent("a", model, tools=[FunctionTool(lookup)]), svc)
    await runner.ask("u", "case-1", "day one question")
    await svc.close()

    script = textwrap.dedent(f"""
        import asyncio, json
        from agentlab.model.scripted import ScriptedModel
        from agentlab.runtime import LLMAgent, Runner
        from agentlab.session.duckdb import DuckDBSessionService

        async def main():
            svc = DuckDBSessionService({str(db)!r})
            model = ScriptedModel(["day two answer"])
            runner = Runner("app", LLMAgent("a", model), svc)
            await runner.ask("u", "case-1", "the same error as yesterday")
            seen = [m.content for m in model.requests[0].messages]
            session = await svc.get_session("app", "u", "case-1")
            await svc.close()
            print(json.dumps({{"seen": seen, "roles": [e.role for e in session.events]}}))

        asyncio.run(main())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["roles"] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    # the day-2 model call was built from day 1's ledger
    assert result["seen"][:1] == ["day one question"]
    assert "value-of-cert" in result["seen"] and result["seen"][-1] == "the same error as yesterday"
