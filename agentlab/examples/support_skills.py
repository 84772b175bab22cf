"""The support desk learns a skill after two runs and uses it in the third (scripted, no model needed).

The agent's habit is to test the network first when a TLS handshake fails. Three runs:

1. Ticket 1: the network test fails, the agent recovers by reading the certificate (expired) and
   answers. Evolution finds a *recovery after a failed call*; the reviewer proposes a skill,
   ``tls-handshake-triage``, which passes the spec and safety checks and is published (revision 1).
2. Ticket 1, next message: the user corrects the agent — next time, check the certificate expiry
   first. Evolution finds a *user correction*; the reviewer proposes a skill under another name
   with a near-duplicate description, which reconciliation turns into an update of the same
   skill (revision 2: "check the certificate expiry first").
3. Ticket 2, another user: the listing shows the skill, the agent loads it, and because its
   instructions say so it reads the certificate first — no network test.

The agent's model and the reviewer are scripted (:class:`~agentlab.model.scripted.ScriptedModel`),
but the agent's next step is decided from what its request shows (the listing, the loaded
instructions, the last tool result), so the third run changes because the published skill says so.
Run it::

    python -m agentlab.examples.support_skills [--skills-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from agentlab.core.tools import FunctionTool
from agentlab.events import Message
from agentlab.examples.support import read_certificate
from agentlab.model.base import ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import LLMAgent, Runner
from agentlab.session.inmemory import InMemorySessionService
from agentlab.skills import (
    EvolutionMechanism,
    EvolutionPolicy,
    SkillRepository,
    SkillsMechanism,
    evolution_service,
)

APP = "support-desk"
SKILL = "tls-handshake-triage"
RUNS = (("alice", "ticket-1", "Our payment API on pay.example.com fails TLS handshakes. What is wrong?"),
        ("alice", "ticket-1", "That took long: the network was fine. Next time, check the certificate expiry first."),
        ("bob", "ticket-2", "TLS handshakes to shop.example.org fail since this morning."))

#: What the reviewer proposes after run 1 and after run 2 (JSON replies, as a reviewer model would write them).
REVIEWS = (
    {"action": "create", "name": SKILL, "description": "Diagnose a failing TLS handshake to a host.",
     "instructions": "1. Test the network with check_network.\n2. If that fails, read the certificate with "
                     "read_certificate and compare not_after with today.\n3. Tell the user which one is broken.",
     "reason": "the agent recovered from a failed network check by reading the certificate"},
    {"action": "create", "name": "tls-certificate-first", "description": "Diagnose failing TLS handshakes of a host.",
     "instructions": "1. Check the certificate expiry first: read_certificate, compare not_after with today.\n"
                     "2. Only when the certificate is valid, test the network with check_network.\n"
                     "3. Tell the user which one is broken and how to fix it.",
     "reason": "the user corrected the order: certificate expiry first"},
)


def check_network(host: str) -> str:
    """Test whether a host answers on port 443.

    Args:
        host: The host name.
    """
    raise TimeoutError(f"no answer from {host}:443 within 10 s")


def _host(request: ModelRequest) -> str:
    users = [m.content for m in request.messages if m.role == "user"]
    found = re.search(r"\b(?:[a-z0-9-]+\.)+[a-z]{2,}\b", users[-1] if users else "")
    return found.group(0) if found else "unknown-host"


def agent_step(request: ModelRequest) -> Message:
    """The scripted agent's next step, decided from what the request shows (see the module docstring)."""
    last = request.messages[-1]
    system = request.messages[0].content if request.messages[0].role == "system" else ""
    call = ScriptedModel.tool_call
    if last.role == "user":
        if "next time" in last.content.lower():
            return Message.assistant("Understood: I will check the certificate expiry first from now on.")
        if f"- {SKILL}:" in system:
            return call("skill_load", {"name": SKILL})
        return call("check_network", {"host": _host(request)})
    if last.name == "skill_load":
        first = "read_certificate" if "certificate expiry first" in last.content else "check_network"
        return call(first, {"host": _host(request)})
    if last.name == "check_network":
        return call("read_certificate", {"host": _host(request)})
    certificate = json.loads(last.content)
    return Message.assistant(f"The certificate of {certificate['host']} is {certificate['status']} "
                             f"(not_after {certificate['not_after']}); renew it and the handshakes will work.")


def reviewer_model() -> ScriptedModel:
    """The scripted reviewer: one JSON reply per review."""
    return ScriptedModel([json.dumps(r) for r in REVIEWS])


async def run_story(skills_dir: Path, out: TextIO = sys.stdout) -> list[list[str]]:
    """Play the three runs against ``skills_dir``; returns the tool calls of each run."""
    repository = SkillRepository(skills_dir)
    policy = EvolutionPolicy(spec_check=True, safety_check=True)
    agent = LLMAgent("support", ScriptedModel([agent_step] * 20), instruction="You are a support engineer.",
                     tools=[FunctionTool(check_network), FunctionTool(read_certificate)],
                     mechanisms=[SkillsMechanism(repository), EvolutionMechanism(repository, policy, reviewer_model())])
    runner = Runner(APP, agent, InMemorySessionService())
    service = evolution_service(runner.services)
    assert service is not None
    print(f"Skills folder: {skills_dir}\nEvolution gates: {', '.join(policy.gates) or 'none (direct publication)'}",
          file=out)
    calls_per_run: list[list[str]] = []
    for number, (user, ticket, message) in enumerate(RUNS, start=1):
        answer, events = await runner.ask(user, ticket, message)
        await service.drain()
        calls = [c.name for e in events if e.is_tool_call() and e.message is not None for c in e.message.tool_calls]
        failed = [e.message.name or "" for e in events if e.is_tool_result() and e.metadata.get("tool_error")
                  and e.message is not None]
        calls_per_run.append(calls)
        print(f"\nRun {number} ({ticket}, {user})\n  user>  {message}", file=out)
        print(f"  tools: {' -> '.join(calls) or 'none'}" + (f" (failed: {', '.join(failed)})" if failed else ""),
              file=out)
        print(f"  agent> {answer}", file=out)
        result = service.results[-1]
        evidence = ", ".join(result.evidence.kinds()) or "none"
        print(f"  evolution: evidence [{evidence}], {result.describe()}", file=out)
        if result.proposal is not None:
            for note in result.proposal.notes:
                print(f"  reconciliation: {note}", file=out)
    print(f"\nRevisions of {SKILL}:", file=out)
    for revision in service.publisher.history(SKILL):
        print(f"  {revision.number}. {revision.action} from {revision.source}", file=out)
    print(f"\n{SKILL}/SKILL.md now:\n" + (skills_dir / SKILL / "SKILL.md").read_text(encoding="utf-8"), file=out)
    await runner.close()
    return calls_per_run


def main(argv: list[str] | None = None) -> int:
    """The command line (``python -m agentlab.examples.support_skills``); 0 when run 3 read the certificate first."""
    parser = argparse.ArgumentParser(prog="python -m agentlab.examples.support_skills",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--skills-dir", type=Path, default=None,
                        help="where the skills are published (default: a temporary folder, removed afterwards); "
                             "it must not hold the skill yet")
    args = parser.parse_args(argv)
    if args.skills_dir is not None:
        if (args.skills_dir / SKILL).exists():
            print(f"error: {args.skills_dir / SKILL} exists already; pass an empty --skills-dir", file=sys.stderr)
            return 2
        calls = asyncio.run(run_story(args.skills_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="support-skills-") as root:
            calls = asyncio.run(run_story(Path(root) / "skills"))
    return 0 if calls[-1][:2] == ["skill_load", "read_certificate"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
