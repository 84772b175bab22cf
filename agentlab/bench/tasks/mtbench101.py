"""MT-Bench-101 — rolling summary vs full history on multi-turn dialogues (Bai et al.,
"MT-Bench-101: A Fine-Grained Benchmark for Evaluating Large Language Models in Multi-Turn
Dialogues", ACL 2024; github.com/mtbench101/mt-bench-101).

Reproduces the summary benchmark of trpc-agent-go (``print-happy/trpc-agent-go-benchmark@1edee87``,
``summary/results/REPORT.md``; docs/sources.md#summary-benchmark-setup): the 9 tasks of the
published run (CC, CM, GR, IC, PI, SA, SC, SI, TS = 917 dialogues; AR, CR, FR, MR by ``--set dataset.tasks=...``). The
agent answers each user turn of a dialogue in order; the dataset gives only the user turns, the
agent's own answers become the history.

``baseline``
    Full history: every request holds all earlier turns.
``summary``
    Rolling summary as published: trigger ``events_over(2)`` combined any-of (fires once the
    un-summarised delta holds more than 2 events, i.e. after turn 2), a background worker (1
    worker, queue 10, 30 s), the ``compact`` prompt, summary injected in the system message. By
    default the next turn waits for a queued summary job (``[summary] wait_between_turns``) so
    runs are deterministic and replayable; the published harness did not wait.

Scores of a summary-mode case compare its answers with the **baseline answers of the same
case**, looked up — never recomputed — first in the results store when the harness exposes one
(``ctx.store``; the newest ``ok`` baseline case of the same model and ``[answer]`` settings), else
in the call cache (the baseline conversation is replayed from recorded calls only). When neither
has them the case fails with code ``baseline_missing`` and a message to run the baseline first.

* ``consistency_judge`` — mean over turns of the judge's rubric score (1.0 same content … 0.0
  contradictory) for summary-mode answer B vs baseline answer A (judge parse failures are left
  out of the mean and counted);
* ``consistency`` — the reference-compatible value ``0.4 + 0.6 × consistency_judge`` (its
  SummaryComparator adds a 0.4 tool-trajectory term that always matches without tools, so 0.4 is
  a floor);
* ``pass1`` — 1 when ``consistency`` ≥ 0.7 (Pass^1 of a single run);
* ``retention`` — the reference's rule-based key-information retention
  (:func:`agentlab.bench.metrics.retention`); ``retention_llm`` with ``[retention] llm = true``;
* ``word_jaccard`` — the reference's LLM-free similarity fallback, for runs without a judge.

Token savings come from the store (answer-call usage, summary-generation calls in their own
``summary`` purpose): :meth:`MTBench101Task.report_tables` gives the published tables per task —
prompt and total savings without summary tokens (as published) and with them, p25/p50/p75 and
negative-savings rate of per-case total savings, quality, turn distribution and the suitability
rule.

"The reference" in this module is the published benchmark harness named above
(docs/sources.md#summary-benchmark-metrics).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.bench.config import JudgeSettings, RunSettings, Settings, generation_config
from agentlab.bench.datasets.mtbench101 import ALL_TASKS, PUBLISHED_TASKS, Dialogue, load_mtbench101
from agentlab.bench.facts import SUM_ANSWER_CALLS, ModeRoles
from agentlab.bench.metrics import Score, percentile, retention, version_of
from agentlab.bench.tasks import (
    Case,
    CaseError,
    CaseResult,
    CaseSelection,
    RunContext,
    Task,
    collect_run,
    project_prompt,
    register,
)
from agentlab.bench.tasks.mtbench101_judge import CONSISTENCY_JUDGE, RETENTION_LLM_JUDGE
from agentlab.bench.tasks.mtbench101_judge import parse_retention_rate as parse_retention_rate  # re-export
from agentlab.compaction import CompactionPolicy
from agentlab.events import OBJ_USER, Event, Message
from agentlab.model.base import GenerationConfig, ModelRequest, ModelResponse
from agentlab.policy import PolicyJSON
from agentlab.summary import SummaryPolicy

APP_NAME = "mtbench101"
USER_ID = "mtbench-user"
AGENT_NAME = "assistant"

# --------------------------------------------------------------------------------- prompts

#: The published agent had no instruction; an empty instruction sends no system message.
ANSWER_INSTRUCTION_VERSION = "mtbench-answer-v1"
ANSWER_INSTRUCTION = ""

#: Consistency value the reference counts as a pass (Pass^1).
PASS_THRESHOLD = 0.7
#: Weights of the reference's consistency: tool trajectory (always matching here) and judge.
TRAJECTORY_WEIGHT = 0.4
JUDGE_WEIGHT = 0.6


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


# ----------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class MTBenchDataset(PolicyJSON):
    """``[dataset]``: which MT-Bench-101 tasks run."""

    #: Task codes (the published 9 = 917 dialogues); ``["ALL"]`` = all 13 tasks.
    tasks: tuple[str, ...] = PUBLISHED_TASKS

    def __post_init__(self) -> None:
        tasks = [t.strip().upper() for t in self.tasks]
        unknown = sorted(set(tasks) - set(ALL_TASKS))
        if not tasks or (tasks != ["ALL"] and unknown):
            raise ValueError(f"tasks must be some of {', '.join(sorted(ALL_TASKS))} or ALL; got {list(self.tasks)}")


@dataclass(frozen=True)
class MTBenchAnswer(GenerationConfig):
    """``[answer]``: the answer calls' generation config, plus the agent's instruction."""

    #: System instruction of the answering agent (the published agent had none).
    instruction: str = ANSWER_INSTRUCTION


@dataclass(frozen=True)
class MTBenchSummary(SummaryPolicy):
    """``[summary]``: the rolling summary policy, plus whether a turn waits for a queued summary."""

    #: The next turn waits for a queued summary (ours: deterministic replay; the published
    #: service summarised asynchronously).
    wait_between_turns: bool = True


@dataclass(frozen=True)
class ConsistencySettings(PolicyJSON):
    """``[consistency]``: the Pass^1 rule."""

    #: A case passes when its consistency (0.4 + 0.6 x judge) is at least this.
    pass_threshold: float = PASS_THRESHOLD

    def __post_init__(self) -> None:
        if not 0.0 <= self.pass_threshold <= 1.0:
            raise ValueError(f"pass_threshold must be in [0, 1]; got {self.pass_threshold}")


@dataclass(frozen=True)
class RetentionSettings(PolicyJSON):
    """``[retention]``: whether the LLM retention score is added to the rule-based one."""

    #: Add ``retention_llm`` (one judge call per turn); the rule-based retention is always computed.
    llm: bool = False


@dataclass(frozen=True)
class SuitabilityRule(PolicyJSON):
    """``[suitability]``: the report's rule for when to enable summaries, applied literally."""

    #: Enable at >= this many average turns ...
    enable_min_turns: float = 4.0
    #: ... and more than this many average baseline prompt tokens.
    enable_min_prompt: float = 2000.0
    #: Disable at <= this many average turns ...
    disable_max_turns: float = 2.0
    #: ... or fewer than this many average baseline prompt tokens.
    disable_max_prompt: float = 1000.0


