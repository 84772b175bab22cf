"""A support desk with two diagnostic tools, the skills listing and evolution, on scripted models."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentlab.core.tools import FunctionTool
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import LLMAgent, Runner
from agentlab.session import InMemorySessionService
from agentlab.skills import (
    EvolutionMechanism,
    EvolutionPolicy,
    EvolutionService,
    SkillRepository,
    SkillsMechanism,
    evolution_service,
)

TLS_DESCRIPTION = "Diagnose TLS handshake failures on a host."
TLS_STEPS = "1. Read the certificate first and compare its expiry with today.\n2. Only then test the network."


def check_network(host: str) -> str:
    """Test whether a host answers on port 443.

    Args:
        host: The host name.
    """
    raise RuntimeError("connection timed out")


def read_certificate(host: str) -> dict[str, str]:
    """Read the TLS certificate a host presents.

    Args:
        host: The host name.
    """
    return {"host": host, "not_after": "2026-11-29", "status": "EXPIRED"}


def proposal(action: str = "create", name: str = "tls-triage", description: str = TLS_DESCRIPTION,
             instructions: str = TLS_STEPS, reason: str = "a recovery worth keeping") -> str:
    """A reviewer reply (JSON text)."""
    return json.dumps({"action": action, "name": name, "description": description, "instructions": instructions,
                       "reason": reason})


#: The agent's replies of a run that fails on the network check, recovers with the certificate and answers.
def recovering_run() -> list[Any]:
    return [ScriptedModel.tool_call("check_network", {"host": "pay.example.com"}),
            ScriptedModel.tool_call("read_certificate", {"host": "pay.example.com"}),
            "The certificate of pay.example.com expired on 2026-11-29."]


@dataclass
class Desk:
    """One Runner with skills and evolution, its scripted agent model and its scripted reviewer."""

    root: Path
    repository: SkillRepository
    agent_model: ScriptedModel
    reviewer: ScriptedModel
    runner: Runner
    sessions: InMemorySessionService

    @property
    def service(self) -> EvolutionService:
        found = evolution_service(self.runner.services)
        assert found is not None
        return found

    async def run(self, message: str, replies: list[Any], *, user: str = "alice", session: str = "t1") -> str:
        """One run, then wait for its review."""
        self.agent_model.add(*replies)
        answer, _ = await self.runner.ask(user, session, message)
        await self.service.drain()
        return answer


def make_desk(root: Path, policy: EvolutionPolicy | None = None, memory_service: Any = None) -> Desk:
    repository = SkillRepository(root)
    agent_model = ScriptedModel([])
    reviewer = ScriptedModel([])
    sessions = InMemorySessionService()
    agent = LLMAgent("support", agent_model, instruction="You are a support engineer.",
                     tools=[FunctionTool(check_network), FunctionTool(read_certificate)],
                     mechanisms=[SkillsMechanism(repository), EvolutionMechanism(repository, policy, model=reviewer)])
    runner = Runner("desk", agent, sessions, memory_service=memory_service)
    return Desk(root, repository, agent_model, reviewer, runner, sessions)
