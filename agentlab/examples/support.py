"""The support investigation of tRPC-Agent-Go's design story, runnable: workspace, artifact, next session.

Day 1 (ticket ``ticket-4711``): a user reports a TLS error. The agent runs its certificate
diagnostic in a code workspace (:class:`agentlab.executor.CodeExecutor`: the certificate staged as
an input file, a fixed script run as a subprocess with a timeout), and the report the script
writes is saved as the user-scoped artifact ``user:reports/pay.example.com.md``. The session keeps
the action and its short visible result (status, artifact name and revision), not the report.
Day 2 (a *new process* and a new ticket, ``ticket-4712``): the user says "the same error as
yesterday"; the agent loads yesterday's report with ``artifact_load`` — the artifact outlived
its session — and answers from it.

Run it twice in a row on the same folder::

    python -m agentlab.examples.support            # day 1 (first run), then day 2 (second run)
    python -m agentlab.examples.support --db /tmp/support.duckdb --model openai:gpt-4o-mini

Sessions go to ``--db``; artifacts to the folder beside it (``<db stem>-artifacts/``: files plus
their DuckDB metadata). The diagnostic and the report load are deterministic steps (that design's
point: such steps must not depend on model improvisation), so they run even on the tiny embedded
model, which rarely calls tools on its own. Each is still a real tool call, persisted as an
assistant tool call and its result, and the model answers from them. The workspace runs only the
example's own fixed script; see :mod:`agentlab.executor.workspace` for what it does not isolate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

from agentlab.artifacts import ArtifactScope
from agentlab.artifacts.duckdb import DuckDBArtifactService
from agentlab.artifacts.tools import ArtifactLoadTool, ArtifactTools, artifact_scope
from agentlab.events import OBJ_TOOL_RESPONSE, Event, Message, ToolCall, new_id
from agentlab.executor import ArtifactRef, CodeExecutor
from agentlab.model.base import GenerationConfig, Model
from agentlab.runtime import FunctionTool, Invocation, LLMAgent, Runner, ToolContext
from agentlab.session.base import Session
from agentlab.session.duckdb import DuckDBSessionService

APP = "support-desk"
USER = "alice"
DAY1_SESSION = "ticket-4711"
DAY2_SESSION = "ticket-4712"
HOST = "pay.example.com"
#: The user-scoped artifact the diagnostic writes and the next ticket loads.
REPORT = f"user:reports/{HOST}.md"

DAY1_MESSAGE = "Our payment API started failing TLS handshakes this morning. What is wrong?"
DAY2_MESSAGE = "The same error as yesterday. Is it still the certificate?"

INSTRUCTION = (
    "You are a support engineer. Answer in two short sentences, using the diagnostic results "
    "in the conversation."
)

#: The diagnostic the workspace runs: reads the staged certificate, writes the report, prints the status.
DIAGNOSTIC_SCRIPT = """\
import json, datetime
cert = json.load(open("cert.json"))
expires = datetime.datetime.fromisoformat(cert["not_after"].replace("Z", "+00:00"))
now = datetime.datetime.now(datetime.timezone.utc)
status = "EXPIRED" if expires <= now else "VALID"
days = (expires - now).days
lines = [f"# TLS diagnostic for {cert['host']}", "",
         f"- subject: {cert['subject']}", f"- issuer: {cert['issuer']}",
         f"- not after: {cert['not_after']}", f"- status: {status} ({days} days)", "",
         "Renew the certificate from the internal CA and reload the TLS terminator." if status == "EXPIRED"
         else "The certificate is valid; look at the cipher and protocol settings next."]
open("report.md", "w").write("\\n".join(lines) + "\\n")
print(status)
"""


def read_certificate(host: str) -> dict[str, str]:
    """Read the TLS certificate a host presents.

    Args:
        host: The host name to inspect.
    """
    return {
        "host": host,
        "subject": f"CN={host}",
        "issuer": "CN=Example Internal CA",
        "not_after": "2026-11-29T00:00:00Z",
        "status": "EXPIRED",
    }


async def run_diagnostic(host: str, ctx: ToolContext) -> dict[str, Any]:
    """Run the certificate diagnostic for a host in a code workspace and save its report as an artifact.

    Args:
        host: The host name to diagnose.
    """
    scope = artifact_scope(ctx.invocation)
    await scope.save(f"certs/{host}.json", json.dumps(read_certificate(host)))
    # The explicit opt-in: this example runs its own fixed script, nothing the model wrote.
    executor = CodeExecutor(workspace_opt_in=True, artifacts=scope, timeout=30)
    result = await executor.run(code=DIAGNOSTIC_SCRIPT, inputs={"cert.json": ArtifactRef(f"certs/{host}.json")},
                                outputs={"report.md": f"user:reports/{host}.md"})
    if not result.ok:
        return {"host": host, "error": (result.stderr or "the diagnostic failed").strip()[-500:]}
    info = result.saved[f"user:reports/{host}.md"]
    return {"host": host, "status": result.stdout.strip(), "report": info.name, "revision": info.revision,
            "bytes": info.size}


class SupportAgent:
    """Deterministic steps (the diagnostic on day 1, the report load on day 2), then the LLM loop answers."""

    def __init__(self, model: Model) -> None:
        self.name = "support"
        self.diagnostic = FunctionTool(run_diagnostic)
        self.load = ArtifactLoadTool()
        self.llm = LLMAgent(
            "support",
            model,
            instruction=INSTRUCTION,
            tools=[self.diagnostic],
            mechanisms=[ArtifactTools(save=False)],
            generation=GenerationConfig(temperature=0.0, max_tokens=96),
            max_tool_iterations=2,
        )
        self.model = model
        self.summary = None
        self.memory = None

    def context_mechanisms(self) -> list[Any]:
        """The LLM loop's mechanisms (the artifact tools), so the Runner opens them."""
        return self.llm.context_mechanisms()

    async def run(self, inv: Invocation) -> AsyncIterator[Event]:
        """Once per ticket: load the user's earlier report when there is one, else run the diagnostic;
        then let the LLM loop answer from the conversation.
        """
        if not _already_diagnosed(inv.session):
            earlier = await artifact_scope(inv).load(REPORT)
            if earlier is None:
                step = self._step(inv, self.diagnostic, {"host": HOST})
            else:
                step = self._step(inv, self.load, {"name": REPORT})
            async for event in step:
                yield event
        async for event in self.llm.run(inv):
            yield event

    async def _step(self, inv: Invocation, tool: Any, arguments: dict[str, Any]) -> AsyncIterator[Event]:
        call = ToolCall(id=new_id("call-"), name=tool.name, arguments=json.dumps(arguments))
        yield Event(author=self.name, choices=[Message.assistant("", [call])],
                    invocation_id=inv.id, request_id=inv.request_id)
        result = await tool.call(call.parsed_arguments(), ToolContext(inv, call.id, call.name))
        yield Event(author=self.name, object=OBJ_TOOL_RESPONSE,
                    choices=[Message.tool(call.id, call.name, json.dumps(result))],
                    invocation_id=inv.id, request_id=inv.request_id)


