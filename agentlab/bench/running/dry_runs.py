"""``--dry-run``: the prompts a mode would send and their token counts, with no model called."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlab.bench.config import Settings
from agentlab.bench.running.identity import select
from agentlab.bench.tasks import CaseSelection, Task
from agentlab.model import tokens

if TYPE_CHECKING:
    from agentlab.policies.arms import Arm


def dry_run(task: Task, mode: str, settings: Settings, *, limit: int | None = None,
            selection: CaseSelection | None = None, encoding: str | None = None,
            context_budget: int | None = None, arm: Arm | None = None) -> dict[str, Any]:
    """Select cases and count the tokens of every prompt the mode would send; no model is called.

    ``avg_prompt_tokens`` is the mean over cases of the summed prompt tokens of the case's prompts
    (for a single-call mode: the answer prompt); chat-format overheads are included. A generic
    arm's mechanisms see ``context_budget`` as their window (``--context-budget``; ``None``: 128k).
    ``arm``: the mode's arm as the caller resolved it (default: the task's).
    """
    if arm is None:
        arm = task.arm(mode)  # an unknown arm is a LookupError naming the known ones
    selection = selection or task.load_cases(settings)
    cases = select(selection, limit)
    per_case: list[int] = []
    per_call: list[int] = []
    for case in cases:
        counts = [tokens.count_messages(messages, encoding=encoding) for messages in task.dry_run_arm(case, mode, settings, context_budget)]
        per_call.extend(counts)
        per_case.append(sum(counts))
    from agentlab.bench.scoring.metrics import percentiles

    out: dict[str, Any] = {
        "benchmark": task.name,
        "mode": mode,
        "cases": len(cases),
        "loaded": selection.loaded,
        "dataset_sha256": selection.dataset_sha256,
        "prompts": len(per_call),
        "avg_prompt_tokens": (sum(per_case) / len(per_case)) if per_case else 0.0,
        "max_prompt_tokens": max(per_case, default=0),
        "min_prompt_tokens": min(per_case, default=0),
        "total_prompt_tokens": sum(per_case),
        "avg_prompt_tokens_per_call": (sum(per_call) / len(per_call)) if per_call else 0.0,
        "encoding": encoding or tokens.DEFAULT_ENCODING,
    }
    if per_case:
        out.update({f"{k}_prompt_tokens": v for k, v in percentiles([float(x) for x in per_case]).items()})
    if context_budget is not None:
        out["context_budget"] = context_budget
        if not arm.generic:
            out["context_budget_note"] = (f"not applied to the dry run of the task mode {mode!r}: it plans its "
                                          "prompts with the benchmark's published window; a run uses the budget")
    return out


__all__ = ["dry_run"]
