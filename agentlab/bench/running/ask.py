"""Asking a case's question in its seeded session, and the facts the case row records about it.

Every task that seeds a history and then asks one question (QMSum's modes, for instance) runs
the same few steps: a Runner over the case's session service, the question with the run's
options (``ctx.run_options()``: its context budget), the answer calls counted, a long context's
refusal recorded with the tokens it needed (:func:`~agentlab.bench.tasks.context_length_need`),
the Runner closed. :func:`ask_question` does them and returns the run's outcome with
:func:`answer_facts`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from agentlab.bench.tasks import RunContext, RunOutcome, collect_run, context_length_need
from agentlab.events import OBJ_TOOL_RESPONSE
from agentlab.model.base import observe_calls
from agentlab.model.tally import CallTally

__all__ = ["answer_facts", "ask_question"]


async def ask_question(app_name: str, user_id: str, agent: Any, service: Any, session_id: str, question: str,
                       ctx: RunContext, *, need: int | None = None,
                       tools: Sequence[str] = ()) -> tuple[RunOutcome, dict[str, Any]]:
    """Run ``question`` with ``agent`` in the seeded session: the outcome and :func:`answer_facts`.

    ``need``: the prompt tokens of a long context, recorded if the model refuses it. ``tools``:
    the tools whose calls get their own ``<name>_calls`` count.
    """
    from agentlab.runtime import Runner

    runner = Runner(app_name, agent, service)
    tally = CallTally("answer")
    started = time.perf_counter()
    try:
        with observe_calls(tally), context_length_need(need):
            outcome = await collect_run(runner.run(user_id, session_id, question, options=ctx.run_options()))
    finally:
        await runner.close()
    return outcome, answer_facts(outcome, tally, (time.perf_counter() - started) * 1000, tools)


def answer_facts(outcome: RunOutcome, tally: CallTally, query_ms: float, tools: Sequence[str] = ()) -> dict[str, Any]:
    """``query_ms``, the answer calls and their tokens, ``<tool>_calls`` for each of ``tools``, tool errors and calls."""
    facts: dict[str, Any] = {"query_ms": round(query_ms, 3), "answer_calls": tally.calls,
                             "answer_prompt_tokens": tally.prompt_tokens,
                             "answer_completion_tokens": tally.completion_tokens}
    facts.update({f"{name}_calls": outcome.tool_calls.get(name, 0) for name in tools})
    facts["tool_errors"] = sum(1 for e in outcome.events if e.object == OBJ_TOOL_RESPONSE and e.metadata.get("tool_error"))
    facts["tool_calls"] = sum(outcome.tool_calls.values())
    return facts