def _already_diagnosed(session: Session) -> bool:
    return any(e.is_tool_result() for e in session.events)


def print_ledger(session: Session, out: TextIO = sys.stdout) -> None:
    """Print the session's messages one line each, so a reader sees what the ticket holds."""
    print(f"\nEvent ledger of {session.app_name}/{session.user_id}/{session.id} "
          f"({len(session.events)} events):", file=out)
    for i, e in enumerate(session.events, 1):
        m = e.message
        if m is None:
            continue
        if m.tool_calls:
            body = "calls " + ", ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
        else:
            body = " ".join(m.content.split())
        body = body if len(body) <= 110 else body[:107] + "..."
        print(f"  {i:>2}. [{e.invocation_id[-6:]}] {m.role:<9} {body}", file=out)


def artifacts_root(db: Path) -> Path:
    """The artifact folder of a session database: ``<db stem>-artifacts`` beside it."""
    return db.with_name(f"{db.stem}-artifacts")


async def main_async(db: Path, model_spec: str | None, *, model: Model | None = None,
                     out: TextIO = sys.stdout) -> int:
    """Run one day against ``db``: day 1 while the user has no report artifact, day 2 once an earlier
    run left one. Returns the exit code (1 when an event carries an error). ``model`` overrides ``model_spec``.
    """
    from agentlab.model import get_model

    svc = DuckDBSessionService(db)
    artifacts = DuckDBArtifactService(artifacts_root(db))
    try:
        report = await artifacts.load(APP, USER, DAY2_SESSION, REPORT)
        session_id, message = (DAY1_SESSION, DAY1_MESSAGE) if report is None else (DAY2_SESSION, DAY2_MESSAGE)
        runner = Runner(APP, SupportAgent(model or get_model(model_spec)), svc, artifact_service=artifacts)
        if report is None:
            print(f"Day 1: opening case {session_id} in {db}; artifacts in {artifacts.root}.", file=out)
        else:
            print(f"Day 2: new case {session_id}; the user's report {REPORT} (revision {report.info.revision}, "
                  f"{report.info.size} bytes) is in the artifact store.", file=out)
        print(f"user> {message}", file=out)
        answer, events = await runner.ask(USER, session_id, message)
        print(f"agent> {answer}", file=out)
        session = await svc.get_session(APP, USER, session_id)
        assert session is not None
        print_ledger(session, out)
        listed = await ArtifactScope(artifacts, APP, USER, session_id).list()
        print("\nArtifacts this case sees: " + ", ".join(f"{i.name} (r{i.revision}, {i.size} B)" for i in listed),
              file=out)
        await runner.close()
        return 0 if not any(e.error for e in events) else 1
    finally:
        await artifacts.close()
        await svc.close()


def main(argv: list[str] | None = None) -> int:
    """The command line entry point (``python -m agentlab.examples.support``); returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m agentlab.examples.support", description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, default=Path("results/support.duckdb"),
                        help="session database (default: results/support.duckdb); artifacts go beside it")
    parser.add_argument("--model", default=None, help="model spec (default: $AGENTLAB_MODEL, else openai:gpt-4o-mini "
                        "when OPENAI_API_KEY is set, else the embedded SmolLM2)")
    parser.add_argument("--reset", action="store_true", help="delete the database and its artifacts first (day 1)")
    args = parser.parse_args(argv)
    args.db.parent.mkdir(parents=True, exist_ok=True)
    if args.reset:
        if args.db.exists():
            args.db.unlink()
        shutil.rmtree(artifacts_root(args.db), ignore_errors=True)
    return asyncio.run(main_async(args.db, args.model))


if __name__ == "__main__":
    raise SystemExit(main())
