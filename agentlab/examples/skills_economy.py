"""The token economy of skills, measured with no model: a listing + loading on demand, or every skill in the prompt.

For a generated catalog of N skills (real-looking operations runbooks: a name such as
``postgres-failover``, a one-sentence description, 6-12 numbered steps, a document), the same
scripted support session runs through the real :class:`~agentlab.runtime.LLMAgent` and
:class:`~agentlab.runtime.Runner` twice, on a :class:`~agentlab.model.scripted.ScriptedModel`:

* **on demand** — :class:`~agentlab.skills.SkillsMechanism`: the system text lists names and
  descriptions; the model calls ``skill_load`` for the two skills the session needs (the second
  question reuses the first skill without loading it again);
* **all in prompt** — the agent's instruction carries every skill's name, description and
  instructions, and there are no skill tools; the model makes the same domain tool calls.

Every request the model receives is counted with :func:`agentlab.model.tokens.count_messages`
(messages and tool declarations, cl100k). The session has three user turns; on demand makes two
more model calls (the two loads). Rerun with::

    python -m agentlab.examples.skills_economy                 # N = 5, 10, 20, 50, 100, 200
    python -m agentlab.examples.skills_economy --sizes 5,50 --format json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agentlab.core.tools import FunctionTool
from agentlab.model import tokens
from agentlab.model.base import ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import LLMAgent, Runner
from agentlab.session.inmemory import InMemorySessionService
from agentlab.skills.mechanism import SkillsMechanism, render_listing
from agentlab.skills.repository import Skill, SkillRepository, write_skill

DEFAULT_SIZES: tuple[int, ...] = (5, 10, 20, 50, 100, 200)

_SYSTEMS = ("tls", "dns", "postgres", "redis", "kafka", "nginx", "kubernetes", "s3", "ldap", "vpn", "smtp", "cdn",
            "load-balancer", "terraform", "docker", "elasticsearch", "rabbitmq", "cron", "oauth", "grafana",
            "mysql", "mongodb", "ntp", "sftp", "haproxy")
_TASKS = (("triage", "Diagnose why {s} is failing or slow and find the first broken link"),
          ("failover", "Move {s} traffic to the standby safely and verify nothing was lost"),
          ("capacity-review", "Check whether {s} will run out of capacity in the next quarter"),
          ("incident-report", "Write the post-incident report of a {s} outage in the team format"),
          ("upgrade", "Plan and run a minor-version upgrade of {s} with a rollback path"),
          ("access-audit", "Audit who can reach {s} and remove access nobody needs"),
          ("backup-restore", "Restore {s} from the latest backup and prove the restore is complete"),
          ("config-drift", "Find and fix configuration drift between {s} environments"))
_STEPS = ("Confirm the symptom with the user: what fails, since when, for whom.",
          "Open the {s} dashboard and note error rate, latency and saturation for the last hour.",
          "Read the last 200 lines of the {s} logs and look for the first error, not the loudest.",
          "Compare the running {s} configuration with the version in the repository.",
          "Check the certificate, credentials or tokens {s} depends on for expiry.",
          "Check recent deploys and configuration changes that touched {s}.",
          "Test {s} from a second network location to rule out the client side.",
          "If a change caused it, roll it back and watch the metrics for ten minutes.",
          "If capacity is the cause, add headroom first and plan the permanent fix after.",
          "Record every command you ran and its output in the ticket.",
          "Tell the user what was wrong, what you changed and what to watch for.",
          "Open a follow-up ticket for the root cause if the fix was a workaround.",
          "Ask for a second pair of eyes before any change that deletes data on {s}.",
          "Write down the checks that would have caught this earlier.")

BASE_INSTRUCTION = "You are a support engineer. Use the diagnostic tool, then answer in two sentences."
QUESTIONS = ("Our {a} is failing since this morning, what is wrong?",
             "Same problem on the second {a} node, can you check it too?",
             "Different topic: we need to do {b}. How do we start?")


def catalog(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """``n`` distinct skills as ``(name, description, instructions)``, reproducible from ``seed``."""
    pairs = [(s, t) for t in _TASKS for s in _SYSTEMS]
    if n > len(pairs):
        raise ValueError(f"the generator makes at most {len(pairs)} distinct skills; ask for fewer")
    rng = random.Random(seed)
    rng.shuffle(pairs)
    out = []
    for system, (task, purpose) in pairs[:n]:
        steps = rng.sample(_STEPS, rng.randint(6, 12))
        body = "\n".join(f"{i}. {step.format(s=system)}" for i, step in enumerate(steps, start=1))
        body += f"\n\nFor the report format, read docs/{task}-report.txt."
        out.append((f"{system}-{task}", purpose.format(s=system) + ".", body))
    return out


def all_in_prompt(skills: Sequence[Skill]) -> str:
    """The baseline's instruction: every skill's name, description and instructions."""
    blocks = [f"## Skill {s.name}\n{s.description}\n{s.instructions}" for s in skills]
    return BASE_INSTRUCTION + "\n\nSkills:\n\n" + "\n\n".join(blocks)


def run_diagnostic(target: str) -> str:
    """Run the standard diagnostic on a target and return its findings.

    Args:
        target: What to diagnose.
    """
    return f"{target}: 3 errors in the last hour; first error at 07:12 (certificate expired)."


@dataclass(frozen=True)
class EconomyRow:
    """The measurement for one catalog size."""

    skills: int
    listing_tokens: int
    on_demand_calls: int
    on_demand_tokens_per_call: float
    on_demand_total: int
    all_in_prompt_calls: int
    all_in_prompt_tokens_per_call: float
    all_in_prompt_total: int

    @property
    def ratio(self) -> float:
        """All-in-prompt total over on-demand total."""
        return self.all_in_prompt_total / self.on_demand_total


async def _session(model: ScriptedModel, mechanisms: list[Any], instruction: str, questions: Sequence[str]) -> None:
    agent = LLMAgent("support", model, instruction=instruction, tools=[FunctionTool(run_diagnostic)],
                     mechanisms=mechanisms)
    runner = Runner("economy", agent, InMemorySessionService())
    for question in questions:
        answer, events = await runner.ask("u", "s", question)
        if any(e.error for e in events):
            raise RuntimeError(f"the scripted session failed: {answer}")
    await runner.close()


@dataclass
class Arms:
    """The requests each arm sent for one catalog, and the catalog."""

    skills: list[Skill]
    used: tuple[str, str]
    listing: str
    on_demand: list[ModelRequest]
    all_in_prompt: list[ModelRequest]


async def run_arms(n: int, seed: int = 0) -> Arms:
    """Run the scripted session on a catalog of ``n`` skills both ways (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="skill-economy-") as root:
        for name, description, instructions in catalog(n, seed):
            task = name.rsplit("-", 1)[-1]
            write_skill(root, name, description, instructions, docs={f"{task}-report.txt": "Summary, impact, fix."})
        repository = SkillRepository(root)
        skills = repository.list()
        first, second = skills[0].name, skills[len(skills) // 2].name
        questions = [q.format(a=first.split("-")[0], b=second) for q in QUESTIONS]
        call = ScriptedModel.tool_call
        on_demand = ScriptedModel([
            call("skill_load", {"name": first}), call("run_diagnostic", {"target": first}), "Found it.",
            call("run_diagnostic", {"target": first + " node 2"}), "Same cause.",
            call("skill_load", {"name": second}), "Start with step 1."])
        await _session(on_demand, [SkillsMechanism(repository)], BASE_INSTRUCTION, questions)
        baseline = ScriptedModel([
            call("run_diagnostic", {"target": first}), "Found it.",
            call("run_diagnostic", {"target": first + " node 2"}), "Same cause.", "Start with step 1."])
        await _session(baseline, [], all_in_prompt(skills), questions)
        return Arms(skills, (first, second), render_listing(repository), on_demand.requests, baseline.requests)


async def measure(n: int, seed: int = 0) -> EconomyRow:
    """Tokens of every request of both arms on a catalog of ``n`` skills (see the module docstring)."""
    arms = await run_arms(n, seed)
    demand = [tokens.count_messages(r.messages, r.tools or None) for r in arms.on_demand]
    baseline = [tokens.count_messages(r.messages, r.tools or None) for r in arms.all_in_prompt]
    return EconomyRow(n, tokens.count_text(arms.listing), len(demand), round(sum(demand) / len(demand), 1),
                      sum(demand), len(baseline), round(sum(baseline) / len(baseline), 1), sum(baseline))


def table(rows: Sequence[EconomyRow]) -> str:
    """The rows as a Markdown table."""
    out = ["| skills | listing tokens | on demand: calls | tokens/call | session total | all in prompt: calls "
           "| tokens/call | session total | all-in-prompt / on-demand |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r.skills} | {r.listing_tokens:,} | {r.on_demand_calls} | {r.on_demand_tokens_per_call:,.1f} "
                   f"| {r.on_demand_total:,} | {r.all_in_prompt_calls} | {r.all_in_prompt_tokens_per_call:,.1f} "
                   f"| {r.all_in_prompt_total:,} | {r.ratio:.2f}x |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """The command line (``python -m agentlab.examples.skills_economy``); prints the table, returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m agentlab.examples.skills_economy", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="catalog sizes, comma-separated (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="catalog generator seed (default: 0)")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        print(f"error: --sizes {args.sizes!r} is not a comma-separated list of integers (e.g. 5,10,50)", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 2:
        print("error: --sizes needs catalog sizes of at least 2 (the session uses two skills)", file=sys.stderr)
        return 2
    try:
        rows = [asyncio.run(measure(n, args.seed)) for n in sizes]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps([{**asdict(r), "ratio": round(r.ratio, 3)} for r in rows], indent=1))
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
