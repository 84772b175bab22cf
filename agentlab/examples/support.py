"""The support investigation from the seed story, as a runnable example.

Day 1: a user reports a TLS error; the agent reads the certificate through a tool and answers.
Day 2: a *new process* opens the same DuckDB file and session id; the user says "the same error
as yesterday", and the Runner reopens yesterday's case instead of asking a model to remember.

Run it twice in a row on the same database::

    python -m agentlab.examples.support            # day 1 (first run), then day 2 (second run)
    python -m agentlab.examples.support --db /tmp/support.duckdb --model openai:gpt-4o-mini

The certificate read is a deterministic diagnostic step (the seed's point: such steps must not
depend on model improvisation), so it runs even on the tiny embedded model, which rarely calls
tools on its own. The step is still a real tool call: it is persisted as an assistant tool call
and a tool result, and the model answers from it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

from agentlab.events import OBJ_TOOL_RESPONSE, Event, Message, ToolCall, new_id
from agentlab.model.base import GenerationConfig, Model
from agentlab.runtime import FunctionTool, Invocation, LLMAgent, Runner, ToolContext
from agentlab.session.base import Session
from agentlab.session.duckdb import DuckDBSessionService

APP = "support-desk"
USER = "alice"
SESSION = "ticket-4711"

DAY1_MESSAGE = "Our payment API started failing TLS handshakes this morning. What is wrong?"
DAY2_MESSAGE = "The same error as yesterday. Is it still the certificate?"

INSTRUCTION = (
    "You are a support engineer. Answer in two short sentences, using the diagnostic results "
    "in the conversation."
)


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


class SupportAgent:
    """A deterministic diagnostic step (read the certificate), then the LLM loop answers."""

    def __init__(self, model: Model) -> None:
        self.name = "support"
        self.cert_tool = FunctionTool(read_certificate)
        self.llm = LLMAgent(
            "support",
            model,
            instruction=INSTRUCTION,
            tools=[self.cert_tool],
            generation=GenerationConfig(temperature=0.0, max_tokens=96),
            max_tool_iterations=2,
        )
        self.model = model
        self.summary = None
        self.memory = None

    async def run(self, inv: Invocation) -> AsyncIterator[Event]:
        """Read the certificate once per case (a fixed diagnostic step, not left to the model), then let
        the LLM loop answer from the conversation.
        """
        if not _already_diagnosed(inv.session):
            call = ToolCall(id=new_id("call-"), name="read_certificate",
                            arguments=json.dumps({"host": "pay.example.com"}))
            yield Event(author=self.name, choices=[Message.assistant("", [call])],
                        invocation_id=inv.id, request_id=inv.request_id)
            result = await self.cert_tool.call(call.parsed_arguments(), ToolContext(inv, call.id, call.name))
            yield Event(author=self.name, object=OBJ_TOOL_RESPONSE,
                        choices=[Message.tool(call.id, call.name, json.dumps(result))],
                        invocation_id=inv.id, request_id=inv.request_id)
        async for event in self.llm.run(inv):
            yield event


def _already_diagnosed(session: Session) -> bool:
    return any(e.is_tool_result() for e in session.events)


def print_ledger(session: Session, out: TextIO = sys.stdout) -> None:
    """Print the session's messages one line each, so a reader sees what day 2 reopened."""
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


async def main_async(db: Path, model_spec: str | None) -> int:
    """Run one day against ``db``: day 1 when the case does not exist yet, day 2 when an earlier run left
    it there. Returns the exit code (1 when an event carries an error).
    """
    from agentlab.model import get_model

    svc = DuckDBSessionService(db)
    try:
        existing = await svc.get_session(APP, USER, SESSION)
        model = get_model(model_spec)
        runner = Runner(APP, SupportAgent(model), svc)
        message = DAY1_MESSAGE if existing is None else DAY2_MESSAGE
        if existing is not None:
            print(f"Day 2: reopening case {SESSION} with {len(existing.events)} events from earlier runs.")
        else:
            print(f"Day 1: opening a new case {SESSION} in {db}.")
        print(f"user> {message}")
        answer, events = await runner.ask(USER, SESSION, message)
        print(f"agent> {answer}")
        session = await svc.get_session(APP, USER, SESSION)
        assert session is not None
        print_ledger(session)
        return 0 if not any(e.error for e in events) else 1
    finally:
        await svc.close()


def main(argv: list[str] | None = None) -> int:
    """The command line entry point (``python -m agentlab.examples.support``); returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m agentlab.examples.support", description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, default=Path("results/support.duckdb"),
                        help="session database (default: results/support.duckdb)")
    parser.add_argument("--model", default=None, help="model spec (default: $AGENTLAB_MODEL, else openai:gpt-4o-mini "
                        "when OPENAI_API_KEY is set, else the embedded SmolLM2)")
    parser.add_argument("--reset", action="store_true", help="delete the database first (start at day 1)")
    args = parser.parse_args(argv)
    args.db.parent.mkdir(parents=True, exist_ok=True)
    if args.reset and args.db.exists():
        args.db.unlink()
    return asyncio.run(main_async(args.db, args.model))


if __name__ == "__main__":
    raise SystemExit(main())
