"""LongMemEval — long-term memory of chat assistants (Wu et al., "LongMemEval: Benchmarking Chat
Assistants on Long-Term Interactive Memory", ICLR 2025; github.com/xiaowu0162/LongMemEval).

Reproduces the LongMemEval part of the trpc-agent-go summary benchmark
(``print-happy/trpc-agent-go-benchmark@1edee87``, ``summary/results/REPORT.md`` Table 6/7;
docs/sources.md#longmemeval-results): ``longmemeval_s_cleaned.json``, question type
``single-session-user``, the first 70 questions after the type filter (other types and files by
``--set dataset.question_types=...`` / ``dataset.variant`` / ``dataset.path``).

For each question its haystack sessions (~50 sessions, ~500 turns, ~103K tokens) are flattened in
order into one session, as events with their real roles, timestamped with their session dates.
The three modes mirror QMSum:

``long_context``
    instruction + every haystack event + the question, one call (103,565 prompt tokens published;
    a prompt beyond the model's window is recorded as a ``context_length`` failure).
``summary``
    the summary is force-built over the whole seeded history right after seeding (rolling steps
    when the summary model's window is small), then the question is answered from instruction +
    summary + question (445 prompt tokens published). ``[summary] prompt`` = ``compact`` (the
    framework default) or ``nine_section`` (Table 7).
``recall``
    ``summary`` plus ``session_search`` / ``session_load`` over the summarised-away history
    (search ``current_hidden`` first, at most 6 tool rounds).

Scores: ``rougeL``, ``f1``, ``bleu1`` (normalised as docs/sources.md#summary-benchmark-metrics
says), ``exact_match`` (the lowercased gold is a substring of the answer), ``llm_score`` (1.0 on exact match without a
call, else judge confidence when judged correct). Prompt savings vs ``long_context`` are the
mean of per-case savings (store ``token_savings``); the published Table 6 counts the prompt of the
last answer call of each run, so the columns compared with it are the ``*_last_call`` ones. ``--retrieval-only`` measures evidence
recall@k / hit@k of the ``session_search`` machinery against the ``has_answer`` turns, with no
model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import agentlab.bench.scoring.case_frames as case_frames
import agentlab.bench.scoring.evidence as evidence
from agentlab.bench.config import (
    AgentSettings,
    JudgeSettings,
    RetrievalSettings,
    RunSettings,
    Settings,
    generation_config,
)
from agentlab.bench.datasets.base import DatasetError
from agentlab.bench.datasets.longmemeval import (
    PUBLISHED_CASES,
    PUBLISHED_QUESTION_TYPE,
    QUESTION_TYPES,
    LongMemEvalQuestion,
    load_file_or_variant,
)
from agentlab.bench.facts import LAST_ANSWER_CALL, ModeRoles
from agentlab.bench.retention.delivery import Delivery, DeliveryMode, DeliverySetting, ToolDelivery
from agentlab.bench.retention.rows import HistoryGroup
from agentlab.bench.running.loops import run_sync
from agentlab.bench.scoring.metrics import Score, summary_scores
from agentlab.bench.tasks import (
    Case,
    CaseError,
    CaseResult,
    CaseSelection,
    RunContext,
    Task,
    check_window,
    collect_run,
    context_length_need,
    register,
)
from agentlab.bench.tasks.longmemeval_delivery import longmemeval_groups, longmemeval_tool_delivery
from agentlab.bench.tasks.longmemeval_history import (
    AGENT_NAME,
    APP_NAME,
    USER_ID,
    evidence_ids,
    haystack_events,
    seed_session,
)
from agentlab.bench.tasks.longmemeval_judge import LONGMEMEVAL_JUDGE
from agentlab.events import Event, Message
from agentlab.model.base import GenerationConfig, ModelError
from agentlab.recall import RecallPolicy
from agentlab.summary import SummaryPolicy

EVIDENCE_RECALL_VERSION = "lme-evidence-recall-v1/has_answer"

# -------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class LongMemEvalDataset(DeliverySetting):
    """``[dataset]``: which file and which questions run (the published 70 by default), how they are delivered."""

    #: Data file variant: ``s_cleaned`` is ``longmemeval_s_cleaned.json`` (~103K tokens per question).
    variant: str = "s_cleaned"
    #: An explicit file in the same schema (overrides ``variant``); empty: none.
    path: str = ""
    #: Question types to keep.
    question_types: tuple[str, ...] = (PUBLISHED_QUESTION_TYPE,)
    #: The first N questions after the type filter; 0 = all.
    max_cases: int = PUBLISHED_CASES

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_cases < 0:
            raise ValueError(f"max_cases must be >= 0 (0 = all); got {self.max_cases}")
        unknown = sorted(set(self.question_types) - set(QUESTION_TYPES))
        if not self.question_types or unknown:
            raise ValueError(f"question_types must be some of {', '.join(QUESTION_TYPES)}; got "
                             f"{list(self.question_types)}")


@dataclass(frozen=True)
class LongMemEvalSummary(SummaryPolicy):
    """``[summary]``: the summary policy, plus how many forced rolling steps the build may take."""

    #: Forced rolling summary updates at most (a small window needs several to cover the history).
    max_steps: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1; got {self.max_steps}")


# --------------------------------------------------------------------------------- prompts

INSTRUCTION_VERSION = "lme-answer-v1"
INSTRUCTION = """You are a chat assistant answering a question about your earlier conversations with this user.
Answer only from what those conversations contain; never invent details. If they do not contain
the answer, say that you do not know. Answer briefly and directly.
The question is being asked on {question_date}."""

RECALL_ADDON_VERSION = "lme-recall-addon-v1"
RECALL_ADDON = """Part of the earlier conversation is hidden behind the summary, and detail questions usually need it:
- Unless the summary already states the fact, call session_search with scope "current_hidden",
  using the real names and entities of the question as the query.
