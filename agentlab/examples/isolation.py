"""Context isolation measured: one tool-heavy task, inline versus behind a sub-agent whose report returns.

The task reads incident-log pages through a tool (each page a few hundred tokens). Two arms:

* ``inline`` — one agent, ``lead``, calls the tool itself: every page stays in its context;
* ``subagent`` — ``lead`` hands the task to ``researcher`` through an
  :class:`~agentlab.runtime.composition.AgentTool`; the researcher works on the branch
  ``main/researcher`` and only its report comes back as the tool result.

Both run under the filter key ``main`` (the full-session key ``""`` would see every branch). Per
model call the table records the branch, prompt and completion tokens as the model reported them;
per branch the totals and the peak prompt; and what the parent's view never held: the events (and
their tokens) outside :func:`~agentlab.core.in_filter` of ``main``.

Backends: ``scripted`` (a :class:`~agentlab.model.scripted.ScriptedModel` playing a fixed plan:
four page reads, then the answer or report; tokens counted with the project's tokenizer) and
``server`` (the local OpenAI-compatible test server, which calls one search tool once per user
turn and answers extractively). Neither is a real model: the numbers measure context mechanics,
not answer quality. Run::

    python -m agentlab.examples.isolation              # both backends, a markdown table
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.core.mechanism import in_filter
from agentlab.core.tools import Tool
from agentlab.events import Event
from agentlab.model.base import Model
from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import FunctionTool, LLMAgent, Runner
from agentlab.runtime.composition import AgentTool
from agentlab.session.base import Session
from agentlab.session.inmemory import InMemorySessionService

__all__ = ["ARMS", "PARENT_KEY", "TASK", "ArmRun", "branch_rows", "call_rows", "measure", "read_page", "run_arm",
           "search_logs", "table"]

TASK = "Which service failed first in last night's incident? Read the incident log pages and report it."
PARENT_KEY = "main"
ARMS = ("inline", "subagent")
PAGES = 4
LINES_PER_PAGE = 30


def _page(page: int) -> str:
    lines = [f"page {page} line {j}: service-{(page * 7 + j) % 11} latency {(page * 37 + j * 13) % 900} ms, "
             f"status {'ERROR' if (page, j) == (3, 5) else 'ok'}" for j in range(LINES_PER_PAGE)]
    return "\n".join(lines)


def read_page(page: int) -> str:
    """Read one page of the incident log.

    Args:
        page: The page number, 1 to 4.
    """
    if not 1 <= page <= PAGES:
        return f"error: no page {page}; pages are 1 to {PAGES}"
    return _page(page)


def search_logs(query: str) -> str:
    """Search the incident log; returns every page that matches.

    Args:
        query: What to look for.
    """
    return "\n\n".join(_page(p) for p in range(1, PAGES + 1))


def _scripted(arm: str) -> tuple[Model, Model | None]:
    reads = [ScriptedModel.tool_call("read_page", {"page": p}, id=f"read-{p}") for p in range(1, PAGES + 1)]
    if arm == "inline":
        return ScriptedModel([*reads, "service-6 failed first (page 3, line 5)."]), None
    lead = ScriptedModel([ScriptedModel.tool_call("researcher", {"task": TASK}, id="delegate-1"),
                          "service-6 failed first, as the researcher reported."])
    child = ScriptedModel([*reads, "Report: service-6 failed first (page 3, line 5); pages 1-4 read."])
    return lead, child


@dataclass
class ArmRun:
    """One arm's finished run: its backend, its arm, the session it wrote."""

    backend: str
    arm: str
    session: Session


async def run_arm(arm: str, backend: str = "scripted", model: Model | None = None) -> ArmRun:
    """Run ``arm`` once on ``backend`` (``scripted``, or ``server`` with ``model`` the test server's)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose one of {', '.join(ARMS)}")
    tools: list[Tool] = [FunctionTool(read_page), FunctionTool(search_logs)]
    if backend == "scripted":
        lead_model, child_model = _scripted(arm)
    elif model is not None:
        lead_model, child_model = model, model
    else:
        raise ValueError("the server backend needs the test server's model (build_model(server.model_spec))")
    if arm == "inline":
        agent = LLMAgent("lead", lead_model, tools=tools)
    else:
        assert child_model is not None
        researcher = LLMAgent("researcher", child_model, tools=tools)
        agent = LLMAgent("lead", lead_model, tools=[AgentTool(researcher)])
    svc = InMemorySessionService()
    runner = Runner("isolation", agent, svc)
    async for _ in runner.run("user", f"{backend}-{arm}", TASK, filter_key=PARENT_KEY):
        pass
    await runner.close()
    session = await svc.get_session("isolation", "user", f"{backend}-{arm}")
    assert session is not None
    return ArmRun(backend, arm, session)


def call_rows(run: ArmRun) -> list[dict[str, Any]]:
    """One row per model call: backend, arm, branch, call number, prompt and completion tokens."""
    rows: list[dict[str, Any]] = []
    for event in run.session.events:
        if event.usage is None:
            continue
        rows.append({"backend": run.backend, "arm": run.arm, "branch": event.filter_key, "call": len(rows) + 1,
                     "prompt_tokens": event.usage.prompt_tokens, "completion_tokens": event.usage.completion_tokens})
    return rows


def _unseen(events: Sequence[Event]) -> list[Event]:
    return [e for e in events if e.message is not None and not in_filter(e.filter_key, PARENT_KEY)]


def branch_rows(run: ArmRun) -> list[dict[str, Any]]:
    """Per branch: calls, prompt/completion token totals, the peak prompt, and for the run what the
    parent's view never held (events and tokens outside its filter key's view).
    """
    calls = call_rows(run)
    unseen = _unseen(run.session.events)
    out = []
    for branch in dict.fromkeys(r["branch"] for r in calls):
        mine = [r for r in calls if r["branch"] == branch]
        out.append({
            "backend": run.backend, "arm": run.arm, "branch": branch, "calls": len(mine),
            "prompt_tokens": sum(r["prompt_tokens"] for r in mine),
            "completion_tokens": sum(r["completion_tokens"] for r in mine),
            "peak_prompt": max(r["prompt_tokens"] for r in mine),
            "never_in_parent_view_events": len(unseen) if branch == PARENT_KEY else "",
            "never_in_parent_view_tokens": sum(e.token_count or 0 for e in unseen) if branch == PARENT_KEY else "",
        })
    return out


async def measure(backends: Sequence[str] = ("scripted", "server")) -> list[ArmRun]:
    """Both arms on each backend (the test server is started and stopped here)."""
    runs: list[ArmRun] = []
    for backend in backends:
        if backend == "scripted":
            runs += [await run_arm(arm) for arm in ARMS]
            continue
        from agentlab.model.registry import build_model
        from agentlab.testing.openai_server import OpenAITestServer

        with OpenAITestServer(context_window=32_768) as server:
            model = build_model(server.model_spec)
            runs += [await run_arm(arm, "server", model) for arm in ARMS]
    return runs


def table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as a markdown table (columns of the first row)."""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the per-branch table (and, with ``--calls``, the per-call one)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("scripted", "server", "both"), default="both")
    parser.add_argument("--calls", action="store_true", help="also print one row per model call")
    args = parser.parse_args(argv)
    backends = ("scripted", "server") if args.backend == "both" else (args.backend,)
    runs = asyncio.run(measure(backends))
    print(table([row for run in runs for row in branch_rows(run)]))
    if args.calls:
        print()
        print(table([row for run in runs for row in call_rows(run)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
