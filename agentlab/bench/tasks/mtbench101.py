"""MT-Bench-101 — rolling summary vs full history on multi-turn dialogues (Bai et al.,
"MT-Bench-101: A Fine-Grained Benchmark for Evaluating Large Language Models in Multi-Turn
Dialogues", ACL 2024; github.com/mtbench101/mt-bench-101).

Reproduces the summary benchmark of trpc-agent-go (``print-happy/trpc-agent-go-benchmark@1edee87``,
``summary/results/REPORT.md``; docs/sources.md#summary-benchmark-setup): the 9 tasks of the
published run (CC, CM, GR, IC, PI, SA, SC, SI, TS = 917 dialogues; AR, CR, FR, MR by ``--set dataset.tasks=...``).
The agent answers each user turn in order (no instruction, as published); its own answers become the history.

``baseline``
    Full history: every request holds all earlier turns.
``summary``
    Rolling summary as published: trigger ``events_over(2)`` combined any-of (fires once the
    un-summarised delta holds more than 2 events, i.e. after turn 2), a background worker (1
    worker, queue 10, 30 s), the ``compact`` prompt, summary injected in the system message. By
    default the next turn waits for a queued summary job (``[summary] wait_between_turns``) so
    runs are deterministic and replayable; the published harness did not wait.

Generic arms (``--arm inspect_trim``, ``<lossy>+recall`` …) answer every turn the same way, with
the arm's mechanisms. Scores of a summary-mode or generic-arm case compare its answers with the
**baseline answers of the same case**, looked up — never recomputed — first in the results store
(the newest ``ok`` baseline case of the same model and ``[answer]`` settings), else in the call
cache (the baseline conversation replayed from recorded calls only); neither: the case fails with
``baseline_missing``. A baseline case is scored against itself with the rule-based metrics (no
judge calls), the top of their scale, so the report's quality-loss and recovery rows exist.

* ``consistency_judge`` — mean over turns of the judge's rubric score (1.0 same content … 0.0
  contradictory) for summary-mode answer B vs baseline answer A (judge parse failures are left
  out of the mean and counted);
* ``consistency`` — the reference-compatible value ``0.4 + 0.6 × consistency_judge`` (its
  SummaryComparator adds a 0.4 tool-trajectory term that always matches without tools, so 0.4 is
  a floor);
* ``pass1`` — 1 when ``consistency`` ≥ 0.7 (Pass^1 of a single run);
* ``retention`` — the reference's rule-based key-information retention
  (:func:`agentlab.bench.scoring.metrics.retention`); ``retention_llm`` with ``[retention] llm = true``;
* ``word_jaccard`` — the reference's LLM-free similarity fallback, for runs without a judge.

Token savings come from the store (answer calls; summary calls in their own ``summary`` purpose):
:meth:`MTBench101Task.report_tables` gives the published tables per task — savings without and
with summary tokens, their p25/p50/p75 and negative rate, quality, turns, the suitability rule.

"The reference" in this module is the published benchmark harness named above
(docs/sources.md#summary-benchmark-metrics).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentlab.bench.config import JudgeSettings, RunSettings, Settings, generation_config
from agentlab.bench.datasets.mtbench101 import ALL_TASKS, Dialogue, load_mtbench101
from agentlab.bench.facts import SUM_ANSWER_CALLS, ModeRoles
from agentlab.bench.scoring.case_frames import case_tokens, ok_case_metadata
from agentlab.bench.scoring.metrics import Score, percentile, retention, version_of
from agentlab.bench.tasks import (
    Case,
    CaseError,
    CaseResult,
    CaseSelection,
    RunContext,
    Task,
    collect_run,
    register,
)
from agentlab.bench.tasks.mtbench101_judge import CONSISTENCY_JUDGE, RETENTION_LLM_JUDGE
from agentlab.bench.tasks.mtbench101_judge import parse_retention_rate as parse_retention_rate  # re-export
from agentlab.bench.tasks.mtbench101_settings import (
    ConsistencySettings,
    MTBenchAnswer,
    MTBenchDataset,
    MTBenchSummary,
    RetentionSettings,
    SuitabilityRule,
)
from agentlab.events import OBJ_USER, Event, Message
from agentlab.model.replay_only import NotInCache, ReplayOnly, replayable

APP_NAME = "mtbench101"
USER_ID = "mtbench-user"
AGENT_NAME = "assistant"

#: Weights of the reference's consistency: tool trajectory (always matching here) and judge.
TRAJECTORY_WEIGHT = 0.4
JUDGE_WEIGHT = 0.6
#: Whether each mode runs the rolling summary (``[summary]``); the baseline keeps the full history.
SUMMARISES = {"baseline": False, "summary": True}


# ------------------------------------------------------------------------------- helpers


def reference_consistency(judge_score: float) -> float:
    """The reference SummaryComparator's per-turn value without tools: 0.4 + 0.6 × judge."""
    return TRAJECTORY_WEIGHT + JUDGE_WEIGHT * judge_score