- If it finds nothing, rephrase the query once and search again.
- Read the context returned with the hits first; call session_load on the best hit only if that
  is not enough.
- Never say something is absent when the hits mention it, and never paste raw tool output."""


# ---------------------------------------------------------------------------------- asking


def instruction_for(question: LongMemEvalQuestion, recall: bool = False) -> str:
    """The answer instruction dated like the question (relative dates resolve); with ``recall``, the search advice."""
    text = INSTRUCTION.format(question_date=question.question_date)
    return f"{text}\n\n{RECALL_ADDON}" if recall else text


def long_context_prompt(question: LongMemEvalQuestion) -> list[Message]:
    """The ``long_context`` answer prompt: instruction, every haystack event, the question."""
    from agentlab.core.mechanism import events_to_messages

    return [Message.system(instruction_for(question)), *events_to_messages(haystack_events(question)),
            Message.user(question.question)]


async def evidence_at_k(service: Any, session: Any, question: LongMemEvalQuestion, policy: RecallPolicy,
                        ks: Sequence[int]) -> dict[str, float] | None:
    """``evidence_recall@k`` / ``evidence_hit@k`` of the ``session_search`` tool for one question, no model.

    The question is the query (:func:`agentlab.bench.scoring.evidence.evidence_at_k`, one search per ``k``);
    recall = share of the ``has_answer`` turns among the top k hits, hit = 1 if any of them is.
    ``None`` for a question without evidence (abstention): nothing is searched.
    """
    gold = evidence_ids(question)
    if not gold:
        return None
    return await evidence.evidence_at_k(service, session, policy, question.question, ks, evidence.id_grade(gold))


@dataclass(frozen=True)
class Mode:
    """What a mode adds to the one flow (seed the haystack, then ask the question)."""

    #: The summary is force-built over the whole haystack before the question (else it is sent whole).
    summary: bool
    #: ``session_search`` / ``session_load`` over what the summary hid, and evidence recall@k.
    recall: bool


#: The report's comparison: the summary loses what the long context holds, recall recovers it.
ROLES = ModeRoles(baseline="long_context", lossy="summary", recovered="recall")
#: The modes, looked up once per case (the module docstring says what each sends).
MODES: dict[str, Mode] = {"long_context": Mode(summary=False, recall=False),
                          "summary": Mode(summary=True, recall=False), "recall": Mode(summary=True, recall=True)}


# ------------------------------------------------------------------------------------ task


@register
class LongMemEvalTask(Task):
    """LongMemEval questions answered from the full haystack, a summary, or a summary plus session recall."""

    name = "longmemeval"
    version = "1"
    modes = tuple(MODES)
    default_mode = "recall"
    judge_templates = (LONGMEMEVAL_JUDGE,)
    mode_roles = ROLES
    published_token_rule = LAST_ANSWER_CALL
    description = "LongMemEval single-session-user (70): long context vs summary vs summary + session recall"

    def default_settings(self) -> dict[str, type[Any]]:
        """The sections; ``benchmarks/longmemeval.toml`` holds the published values."""
        return {"dataset": LongMemEvalDataset, "answer": GenerationConfig, "agent": AgentSettings,
                "summary": LongMemEvalSummary, "recall": RecallPolicy, "retrieval": RetrievalSettings,
                "judge": JudgeSettings, "run": RunSettings}

    # ---------------------------------------------------------------------------- cases

    def load_cases(self, settings: Settings) -> CaseSelection:
        """The questions of the chosen types (first ``max_cases`` when set), fingerprinted for the run id."""
        dataset = settings.of("dataset", LongMemEvalDataset)
        data = load_file_or_variant(dataset.path, dataset.variant)
        types = list(dataset.question_types)
        try:
            picked = data.select(types, limit=dataset.max_cases)
        except ValueError as exc:
            raise DatasetError(f"longmemeval: [dataset] question_types: {exc}") from None
        cases = [Case(
            id=q.question_id, question=q.question, reference=q.answer, data=q,
            metadata={"question_type": q.question_type, "question_date": q.question_date,
                      "sessions": len(q.sessions), "turns": sum(len(s.turns) for s in q.sessions),
                      "evidence_turns": len(q.evidence_turns()), "abstention": q.is_abstention,
                      "answer_session_ids": list(q.answer_session_ids)},
        ) for q in picked]
        limit = dataset.max_cases
        note = (f"{len(cases)} of {len(data.questions)} questions ({data.variant}; types {', '.join(types)}"
                + (f"; first {limit}" if limit else "") + ")")
        return CaseSelection(cases, dataset_sha256=data.sha256, loaded=len(data.questions), note=note)

    # ----------------------------------------------------------------------------- modes

    def policies(self, mode: str, settings: Settings) -> list[Any]:
        """Summary mode: the summary policy; recall mode: summary and recall policies."""
        return [p for p in self._policies(settings, mode) if p is not None]

    def _policies(self, settings: Settings, mode: str) -> tuple[LongMemEvalSummary | None, RecallPolicy | None]:
        """(summary policy, recall policy) of ``mode``: the ``[summary]`` / ``[recall]`` sections or None."""
        spec = MODES[mode]
        return (settings.of("summary", LongMemEvalSummary) if spec.summary else None,
                settings.of("recall", RecallPolicy) if spec.recall else None)

    # Generic arms (agentlab.policies.arms): the haystack seeded as today, the dated answer instruction.
    def history(self, case: Case, settings: Settings) -> list[Event]:
        """The question's whole haystack in order (what every mode is seeded with)."""
        return haystack_events(case.data)

    def tool_delivery(self, case: Case, settings: Settings, session_id: str) -> ToolDelivery:
        """Every haystack session opened in order with ``open_session(n)``."""
        return longmemeval_tool_delivery(case.data, session_id)

    def retention_groups(self, cases: Sequence[Case], settings: Settings, delivery: DeliveryMode) -> list[HistoryGroup]:
        """One group per question (each brings its own haystack), each ``has_answer`` turn a unit."""
        return longmemeval_groups([c.data for c in cases], Delivery(delivery), seed=haystack_events)

    def arm_instruction(self, case: Case, settings: Settings) -> str:
        """The answer instruction dated like the question."""
        return instruction_for(case.data)

    def arm_generation(self, settings: Settings) -> Any:
        """The ``[answer]`` generation config."""
        return generation_config(settings.section("answer"))

    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        """Seed the haystack and answer the question in ``mode`` with the agent."""
        from agentlab.runtime import LLMAgent, Runner

        if mode not in self.modes:
            raise CaseError(f"unknown mode {mode!r}", code="bad_mode")
        question: LongMemEvalQuestion = case.data
        settings = ctx.settings
        summary_policy, recall_policy = self._policies(settings, mode)
        agent = LLMAgent(AGENT_NAME, ctx.model, instruction=instruction_for(question, recall_policy is not None),
                         summary=summary_policy, recall=recall_policy, generation=self.arm_generation(settings),
                         max_tool_iterations=settings.of("agent", AgentSettings).max_tool_iterations)
        service = ctx.new_session_service()
        runner = Runner(APP_NAME, agent, service)
        session_id = f"{case.id}-{mode}"
        metadata: dict[str, Any] = {"prompt_version": INSTRUCTION_VERSION}
        # Sent whole: a context-length failure without sending ~100k tokens to a model that cannot take them.
        need = check_window(long_context_prompt(question), ctx) if summary_policy is None else None
        try:
            session = await seed_session(service, question, session_id)
            if recall_policy is not None:
                # Before the run: afterwards the session also holds the question and tool results.
                ks = [k for k in settings.of("retrieval", RetrievalSettings).ks if k <= recall_policy.max_search_top_k]
                metadata.update(await evidence_at_k(service, session, question, recall_policy, ks) or {})
            if summary_policy is not None:
                metadata.update(await self._force_summary(runner, service, session, summary_policy.max_steps))
            with context_length_need(need):
                outcome = await collect_run(runner.run(USER_ID, session_id, case.question, options=ctx.run_options()))
        finally:
            await runner.close()
        metadata["tool_calls"] = outcome.tool_calls
        if recall_policy is not None:
            metadata["recall_prompt_version"] = RECALL_ADDON_VERSION
        return CaseResult(prediction=outcome.answer, compactions=outcome.compactions, metadata=metadata)

    async def _force_summary(self, runner: Any, service: Any, session: Any, max_steps: int) -> dict[str, Any]:
        """Summarise the whole seeded history, in rolling steps when the summary model's window is small."""
        from agentlab.summary import summarise_all

        worker = runner.summary_worker
        done = await summarise_all(worker, session, "", max_steps=max_steps)
        summary, steps, remaining = done.summary, done.steps, done.remaining
        error = worker.stats.last_error
        reason = f"{type(error).__name__}: {error}" if error is not None else (
            f"[summary] max_steps = {max_steps} reached" if done.hit_max_steps else "an update did not advance it")
        if summary is None or not summary.text:
            raise CaseError(f"the summary could not be built ({reason})", code="summary_failed")
        if remaining:
            # As in QMSum: an answer from a summary that stopped short of the history is not the
            # summary mode being measured, so the case fails (and counts 0) instead of scoring.
            total = done.total
            code = error.code if isinstance(error, ModelError) else "summary_incomplete"
            raise CaseError(f"the summary covers {total - remaining} of {total} events after {steps} forced "
                            f"updates ({reason})", code=code)
        return {"summary_steps": steps, "summary_chars": len(summary.text), "events_not_summarised": remaining}

    # ---------------------------------------------------------------------------- scores

    async def score(self, case: Case, result: CaseResult, ctx: RunContext) -> list[Score]:
        """F1 / ROUGE / exact match, recall mode's evidence recall, and the judge's LLMScore
        (fixed denominator: an unparsable verdict counts 0).
        """
        scores = summary_scores(result.prediction, case.reference, exact=True)
        for name, value in sorted(result.metadata.items()):
            if name.startswith(("evidence_recall@", "evidence_hit@")):
                scores.append(Score(name, float(value), EVIDENCE_RECALL_VERSION))
        if ctx.judge is not None:
            # Fixed denominator, as published: an unparsable verdict counts 0 rather than leaving the mean.
            judged = await ctx.judge.grade(LONGMEMEVAL_JUDGE, query=case.question, reference=case.reference,
                                           prediction=result.prediction)
            scores += judged.to_scores("llm_score", unparsed_scores_zero=True)
        return scores

    # ------------------------------------------------------------------------ dry run

    def dry_run_prompts(self, case: Case, mode: str, settings: Settings) -> list[list[Message]]:
        """``long_context``: the answer prompt. ``summary`` / ``recall``: the summariser's prompt over the
        whole seeded history (a model with a small window splits it into rolling steps).
        """
        question: LongMemEvalQuestion = case.data
        summary_policy, _ = self._policies(settings, mode)
        if summary_policy is None:
            return [long_context_prompt(question)]
        from agentlab.summary import Summarizer, render_event_line

        summariser = Summarizer(None, summary_policy)  # type: ignore[arg-type]  # rendering needs no model
        return [summariser.render_prompt([render_event_line(e) for e in haystack_events(question)], "")]

    # ---------------------------------------------------------------------------- report

    def report_tables(self, store: Any) -> dict[str, Any]:
        """Table 6 of the report: quality, prompt tokens and savings, summary size, tool use, latency."""
        import pandas as pd

        cases = case_frames.case_tokens(store, self.name, ("answer",), columns=("answer_prompt_last", "answer_latency_ms"))
        if cases.empty:
            return {}
        meta = case_frames.case_metadata(cases)
        cases["summary_chars"] = [m.get("summary_chars") for m in meta]
        cases["search_calls"] = [(m.get("tool_calls") or {}).get("session_search", 0) for m in meta]
        cases["load_calls"] = [(m.get("tool_calls") or {}).get("session_load", 0) for m in meta]
        # Failed cases score 0: they stay in the denominator (as does an ok case left unscored).
        case_frames.zero_failed(cases, ("rougeL", "f1", "bleu1", "exact_match"), if_scored=("llm_score",))
        metrics = [m for m in ("rougeL", "f1", "bleu1", "llm_score", "exact_match") if m in cases.columns]
        baseline = ROLES.baseline
        rows = []
        for (model, mode), group in cases.groupby(["model", "mode"]):
            ok = group[group["status"] == "ok"]
            row: dict[str, Any] = {"model": model, "mode": mode, "n": len(group), "failed": len(group) - len(ok)}
            row.update({m: group[m].fillna(0.0).mean() for m in metrics})
            # Prompt tokens by the published rule (the last answer call of the run, which holds the
            # tool results of a recall run) and, beside it, summed over every answer call.
            row["avg_prompt_tokens_last_call"] = ok["answer_prompt_last"].mean() if len(ok) else None
            row["avg_prompt_tokens_all_calls"] = ok["answer_prompt"].mean() if len(ok) else None
            long = cases[(cases["model"] == model) & (cases["mode"] == baseline) & (cases["status"] == "ok")]
            paired = ok.merge(long[["case_id", "answer_prompt_last"]], on="case_id", suffixes=("", "_long"))
            paired = paired[paired["answer_prompt_last_long"] > 0]
            row["prompt_savings_vs_long_last_call"] = (
                (1 - paired["answer_prompt_last"] / paired["answer_prompt_last_long"]).mean()
                if mode != baseline and len(paired) else None)
            row["avg_summary_chars"] = ok["summary_chars"].dropna().mean() if len(ok) else None
            row["search_calls_per_case"] = ok["search_calls"].mean() if len(ok) else None
            row["load_calls_per_case"] = ok["load_calls"].mean() if len(ok) else None
            row["avg_answer_latency_ms"] = ok["answer_latency_ms"].mean() if len(ok) else None
            rows.append(row)
        return {"modes": pd.DataFrame(rows)}

    # ---------------------------------------------------------------------- retrieval only

    def retrieval_only(self, cases: Sequence[Case], mode: str, settings: Settings) -> dict[str, Any]:
        """Evidence recall@k / hit@k of ``session_search`` (query = the question) against the
        ``has_answer`` turns, searching the whole flattened history as ``current_hidden`` sees it
        once the summary covers everything. Questions without evidence (abstention) are left out.
        """
        ks = sorted(set(settings.of("retrieval", RetrievalSettings).ks))
        policy = settings.of("recall", RecallPolicy)
        if ks[-1] > policy.max_search_top_k:
            raise ValueError(f"[retrieval] ks go up to {ks[-1]} but session_search returns at most "
                             f"{policy.max_search_top_k} hits ([recall] max_top_k)")

        async def each() -> list[dict[str, float] | None]:
            from agentlab.session.inmemory import InMemorySessionService

            found = []
            for case in cases:
                service = InMemorySessionService()
                session = await seed_session(service, case.data, f"{case.id}-probe")
                found.append(await evidence_at_k(service, session, case.data, policy, ks))
            return found

        rows = run_sync(each())
        return {"retrieval": "session_search (query = the question, whole history)",
                "search_mode": policy.effective_search_mode, "ks": ks, "questions": len(cases),
                "with_evidence": sum(r is not None for r in rows), **evidence.mean_at_k(rows, ks, prefix="evidence_")}