class BaselineMissing(Exception):
    """The baseline answers of a case are in neither the store nor the call cache."""


class _ReplayOnly:
    """Answers only from a call cache, never calling the model and never reporting a call.

    Used to read the baseline answers back: the baseline conversation is replayed through the
    exact baseline code path, so its requests (and their cache keys) are the recorded ones.
    """

    def __init__(self, cached: Any) -> None:
        self.inner = cached.inner
        self.cache = cached.cache

    @property
    def info(self) -> Any:
        return self.inner.info

    async def generate(self, request: ModelRequest) -> ModelResponse:
        stored = self.cache.get(request.cache_key(self.inner.info.name))
        if stored is None:
            raise BaselineMissing("a baseline call is not in the call cache")
        return ModelResponse(message=stored.message, usage=stored.usage, model=stored.model,
                             finish_reason=stored.finish_reason, cache_hit=True)

    async def stream(self, request: ModelRequest) -> Any:  # pragma: no cover - the agent does not stream here
        raise BaselineMissing("streaming replay is not supported")


def _turn_usage(outcome: Any) -> tuple[int, int]:
    usage = outcome.final_event.usage
    return (usage.prompt_tokens, usage.completion_tokens) if usage is not None else (0, 0)


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
    published_token_rule = SUM_ANSWER_CALLS
    tool_delivery_inapplicable = ("its history is the dialogue itself, answered and judged turn by turn; there is no "
                                  "document or session store for a tool to read (dataset.delivery is for QMSum, "
                                  "LoCoMo and LongMemEval)")
    description = "MT-Bench-101: 917 multi-turn dialogues, rolling summary vs full history (consistency, savings)"

    def default_settings(self) -> dict[str, type[Any]]:
        """The sections; ``benchmarks/mtbench101.toml`` holds the published values."""
        return {"dataset": MTBenchDataset, "answer": MTBenchAnswer, "summary": MTBenchSummary,
                "consistency": ConsistencySettings, "retention": RetentionSettings, "suitability": SuitabilityRule,
                "compaction": CompactionPolicy, "judge": JudgeSettings, "run": RunSettings}

    def policies(self, mode: str, settings: Settings) -> list[Any]:
        """Summary mode runs the ``[summary]`` policy; the baseline none."""
        return [settings.of("summary", MTBenchSummary)] if mode == "summary" else []

    # ---------------------------------------------------------------------------- cases

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

    # -------------------------------------------------------------------------- dialogue

    def _agent(self, settings: Settings, model: Any, *, with_summary: bool, mechanisms: Sequence[Any] = ()) -> Any:
        from agentlab.runtime import LLMAgent

        answer = settings.of("answer", MTBenchAnswer)
        return LLMAgent(AGENT_NAME, model, instruction=answer.instruction,
                        summary=settings.of("summary", MTBenchSummary) if with_summary else None,
                        generation=generation_config(answer), max_tool_iterations=1, mechanisms=mechanisms)

    async def converse(self, dialogue: Dialogue, settings: Settings, model: Any, session_service: Any, *,
                       with_summary: bool, session_id: str, options: Any = None,
                       mechanisms: Sequence[Any] = ()) -> dict[str, Any]:
        """Answer every user turn in order; return answers and per-turn facts.

        ``options``: the ``RunOptions`` of every turn (``ctx.run_options()``: the run's context budget);
        ``mechanisms``: a generic arm's.
        """
        from agentlab.runtime import Runner

        agent = self._agent(settings, model, with_summary=with_summary, mechanisms=mechanisms)
        runner = Runner(APP_NAME, agent, session_service)
        wait = settings.of("summary", MTBenchSummary).wait_between_turns
        answers: list[str] = []
        prompt_tokens: list[int] = []
        completion_tokens: list[int] = []
        summary_chars: list[int] = []
        try:
            for turn in dialogue.turns:
                outcome = await collect_run(runner.run(USER_ID, session_id, turn.user, options=options))
                answers.append(outcome.answer)
                p, c = _turn_usage(outcome)
                prompt_tokens.append(p)
                completion_tokens.append(c)
                if with_summary and runner.summary_worker is not None:
                    if wait:
                        await runner.summary_worker.drain()
                    session = await session_service.get_session(APP_NAME, USER_ID, session_id)
                    summary = session.summaries.get("") if session is not None else None
                    summary_chars.append(len(summary.text) if summary is not None else 0)
        finally:
            await runner.close()
        out: dict[str, Any] = {"turn_answers": answers, "turn_prompt_tokens": prompt_tokens,
                               "turn_completion_tokens": completion_tokens}
        if with_summary:
            out["turn_summary_chars"] = summary_chars
        return out

    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        """Converse the whole dialogue; ``summary`` mode also fetches the baseline answers it is scored against."""
        dialogue: Dialogue = case.data
        if mode == "baseline":
            facts = await self.converse(dialogue, ctx.settings, ctx.model, ctx.new_session_service(),
                                        with_summary=False, session_id=f"{case.id}-baseline", options=ctx.run_options())
            return CaseResult(prediction=facts["turn_answers"][-1], metadata=facts)
        if mode != "summary":
            raise CaseError(f"unknown mode {mode!r}", code="bad_mode")
        # Look the baseline up first: without it the case cannot be scored, so spend nothing.
        baseline, source = await self.baseline_answers(case, ctx)
        facts = await self.converse(dialogue, ctx.settings, ctx.model, ctx.new_session_service(),
                                    with_summary=True, session_id=f"{case.id}-summary", options=ctx.run_options())
        facts.update({"baseline_answers": baseline, "baseline_source": source})
        return CaseResult(prediction=facts["turn_answers"][-1], metadata=facts)

    async def run_generic(self, case: Case, arm: Any, ctx: RunContext) -> CaseResult:
        """A generic arm in MT-Bench-101's per-turn flow: every turn answered live with the arm's mechanisms,
        scored against the baseline's answers like ``summary``.
        """
        baseline, source = await self.baseline_answers(case, ctx)
        facts = await self.converse(case.data, ctx.settings, ctx.model, ctx.new_session_service(), with_summary=False,
                                    session_id=f"{case.id}-{arm.name}", options=ctx.run_options(),
                                    mechanisms=arm.mechanisms(ctx.settings, ctx.model))
        facts.update({"arm": arm.name, "baseline_answers": baseline, "baseline_source": source})
        return CaseResult(prediction=facts["turn_answers"][-1], metadata=facts)

    def generic_dry_run(self, case: Case, arm: Any, settings: Settings) -> list[list[Message]]:
        """Every turn's prompt, the golden answers standing in for the model's, projected by the arm's mechanisms."""
        dialogue: Dialogue = case.data
        instruction = settings.of("answer", MTBenchAnswer).instruction
        history: list[Event] = []
        prompts = []
        for i, turn in enumerate(dialogue.turns):
            prompts.append(project_prompt(history, arm.mechanisms(settings, None), turn.user, instruction))
            history += [Event(author="user", choices=[Message.user(turn.user)], object=OBJ_USER, id=f"t{i}-u"),
                        Event(author=AGENT_NAME, choices=[Message.assistant(turn.bot)], id=f"t{i}-a")]
        return prompts

    # -------------------------------------------------------------------- baseline lookup

    async def baseline_answers(self, case: Case, ctx: RunContext) -> tuple[list[str], str]:
        """The baseline run's answers for this case: (answers, "store" | "call_cache")."""
        if ctx.store is not None:
            found = baseline_from_store(ctx.store, case.id, ctx.model_spec, ctx.settings)
            if found is not None:
                return found, "store"
        if hasattr(ctx.model, "cache") and hasattr(ctx.model, "inner"):
            try:
                facts = await self.converse(case.data, ctx.settings, _ReplayOnly(ctx.model), ctx.new_session_service(),
                                            with_summary=False, session_id=f"{case.id}-baseline-replay")
                return facts["turn_answers"], "call_cache"
            except BaselineMissing:
                pass
        raise CaseError(
            f"no baseline answers for {case.id} with model {ctx.model_spec!r} and these [answer] settings: run "
            f"`python -m agentlab.bench mtbench101 --mode baseline` (same model, settings and --limit) first; "
            f"if it ran, its case {case.id} failed and has no answers to compare with",
            code="baseline_missing",
        )

    # ---------------------------------------------------------------------------- scores

    async def score(self, case: Case, result: CaseResult, ctx: RunContext) -> list[Score]:
        """Per-case scores; each row's ``detail`` holds the per-turn values as JSON."""
        if "baseline_answers" not in result.metadata:
            return []  # baseline cases are the reference, not scored
        dialogue: Dialogue = case.data
        baseline: list[str] = list(result.metadata["baseline_answers"])
        answers: list[str] = list(result.metadata["turn_answers"])
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
        if ctx.judge is not None:
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
        if mode == "baseline":
            return prompts
        from agentlab.summary import Summarizer

        policy = settings.of("summary", MTBenchSummary)
        first = dialogue.turns[: max(1, ((policy.events_over or 0) + 2) // 2)]
        lines = [line for t in first for line in (f"user: {t.user}", f"{AGENT_NAME}: {t.bot}")]
        summariser = Summarizer(None, policy)  # type: ignore[arg-type]  # rendering needs no model
        return [*prompts[: len(first)], summariser.render_prompt(lines, "")]

    # ---------------------------------------------------------------------------- report

    def report_tables(self, store: Any) -> dict[str, Any]:
        """The published tables per task: token efficiency, quality, turns, suitability."""
        import pandas as pd

        cases = _current_cases(store, self.name)
        if cases.empty:
            return {}
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


def _current_cases(store: Any, benchmark: str) -> Any:
    """One row per case of the run shown for each (model, mode) (store.PRIMARY_RUNS_CTE), with tokens by purpose and scores."""
    cases = store.current_runs_df(
        """
        SELECT r.model, r.mode, c.run_id, c.case_id, c.status, c.metadata,
            COALESCE(SUM(k.prompt_tokens) FILTER (WHERE k.purpose = 'answer'), 0) AS answer_prompt,
            COALESCE(SUM(k.completion_tokens) FILTER (WHERE k.purpose = 'answer'), 0) AS answer_completion,
            COALESCE(SUM(k.prompt_tokens) FILTER (WHERE k.purpose = 'summary'), 0) AS summary_prompt,
            COALESCE(SUM(k.completion_tokens) FILTER (WHERE k.purpose = 'summary'), 0) AS summary_completion
        FROM current_runs r JOIN cases c ON c.run_id = r.run_id
        LEFT JOIN calls k ON k.run_id = c.run_id AND k.case_id = c.case_id
        GROUP BY ALL
        """, benchmark)
    if cases.empty:
        return cases
    meta = [json.loads(m) if isinstance(m, str) else (m or {}) for m in cases["metadata"]]
    cases["task"] = [m.get("task") for m in meta]
    cases["n_turns"] = [int(m.get("n_turns") or 0) for m in meta]
    cases["answer_total"] = cases["answer_prompt"] + cases["answer_completion"]
    cases["summary_total"] = cases["summary_prompt"] + cases["summary_completion"]
    scores = store.df("SELECT run_id, case_id, metric, value FROM scores WHERE run_id IN "
                      "(SELECT run_id FROM runs WHERE benchmark = ?)", [benchmark])
    if not scores.empty:
        wide = scores.pivot_table(index=["run_id", "case_id"], columns="metric", values="value", aggfunc="first")
        cases = cases.merge(wide.reset_index(), on=["run_id", "case_id"], how="left")
    for metric in ("retention", "word_jaccard"):  # scored on every ok summary case, judge or not
        if metric not in cases.columns:
            cases[metric] = float("nan")  # no case scored yet (all failed): they still count 0
    return cases


def baseline_from_store(store: Any, case_id: str, model_spec: str, settings: Settings) -> list[str] | None:
    """Turn answers of the newest ``ok`` baseline case with the same model and ``[answer]`` settings."""
    rows = store.query(
        "SELECT r.config, c.metadata FROM cases c JOIN runs r USING (run_id) WHERE r.benchmark = 'mtbench101' "
        "AND r.mode = 'baseline' AND r.model = ? AND c.case_id = ? AND c.status = 'ok' ORDER BY r.started DESC",
        [model_spec, case_id])
    for config, metadata in rows:
        config = json.loads(config) if isinstance(config, str) else config
        if (config or {}).get("settings", {}).get("answer") != settings["answer"]:
            continue
        meta = json.loads(metadata) if isinstance(metadata, str) else (metadata or {})
        answers = meta.get("turn_answers")
        if isinstance(answers, list) and answers:
            return [str(a) for a in answers]
    return None