def word_jaccard(a: str, b: str) -> float:
    """The reference's LLM-free response similarity (lowercase whitespace words; B's repeats count)."""
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    words_a, words_b = a.lower().split(), b.lower().split()
    if not words_a or not words_b:
        return 0.0
    set_a = set(words_a)
    common = sum(1 for w in words_b if w in set_a)
    union = len(words_a) + len(words_b) - common
    return common / union if union > 0 else 0.0


# ------------------------------------------------------------------------------------ task


@register
class MTBench101Task(Task):
    """MT-Bench-101 dialogues answered turn by turn with the full history or a rolling summary."""

    name = "mtbench101"
    version = "1"
    modes = ("baseline", "summary")
    default_mode = "baseline"
    judge_templates = (CONSISTENCY_JUDGE, RETENTION_LLM_JUDGE)
    mode_roles = ModeRoles(baseline="baseline", lossy="summary")
    tool_delivery_inapplicable = ("its history is the dialogue itself, answered and judged turn by turn; there is no "
                                  "document or session store for a tool to read (dataset.delivery is for QMSum, "
                                  "LoCoMo and LongMemEval)")
    published_token_rule = SUM_ANSWER_CALLS
    description = "MT-Bench-101: 917 multi-turn dialogues, rolling summary vs full history (consistency, savings)"

    def default_settings(self) -> dict[str, type[Any]]:
        """The sections; ``benchmarks/mtbench101.toml`` holds the published values."""
        return {"dataset": MTBenchDataset, "answer": MTBenchAnswer, "summary": MTBenchSummary,
                "consistency": ConsistencySettings, "retention": RetentionSettings, "suitability": SuitabilityRule,
                "judge": JudgeSettings, "run": RunSettings}

    def policies(self, mode: str, settings: Settings) -> list[Any]:
        """Summary mode runs the ``[summary]`` policy; the baseline none."""
        return [settings.of("summary", MTBenchSummary)] if SUMMARISES[mode] else []

    def load_cases(self, settings: Settings) -> CaseSelection:
        """The dialogues of the chosen tasks (``ALL``: every task); the last turn is the case's question."""
        data = load_mtbench101()
        tasks = [t.strip().upper() for t in settings.of("dataset", MTBenchDataset).tasks]
        if tasks == ["ALL"]:
            tasks = sorted(ALL_TASKS)
        dialogues = data.select(tasks)
        cases = [Case(id=d.case_id, question=d.turns[-1].user, reference=d.turns[-1].bot, data=d,
                      metadata={"task": d.task, "dialogue_id": d.dialogue_id, "n_turns": len(d.turns)})
                 for d in dialogues]
        note = f"{len(cases)} dialogues of tasks {', '.join(sorted(set(tasks)))}"
        return CaseSelection(cases, dataset_sha256=data.sha256, loaded=len(data.dialogues), note=note)

    # ------------------------------------------------------------------------ the arms

    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        """Converse the whole dialogue in ``mode``: each mode's flow is one method below."""
        runs = {"baseline": self.run_baseline, "summary": self.run_summary}
        if mode not in runs:
            raise CaseError(f"unknown mode {mode!r}", code="bad_mode")
        return await runs[mode](case, ctx)

    async def run_baseline(self, case: Case, ctx: RunContext) -> CaseResult:
        """Every turn answered with the full history: the answers every other arm is scored against."""
        facts = await self.converse(case.data, ctx.settings, ctx.model, ctx.new_session_service(), with_summary=False,
                                    session_id=f"{case.id}-baseline", options=ctx.run_options())
        return CaseResult(prediction=facts["turn_answers"][-1], metadata=facts)

    async def run_summary(self, case: Case, ctx: RunContext) -> CaseResult:
        """Every turn answered with the rolling summary, after looking up the baseline answers (without them
        the case cannot be scored, so nothing is spent).
        """
        baseline, source = await self.baseline_answers(case, ctx)
        facts = await self.converse(case.data, ctx.settings, ctx.model, ctx.new_session_service(), with_summary=True,
                                    session_id=f"{case.id}-summary", options=ctx.run_options())
        facts.update({"baseline_answers": baseline, "baseline_source": source})
        return CaseResult(prediction=facts["turn_answers"][-1], metadata=facts)

    async def run_generic(self, case: Case, arm: Any, ctx: RunContext) -> CaseResult:
        """A generic arm in the per-turn flow: every turn answered live with the arm's mechanisms,
        scored against the baseline's answers like ``summary``.
        """
        baseline, source = await self.baseline_answers(case, ctx)
        facts = await self.converse(case.data, ctx.settings, ctx.model, ctx.new_session_service(), with_summary=False,
                                    session_id=f"{case.id}-{arm.name}", options=ctx.run_options(),
                                    mechanisms=arm.mechanisms(ctx.settings, ctx.model))
        facts.update({"arm": arm.name, "baseline_answers": baseline, "baseline_source": source})
        return CaseResult(prediction=facts["turn_answers"][-1], metadata=facts)

    async def converse(self, dialogue: Dialogue, settings: Settings, model: Any, session_service: Any, *,
                       with_summary: bool, session_id: str, options: Any = None,
                       mechanisms: Sequence[Any] = ()) -> dict[str, Any]:
        """Answer every user turn in order; return answers and per-turn facts.

        ``options``: the ``RunOptions`` of every turn (``ctx.run_options()``: the run's context budget);
        ``mechanisms``: a generic arm's.
        """
        from agentlab.runtime import LLMAgent, Runner

        answer = settings.of("answer", MTBenchAnswer)
        agent = LLMAgent(AGENT_NAME, model, instruction=answer.instruction,
                         summary=settings.of("summary", MTBenchSummary) if with_summary else None,
                         generation=generation_config(answer), max_tool_iterations=1, mechanisms=mechanisms)
        runner = Runner(APP_NAME, agent, session_service)
        wait = settings.of("summary", MTBenchSummary).wait_between_turns
        out: dict[str, Any] = {"turn_answers": [], "turn_prompt_tokens": [], "turn_completion_tokens": []}
        summary_chars: list[int] = []
        try:
            for turn in dialogue.turns:
                outcome = await collect_run(runner.run(USER_ID, session_id, turn.user, options=options))
                usage = outcome.final_event.usage
                out["turn_answers"].append(outcome.answer)
                out["turn_prompt_tokens"].append(usage.prompt_tokens if usage is not None else 0)
                out["turn_completion_tokens"].append(usage.completion_tokens if usage is not None else 0)
                if with_summary and runner.summary_worker is not None:
                    if wait:
                        await runner.summary_worker.drain()
                    session = await session_service.get_session(APP_NAME, USER_ID, session_id)
                    summary = session.summaries.get("") if session is not None else None
                    summary_chars.append(len(summary.text) if summary is not None else 0)
        finally:
            await runner.close()
        if with_summary:
            out["turn_summary_chars"] = summary_chars
        return out

    async def baseline_answers(self, case: Case, ctx: RunContext) -> tuple[list[str], str]:
        """The baseline run's answers for this case: (answers, "store" | "call_cache")."""
        if ctx.store is not None:
            for meta in ok_case_metadata(ctx.store, self.name, "baseline", ctx.model_spec, case.id,
                                         {"answer": ctx.settings["answer"]}):
                answers = meta.get("turn_answers")
                if isinstance(answers, list) and answers:
                    return [str(a) for a in answers], "store"
        if replayable(ctx.model):
            try:
                facts = await self.converse(case.data, ctx.settings, ReplayOnly(ctx.model), ctx.new_session_service(),
                                            with_summary=False, session_id=f"{case.id}-baseline-replay")
                return facts["turn_answers"], "call_cache"
            except NotInCache:
                pass
        raise CaseError(
            f"no baseline answers for {case.id} with model {ctx.model_spec!r} and these [answer] settings: run "
            f"`python -m agentlab.bench mtbench101 --mode baseline` (same model, settings and --limit) first; "
            f"if it ran, its case {case.id} failed and has no answers to compare with",
            code="baseline_missing",
        )

    # ---------------------------------------------------------------------------- scores

    async def score(self, case: Case, result: CaseResult, ctx: RunContext) -> list[Score]:
        """Per-case scores; each row's ``detail`` holds the per-turn values as JSON.

        A baseline case is the reference: its answers against themselves, rule-based metrics only.
        """
        dialogue: Dialogue = case.data
        answers: list[str] = list(result.metadata["turn_answers"])
        baseline: list[str] = list(result.metadata.get("baseline_answers", answers))
        n = min(len(baseline), len(answers))
        # Equal length by construction; the reference's min/max length penalty is kept for safety.
        length_factor = n / max(len(baseline), len(answers), 1)
        task_version = f"{self.name}-task-v{self.version}"
        per_turn_retention = [retention([baseline[i]], [answers[i]]) for i in range(n)]
        per_turn_jaccard = [word_jaccard(baseline[i], answers[i]) for i in range(n)]
        scores = [
            Score("retention", retention(baseline, answers), version_of("retention"), _turns(per_turn_retention)),
            Score("word_jaccard", length_factor * _mean(per_turn_jaccard), task_version, _turns(per_turn_jaccard)),
        ]
        if ctx.judge is not None and "baseline_answers" in result.metadata:
            judged = [await ctx.judge.grade(CONSISTENCY_JUDGE, query=dialogue.turns[i].user, response_a=baseline[i],
                                            response_b=answers[i]) for i in range(n)]
            raw = [j.score for j in judged]
            parsed = [v for v in raw if v is not None]
            judge_version = judged[0].version if judged else task_version
            failures = len(raw) - len(parsed)
            note = f"; {failures} of {len(raw)} judge replies did not parse" if failures else ""
            if parsed:
                judge_mean = sum(parsed) / len(parsed)
                consistency = length_factor * reference_consistency(judge_mean)
                threshold = ctx.settings.of("consistency", ConsistencySettings).pass_threshold
                per_turn = [None if v is None else reference_consistency(v) for v in raw]
                scores += [
                    Score("consistency_judge", length_factor * judge_mean, judge_version, _turns(raw) + note),
                    Score("consistency", consistency, judge_version,
                          "0.4 + 0.6 x judge (reference-compatible); " + _turns(per_turn) + note),
                    Score("pass1", 1.0 if consistency >= threshold else 0.0, judge_version,
                          f"consistency >= {threshold}"),
                ]
            else:
                scores += [Score(m, None, judge_version, f"no judge reply parsed{note}")
                           for m in ("consistency_judge", "consistency", "pass1")]
            if ctx.settings.of("retention", RetentionSettings).llm:
                rates = [await self._llm_retention(ctx, baseline[i], answers[i]) for i in range(n)]
                kept = [r for r in rates if r is not None]
                scores.append(Score("retention_llm", _mean(kept) if kept else None,
                                    f"{RETENTION_LLM_JUDGE.version}@{ctx.judge.spec}", _turns(rates)))
        return scores

    async def _llm_retention(self, ctx: RunContext, baseline: str, test: str) -> float | None:
        """One turn's LLM retention rate; None when the judge's reply has no rate (left out of the mean)."""
        if not baseline:
            return 1.0
        if not test:
            return 0.0
        assert ctx.judge is not None
        return (await ctx.judge.grade(RETENTION_LLM_JUDGE, baseline=baseline, test=test)).score

    # ------------------------------------------------------------------------ dry run

    def dry_run_prompts(self, case: Case, mode: str, settings: Settings) -> list[list[Message]]:
        """Answer prompts with the dataset's golden answers standing in for the model's own.

        ``baseline``: every turn's prompt. ``summary``: the prompts of turns 1–2 and the first
        summariser prompt (later turns depend on summary text that only a model can write).
        """
        dialogue: Dialogue = case.data
        instruction = settings.of("answer", MTBenchAnswer).instruction
        head = [Message.system(instruction)] if instruction else []
        prompts = []
        history: list[Message] = []
        for turn in dialogue.turns:
            prompts.append([*head, *history, Message.user(turn.user)])
            history += [Message.user(turn.user), Message.assistant(turn.bot)]
        if not SUMMARISES[mode]:
            return prompts
        from agentlab.summary import Summarizer

        policy = settings.of("summary", MTBenchSummary)
        first = dialogue.turns[: max(1, ((policy.events_over or 0) + 2) // 2)]
        lines = [line for t in first for line in (f"user: {t.user}", f"{AGENT_NAME}: {t.bot}")]
        summariser = Summarizer(None, policy)  # type: ignore[arg-type]  # rendering needs no model
        return [*prompts[: len(first)], summariser.render_prompt(lines, "")]

    def generic_dry_run(self, case: Case, arm: Any, settings: Settings, window: int | None = None) -> list[list[Message]]:
        """Every turn's prompt, the golden answers standing in for the model's, projected by the arm's mechanisms."""
        from agentlab.bench.tasks import project_prompt

        dialogue: Dialogue = case.data
        instruction = settings.of("answer", MTBenchAnswer).instruction
        history: list[Event] = []
        prompts = []
        for i, turn in enumerate(dialogue.turns):
            prompts.append(project_prompt(history, arm.mechanisms(settings, None), turn.user, instruction, window=window))
            history += [Event(author="user", choices=[Message.user(turn.user)], object=OBJ_USER, id=f"t{i}-u"),
                        Event(author=AGENT_NAME, choices=[Message.assistant(turn.bot)], id=f"t{i}-a")]
        return prompts

    # ---------------------------------------------------------------------------- report

    def report_tables(self, store: Any) -> dict[str, Any]:
        """The published tables per task: token efficiency, quality, turns, suitability."""
        import pandas as pd

        cases = case_tokens(store, self.name, ("answer", "summary"),
                            {"task": lambda v: v, "n_turns": lambda v: int(v or 0)})
        if cases.empty:
            return {}
        for metric in ("retention", "word_jaccard"):  # scored on every ok case, judge or not
            if metric not in cases.columns:
                cases[metric] = float("nan")  # no case scored yet (all failed): they still count 0
        from agentlab.bench.config import load_settings

        rule = load_settings(self.name, self.default_settings()).of("suitability", SuitabilityRule)
        tables: dict[str, list[dict[str, Any]]] = {"token_efficiency": [], "quality": [], "turns": [],
                                                   "suitability": []}
        for model, per_model in cases.groupby("model"):
            base = per_model[per_model["mode"] == "baseline"].set_index("case_id")
            summ = per_model[per_model["mode"] == "summary"].set_index("case_id")
            both = base[base["status"] == "ok"].join(summ[summ["status"] == "ok"], lsuffix="_b", rsuffix="_s",
                                                     how="inner")
            groups = [(task, both[both["task_b"] == task]) for task in sorted(both["task_b"].unique())]
            for task, g in [*groups, ("ALL", both)]:
                if g.empty:
                    continue
                per_case = _savings(g["answer_total_b"], g["answer_total_s"])
                tables["token_efficiency"].append({
                    "model": model, "task": task, "cases": len(g),
                    "prompt_savings": _ratio(g["answer_prompt_b"].sum(), g["answer_prompt_s"].sum()),
                    "token_savings": _ratio(g["answer_total_b"].sum(), g["answer_total_s"].sum()),
                    "p25": percentile(per_case, 25), "p50": percentile(per_case, 50), "p75": percentile(per_case, 75),
                    "negative_rate": sum(v < 0 for v in per_case) / len(per_case),
                    "prompt_savings_with_summary": _ratio(g["answer_prompt_b"].sum(),
                                                          g["answer_prompt_s"].sum() + g["summary_prompt_s"].sum()),
                    "token_savings_with_summary": _ratio(g["answer_total_b"].sum(),
                                                         g["answer_total_s"].sum() + g["summary_total_s"].sum()),
                    "summary_tokens": int(g["summary_total_s"].sum()),
                    "avg_baseline_prompt": g["answer_prompt_b"].mean(),
                    "avg_baseline_completion": g["answer_completion_b"].mean(),
                })
            for task, g in [*[(t, summ[summ["task"] == t]) for t in sorted(summ["task"].unique())], ("ALL", summ)]:
                if g.empty:
                    continue
                row = {"model": model, "task": task, "cases": len(g), "failed": int((g["status"] != "ok").sum())}
                for metric in ("consistency", "consistency_judge", "pass1", "retention", "retention_llm", "word_jaccard"):
                    if metric in g.columns:
                        # A failed case counts 0 (it stays in the denominator); an ok case whose
                        # judge reply did not parse (NULL) is left out, as in the store's tables.
                        row[metric] = g[metric].where(g["status"] == "ok", 0.0).mean()
                tables["quality"].append(row)
            source = base if not base.empty else summ
            for task, g in [*[(t, source[source["task"] == t]) for t in sorted(source["task"].unique())],
                            ("ALL", source)]:
                turns = g["n_turns"]
                tables["turns"].append({"model": model, "task": task, "cases": len(g), "avg_turns": turns.mean(),
                                        "2-turn": (turns == 2).mean(), "3-turn": (turns == 3).mean(),
                                        "4-turn": (turns == 4).mean(), ">=5-turn": (turns >= 5).mean()})
                if task == "ALL" or base.empty:
                    continue
                ok = g[g["status"] == "ok"]
                avg_prompt = ok["answer_prompt"].mean() if not ok.empty else float("nan")
                tables["suitability"].append({"model": model, "task": task, "avg_turns": turns.mean(),
                                              "avg_baseline_prompt": avg_prompt,
                                              "verdict": suitability(turns.mean(), avg_prompt, rule)})
        return {name: pd.DataFrame(rows) for name, rows in tables.items()}


def suitability(avg_turns: float, avg_prompt: float, rule: SuitabilityRule) -> str:
    """The report's rule, applied literally: enable at ≥ 4 turns and > 2,000 prompt tokens per
    case; disable at ≤ 2 turns or < 1,000 tokens; conditional in between.
    """
    if avg_turns >= rule.enable_min_turns and avg_prompt > rule.enable_min_prompt:
        return "enable"
    if avg_turns <= rule.disable_max_turns or avg_prompt < rule.disable_max_prompt:
        return "disable"
    return "conditional"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _turns(values: Sequence[float | None]) -> str:
    """Per-turn values as a compact JSON list for a score's ``detail``."""
    return "per_turn=" + json.dumps([None if v is None else round(v, 4) for v in values])


def _ratio(baseline: float, mode: float) -> float | None:
    return (baseline - mode) / baseline if baseline else None


def _savings(baseline: Sequence[float], mode: Sequence[float]) -> list[float]:
    return [(b - m) / b for b, m in zip(baseline, mode, strict=True) if b]
