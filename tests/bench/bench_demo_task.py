"""A tiny benchmark task that proves the harness without the runtime: it calls the model directly.

Cases ``d01``..``dNN`` ask for the colour of item N; the "transcript" is a list of lines, one per
item. Modes mirror QMSum: ``long_context`` (transcript + question), ``summary`` (a summary built
once per run with ``ctx.once`` + question), ``recall`` (summary + the one relevant line, with a
fake compaction stat). Knobs for failure tests live in module globals / environment variables, not
in settings, so they do not change the run id.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentlab.bench.config import Settings
from agentlab.bench.facts import ModeRoles
from agentlab.bench.scoring.metrics import Score, summary_scores
from agentlab.bench.store.results import CompactionRow
from agentlab.bench.tasks import Case, CaseResult, CaseSelection, RunContext, Task, register
from agentlab.bench.tasks.qmsum_judge import QMSUM_JUDGE
from agentlab.events import Message
from agentlab.model.base import ContextLengthError, GenerationConfig, ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.progress import report_progress

COLOURS = ["blue", "red", "green", "amber"]
INSTRUCTION = "Answer from the transcript only, in one short sentence."

#: Case ids whose answer call raises a context-length error (tests edit this set).
FAIL_IDS: set[str] = set()
#: Raise KeyboardInterrupt when this many cases have started in this process (0 = never).
INTERRUPT_AFTER = 0
_started = 0


def reset() -> None:
    global INTERRUPT_AFTER, _started
    FAIL_IDS.clear()
    INTERRUPT_AFTER = 0
    _started = 0


def transcript(n: int) -> list[str]:
    return [f"[Turn {i:03d}] Speaker: item {i} is {COLOURS[i % len(COLOURS)]}" for i in range(1, n + 1)]


def reply(request: ModelRequest) -> str:
    """Deterministic answers: the scripted model's behaviour for every purpose."""
    text = request.messages[-1].content
    if request.purpose == "judge":
        return json.dumps({"correct": True, "confidence": 0.9, "reason": "matches"})
    if request.purpose == "summary":
        return "The meeting listed items and their colours."
    if "FAIL" in " ".join(m.content for m in request.messages[:1]):
        raise ContextLengthError("prompt exceeds the window")
    number = int(text.split("item ")[1].rstrip("?"))
    # Odd items answered well only when the evidence line is in the prompt.
    visible = any(f"item {number} is" in m.content for m in request.messages)
    colour = COLOURS[number % len(COLOURS)] if visible else "grey"
    return f"item {number} is {colour}"


def scripted_model() -> ScriptedModel:
    return ScriptedModel(default_reply=reply)  # type: ignore[arg-type] - callables are played too


@register
class DemoTask(Task):
    name = "demo"
    version = "1"
    modes = ("long_context", "summary", "recall")
    default_mode = "long_context"
    mode_roles = ModeRoles(baseline="long_context", lossy="summary", recovered="recall")
    judge_templates = (QMSUM_JUDGE,)
    description = "test-only demo task (scripted model, no runtime)"

    def default_settings(self) -> dict[str, dict[str, Any]]:
        return {
            "dataset": {"n_cases": 6},
            "answer": {"max_tokens": 32, "temperature": 0.0},
            "judge": {"enabled": True, "model": ""},
            "run": {"concurrency": 2},
        }

    def load_cases(self, settings: Settings) -> CaseSelection:
        n = int(settings["dataset"]["n_cases"])
        cases = [Case(id=f"d{i:02d}", question=f"What colour is item {i}?",
                      reference=f"item {i} is {COLOURS[i % len(COLOURS)]}", data=i, metadata={"item": i})
                 for i in range(1, n + 1)]
        return CaseSelection(cases, dataset_sha256="demo-data-v1", loaded=n, note="all items")

    def prompts(self, case: Case, mode: str, settings: Settings, summary: str) -> list[Message]:
        system = INSTRUCTION + (" FAIL" if case.id in FAIL_IDS else "")
        lines = transcript(int(settings["dataset"]["n_cases"]))
        if mode == "long_context":
            return [Message.system(system), *(Message.user(line) for line in lines), Message.user(case.question)]
        context = [Message.system(f"{system}\nSummary: {summary}")]
        if mode == "recall":
            context.append(Message.user(lines[int(case.data) - 1]))
        return [*context, Message.user(case.question)]

    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        global _started
        _started += 1
        if INTERRUPT_AFTER and _started > INTERRUPT_AFTER:
            raise KeyboardInterrupt
        delay = float(os.environ.get("BENCH_DEMO_SLEEP", "0") or 0)
        if delay:
            await asyncio.sleep(delay)
        summary = ""
        if mode != "long_context":
            async def build() -> str:
                request = ModelRequest([Message.user("Summarise the transcript.")], purpose="summary")
                text = (await ctx.model.generate(request)).message.content
                # Stands in for a rolling summariser's steps (the executor shows them inside the case).
                for step in (1, 2, 3):
                    report_progress("summary", step, 3, tokens=400 * step, tokens_total=1200)
                return text
            summary = await ctx.once("summary", build)
        answer = ctx.settings["answer"]
        request = ModelRequest(self.prompts(case, mode, ctx.settings, summary),
                               config=GenerationConfig(temperature=answer["temperature"], max_tokens=answer["max_tokens"]),
                               purpose="answer")
        response = await ctx.model.generate(request)
        marker_dir = os.environ.get("BENCH_DEMO_MARKERS")
        if marker_dir:
            Path(marker_dir, f"{mode}-{case.id}").write_text("done")
        compactions = [CompactionRow(1, 120, 20)] if mode == "recall" else []
        return CaseResult(prediction=response.message.content, metadata={"summary_chars": len(summary)},
                          compactions=compactions)

    async def score(self, case: Case, result: CaseResult, ctx: RunContext) -> list[Score]:
        scores = summary_scores(result.prediction, case.reference, exact=True)
        if ctx.judge is not None:
            judged = await ctx.judge.grade(QMSUM_JUDGE, query=case.question, reference=case.reference,
                                           prediction=result.prediction)
            scores += judged.to_scores()
        return scores

    def dry_run_prompts(self, case: Case, mode: str, settings: Settings) -> list[list[Message]]:
        if mode == "long_context":
            return [self.prompts(case, mode, settings, "")]
        # Before any model output exists only the summariser's prompt is known.
        return [[Message.user("Summarise the transcript.")]]

    def retrieval_only(self, cases: Sequence[Case], mode: str, settings: Settings) -> dict[str, Any]:
        return retrieval_only_impl(list(cases), 1)


def retrieval_only_impl(cases: list[Case], k: int) -> dict[str, Any]:
    from agentlab.bench.scoring.metrics import evidence_recall_at_k

    # A fake "retriever" that ranks transcript lines by item number distance to the question.
    values = []
    for case in cases:
        ranked = sorted(range(1, len(cases) + 1), key=lambda i: (abs(i - int(case.data)), i))
        values.append(evidence_recall_at_k([str(i) for i in ranked], [str(case.data)], k))
    return {f"recall@{k}": sum(v for v in values if v is not None) / len(values)}


def patch_models() -> None:
    """Make the CLI's model factory return the scripted model (for subprocess tests)."""
    import agentlab.model.registry as registry

    registry.get_model = lambda spec=None, **_: scripted_model()  # type: ignore[assignment]
