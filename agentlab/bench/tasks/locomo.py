"""LoCoMo — very long-term conversational memory (Maharana et al., "Evaluating Very Long-Term
Conversational Memory of LLM Agents", ACL 2024; github.com/snap-research/LoCoMo).

Reproduces the memory benchmark of trpc-agent-go (``trpc-group/trpc-agent-go-benchmark@3b99bba``,
``memory/results/REPORT.md``; docs/sources.md#locomo-setup): all 10 conversations of ``locomo10.json`` and
their 1,986 questions, answered in three modes.

``long_context``
    One model call per question: a single system message with the instruction, the whole
    transcript (each session headed by its ``SessionDate`` line, one ``Speaker: text`` line per
    message; image captions off, as published) and the question. Published: 18,767 prompt tokens
    per question with gpt-4o-mini.
``session_recall``
    Every LoCoMo session is seeded as its own session of one user (the conversation): the first
    speaker as ``user``, the second as ``assistant``, each message prefixed ``[SessionDate: …] ``
    and timestamped with its session date. Each question is asked in a fresh session with preload
    recall (top-k 30, min score 0.3; lexical BM25 here, hybrid when an embedder is configured) —
    one model call per question. The question sessions run under their own filter key so that a
    question never recalls another question's session.
``memory``
    Auto extraction over each seeded session in order (one extraction pass per session, the
    selected update policy), then the question is answered with ``memory_search`` (or with
    relevant memories preloaded, ``[memory] qa = "preload"``).

Scores (two different "F1"s, kept apart by name; docs/sources.md#metric-pitfalls):

* ``locomo_f1`` — the official ``task_eval/evaluation.py`` score: Porter-stemmed multiset F1,
  comma-split multi-answer F1 for category 1, category-3 gold cut at ``;``, and for category 5
  (adversarial) 1 iff the answer says "not mentioned" / "no information available".
* ``set_f1`` — mem0's set-overlap F1; ``bleu1`` — clipped unigram precision × brevity penalty;
  ``llm_score`` — judge confidence when judged CORRECT, else 0.
* For category 5 the gold text used by ``set_f1``, ``bleu1`` and the judge is the refusal
  :data:`ADVERSARIAL_REFERENCE` (the item's ``adversarial_answer`` is the trap, kept in metadata);
  every prompt's fallback phrase is that same refusal, so the official rule can recognise it.

Every case keeps its raw category number and three name mappings (official ``evaluation.py``,
the published report's, and mem0's maintainers' from mem0 issue #2609), which the report tables
(:mod:`.locomo_report`) show per category and weighted, dividing by all questions. ``--retrieval-only``
measures retrieval without any model (:mod:`agentlab.bench.retrieval.locomo`): the preload window
of session recall, or with ``--unit`` the paper's own recall protocol. Prompts:
:mod:`.locomo_prompts`; the conversation as transcript and events: :mod:`.locomo_history`.

Known difference from the published numbers: the report's "F1" is neither of the above (its
``metrics.go`` drops ~60 stop words and applies no category rule) and its adversarial gold was
"The information is not available."; compare ``locomo_f1`` with the official LoCoMo scorer, not
with the report's F1 column.
"""


from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import fields as dataclass_fields
from dataclasses import replace
from typing import Any, ClassVar, NamedTuple, cast

import agentlab.bench.tasks.locomo_prompts as prompts
from agentlab.bench.config import JudgeSettings, RetrievalSettings, RunSettings, Settings, generation_config
from agentlab.bench.datasets.locomo import (
    ADVERSARIAL_CATEGORY,
    Conversation,
    LoCoMoData,
    category_names,
    load_locomo,
)
from agentlab.bench.facts import SUM_ANSWER_CALLS, ModeRoles
from agentlab.bench.retention.delivery import Delivery, DeliveryMode, ToolDelivery
from agentlab.bench.retention.rows import HistoryGroup
from agentlab.bench.running.loops import run_sync
from agentlab.bench.scoring.metrics import (
    Score,
    bleu1,
    locomo_adversarial_correct,
    locomo_f1,
    set_f1,
    version_of,
)
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
from agentlab.bench.tasks.locomo_delivery import locomo_groups, locomo_tool_delivery
from agentlab.bench.tasks.locomo_history import (
    AGENT_NAME,
    APP_NAME,
    LoCoMoItem,
    evidence_dia_ids,
    hit_dia_ids,
    render_transcript,
    seed_plan,
    seed_sessions,
)
from agentlab.bench.tasks.locomo_judge import LOCOMO_JUDGE
from agentlab.bench.tasks.locomo_prompts import ADVERSARIAL_REFERENCE, FALLBACK_ANSWER
from agentlab.bench.tasks.locomo_settings import LoCoMoDataset, LoCoMoMemory
from agentlab.events import Event, Message
from agentlab.memory.policies import MemoryPolicy
from agentlab.model.base import GenerationConfig, ModelRequest
from agentlab.recall import RecallPolicy

# -------------------------------------------------------------------------------- settings


def recall_policy(settings: Settings) -> RecallPolicy:
    """The ``[recall]`` section: preload-only recall as published (no tools, top-k 30, min score 0.3)."""
    return settings.of("recall", RecallPolicy)


def memory_policy(settings: Settings, *, for_questions: bool) -> MemoryPolicy:
    """Extraction policy (``for_questions=False``) or the question-time policy (no extraction)."""
    memory = settings.of("memory", LoCoMoMemory)
    preload = memory.qa == "preload"
    base = MemoryPolicy(**{f.name: getattr(memory, f.name) for f in dataclass_fields(MemoryPolicy)})
    return replace(base, auto_extract=not for_questions, search_tool=for_questions and not preload,
                   preload_limit=memory.search_top_k if for_questions and preload else 0)


def _captions(settings: Settings) -> bool:
    return settings.of("dataset", LoCoMoDataset).include_image_captions


# ---------------------------------------------------------------------------------- asking


def long_context_messages(conversation: Conversation, question: str, include_captions: bool = False) -> list[Message]:
    """The ``long_context`` answer prompt: the whole conversation and the question in one system message."""
    prompt = prompts.LONG_CONTEXT_PROMPT.format(fallback=FALLBACK_ANSWER, question=question,
                                                transcript=render_transcript(conversation, include_captions))
    return [Message.system(prompt)]


async def question_preload(service: Any, conversation: Conversation, case: Case, policy: RecallPolicy) -> list[Any]:
    """The preload hits of a question's own session (``qa-<id>``, filter key ``qa/<id>``) over the seeded sessions."""
    from agentlab.recall.preload import preload_outside_run

    return await preload_outside_run(service, APP_NAME, conversation.sample_id, f"qa-{case.id}", case.question, policy,
                                     filter_key=f"qa/{case.id}")


def _model_calls(events: Sequence[Event]) -> int:
    """Model responses in a run: events that carry usage."""
    return sum(1 for e in events if e.usage is not None)


class Flow(NamedTuple):
    """One mode, in one place: how it answers a case, what a dry run counts, and what it runs with."""

    answer: Callable[[LoCoMoTask, Case, RunContext], Awaitable[CaseResult]]
    prompts: Callable[[LoCoMoTask, Case, Settings], list[list[Message]]]
    policies: Callable[[Settings], list[Any]]


@register
class LoCoMoTask(Task):
    """LoCoMo-10 QA answered from the whole conversation, by session recall, or from extracted memories."""

    name = "locomo"
    version = "1"
    modes = ("long_context", "session_recall", "memory")
    default_mode = "session_recall"
    judge_templates = (LOCOMO_JUDGE,)
    # session_recall and memory are compared with the long context; no lossy/recovered pair.
    mode_roles = ModeRoles(baseline="long_context")
    published_token_rule = SUM_ANSWER_CALLS
    description = "LoCoMo-10: 1,986 QA over 10 long conversations (long context, session recall, auto memory)"
    #: ``--unit`` values: the LoCoMo paper's retrieval protocol (:mod:`agentlab.bench.retrieval.locomo`).
    retrieval_units = ("dialog", "observation", "summary")

    def __init__(self) -> None:
        self._data: LoCoMoData | None = None
        self._probe_services: dict[tuple[str, bool], Any] = {}

    def default_settings(self) -> dict[str, type[Any]]:
        """The sections; ``benchmarks/locomo.toml`` holds the published values."""
        return {"dataset": LoCoMoDataset, "answer": GenerationConfig, "recall": RecallPolicy,
                "memory": LoCoMoMemory, "retrieval": RetrievalSettings,
                "judge": JudgeSettings, "run": RunSettings}

    def policies(self, mode: str, settings: Settings) -> list[Any]:
        """Session recall: the recall policy; memory: the extraction and question-time memory policies."""
        return self.flows[mode].policies(settings) if mode in self.flows else []

    # ---------------------------------------------------------------------------- cases

    def load_cases(self, settings: Settings) -> CaseSelection:
        """The questions of the chosen categories in dataset order; adversarial ones keep the refusal as gold."""
        if self._data is None:
            self._data = load_locomo()
        data = self._data
        wanted = set(settings.of("dataset", LoCoMoDataset).categories)
        cases = []
        for conversation, qa in data.all_qa():
            if qa.category not in wanted:
                continue
            adversarial = qa.category == ADVERSARIAL_CATEGORY
            names = {f"category_{key}": value for key, value in category_names(qa.category).items()}
            cases.append(Case(
                id=qa.qa_id,
                question=qa.question,
                reference=ADVERSARIAL_REFERENCE if adversarial else qa.answer,
                data=LoCoMoItem(conversation, qa),
                metadata={"sample_id": conversation.sample_id, "category": qa.category, **names,
                          "evidence": evidence_dia_ids(qa.evidence),
                          "adversarial_answer": qa.adversarial_answer if adversarial else None},
            ))
        total = sum(len(c.qa) for c in data.conversations)
        note = (f"{len(data.conversations)} conversations, {len(cases)} of {total} questions "
                f"(categories {sorted(wanted)})")
        return CaseSelection(cases, dataset_sha256=data.sha256, loaded=total, note=note)

    def case_group(self, case: Case) -> str | None:
        """The conversation: its seeded sessions and extracted memories are built once per run."""
        return str(case.data.conversation.sample_id)

    # Generic arms (agentlab.policies.arms): every session's turns in order, in one session.
    def history(self, case: Case, settings: Settings) -> list[Event]:
        """The conversation's sessions as one history, oldest first (the events the recall modes seed)."""
        return [e for _, events in seed_plan(case.data.conversation, _captions(settings)) for e in events]

    def tool_delivery(self, case: Case, settings: Settings, session_id: str) -> ToolDelivery:
        """Every session of the conversation opened in order with ``open_session(n)``."""
        return locomo_tool_delivery(case.data.conversation, session_id, _captions(settings))

    def retention_groups(self, cases: Sequence[Case], settings: Settings, delivery: DeliveryMode) -> list[HistoryGroup]:
        """One group per conversation, each evidence ``dia_id`` a unit, with only the selected questions."""
        captions = _captions(settings)
        wanted = {c.id for c in cases}
        conversations: dict[str, Any] = {}
        for case in cases:
            conversations.setdefault(case.data.conversation.sample_id, case.data.conversation)
        groups = locomo_groups(list(conversations.values()), Delivery(delivery), include_captions=captions,
                               seed=lambda conv: [e for _, events in seed_plan(conv, captions) for e in events])
        return [HistoryGroup(g.session_id, g.delivery, g.events, g.tools,
                             tuple(q for q in g.questions if q.case_id in wanted)) for g in groups]

    def arm_instruction(self, case: Case, settings: Settings) -> str:
        """:data:`prompts.ARM_INSTRUCTION`."""
        return prompts.ARM_INSTRUCTION.format(fallback=FALLBACK_ANSWER)

    def arm_generation(self, settings: Settings) -> GenerationConfig:
        """The ``[answer]`` generation config."""
        return generation_config(settings.section("answer"))

    # --------------------------------------------------------------- the modes, one by one

    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        """Answer one question in ``mode``: its entry of :attr:`flows` (the module docstring says what each sends)."""
        if mode not in self.flows:
            raise CaseError(f"unknown mode {mode!r}", code="bad_mode")
        return await self.flows[mode].answer(self, case, ctx)

    def dry_run_prompts(self, case: Case, mode: str, settings: Settings) -> list[list[Message]]:
        """The answer prompt of ``mode`` where it is known without a model (memory: without memories)."""
        return self.flows[mode].prompts(self, case, settings)

    async def _answer_long_context(self, case: Case, ctx: RunContext) -> CaseResult:
        captions = _captions(ctx.settings)
        messages = long_context_messages(case.data.conversation, case.question, captions)
        # Recorded as a context_length failure without sending ~19k tokens to a small window.
        estimate = check_window(messages, ctx)
        request = ModelRequest(messages, config=self.arm_generation(ctx.settings), purpose="answer")
        with context_length_need(estimate):  # the estimate let it through, the model's tokenizer may not
            response = await ctx.model.generate(request)
        return CaseResult(prediction=response.message.content.strip(),
                          metadata={"prompt_version": prompts.LONG_CONTEXT_PROMPT_VERSION,
                                    "image_captions": captions})

    def _prompts_long_context(self, case: Case, settings: Settings) -> list[list[Message]]:
        return [long_context_messages(case.data.conversation, case.question, _captions(settings))]

    async def _answer_session_recall(self, case: Case, ctx: RunContext) -> CaseResult:
        from agentlab.runtime import LLMAgent, Runner

        conversation = case.data.conversation

        async def seeded() -> Any:
            service = ctx.new_session_service()
            await seed_sessions(service, conversation, _captions(ctx.settings))
            return service

        service = await ctx.once(("locomo-seeded", conversation.sample_id), seeded)
        policy = recall_policy(ctx.settings)
        instruction = prompts.SESSION_RECALL_INSTRUCTION.format(fallback=FALLBACK_ANSWER)
        agent = LLMAgent(AGENT_NAME, ctx.model, instruction=instruction, recall=policy,
                         generation=self.arm_generation(ctx.settings), max_tool_iterations=1)
        runner = Runner(APP_NAME, agent, service)
        session_id = f"qa-{case.id}"
        try:
            # Its own filter key hides the other questions' sessions from this question's recall.
            outcome = await collect_run(runner.run(conversation.sample_id, session_id, case.question,
                                                   filter_key=f"qa/{case.id}", options=ctx.run_options()))
        finally:
            await runner.close()
            await service.delete_session(APP_NAME, conversation.sample_id, session_id)
        return CaseResult(prediction=outcome.answer, compactions=outcome.compactions,
                          metadata={"prompt_version": prompts.SESSION_RECALL_PROMPT_VERSION,
                                    "search_mode": policy.effective_preload_search_mode,
                                    "model_calls": _model_calls(outcome.events)})

    def _prompts_session_recall(self, case: Case, settings: Settings) -> list[list[Message]]:
        # Preload recall needs no model, so the exact answer prompt can be built (over sessions seeded once).
        from agentlab.recall.preload import render_preload_block

        policy = recall_policy(settings)
        conversation = case.data.conversation
        key = (conversation.sample_id, _captions(settings))
        if key not in self._probe_services:
            from agentlab.session.inmemory import InMemorySessionService

            self._probe_services[key] = service = InMemorySessionService()
            run_sync(seed_sessions(service, conversation, key[1]))
        hits = run_sync(question_preload(self._probe_services[key], conversation, case, policy))
        system = prompts.SESSION_RECALL_INSTRUCTION.format(fallback=FALLBACK_ANSWER)
        block = render_preload_block(hits, policy)
        return [[Message.system("\n\n".join(p for p in (system, block) if p)), Message.user(case.question)]]

    async def _answer_memory(self, case: Case, ctx: RunContext) -> CaseResult:
        from agentlab.runtime import LLMAgent, Runner

        conversation = case.data.conversation
        memory_service, extraction = await ctx.once(("locomo-memory", conversation.sample_id),
                                                    lambda: self._extracted_memory(conversation, ctx))
        policy = memory_policy(ctx.settings, for_questions=True)
        memory = ctx.settings.of("memory", LoCoMoMemory)
        preload = memory.qa == "preload"
        template = prompts.MEMORY_PRELOAD_INSTRUCTION if preload else prompts.MEMORY_QA_INSTRUCTION
        instruction = template.format(fallback=FALLBACK_ANSWER)
        agent = LLMAgent(AGENT_NAME, ctx.model, instruction=instruction, memory=policy,
                         generation=self.arm_generation(ctx.settings), max_tool_iterations=memory.search_passes)
        runner = Runner(APP_NAME, agent, ctx.new_session_service(), memory_service=memory_service)
        try:
            outcome = await collect_run(runner.run(conversation.sample_id, f"qa-{case.id}", case.question,
                                                   options=ctx.run_options()))
        finally:
            await runner.close()
        return CaseResult(prediction=outcome.answer, compactions=outcome.compactions,
                          metadata={"prompt_version": prompts.MEMORY_QA_PROMPT_VERSION,
                                    "memory_qa": "preload" if preload else "tool",
                                    "update_policy": policy.update_policy, "tool_calls": outcome.tool_calls,
                                    "model_calls": _model_calls(outcome.events), **extraction})

    async def _extracted_memory(self, conversation: Conversation, ctx: RunContext) -> tuple[Any, dict[str, Any]]:
        """The conversation's sessions seeded, then one extraction pass per session (once per conversation)."""
        from agentlab.memory.extractor import MemoryExtractor
        from agentlab.memory.service import InMemoryMemoryService, MemoryService

        memory_service = InMemoryMemoryService()
        session_service = ctx.new_session_service()
        # The extractor caps its own output (``extract_max_tokens``). cast: the in-memory service
        # exposes a read-only ``embedder``, which the protocol declares as a plain attribute.
        extractor = MemoryExtractor(ctx.model, memory_policy(ctx.settings, for_questions=False))
        sessions = await seed_sessions(session_service, conversation, _captions(ctx.settings))
        counts: dict[str, Any] = await extractor.extract_each(sessions, cast(MemoryService, memory_service),
                                                              session_service)
        counts["memories"] = len(await memory_service.list(APP_NAME, conversation.sample_id))
        return memory_service, counts

    def _prompts_memory(self, case: Case, settings: Settings) -> list[list[Message]]:
        # Before extraction runs only the question prompt without memories is known.
        instruction = prompts.MEMORY_QA_INSTRUCTION.format(fallback=FALLBACK_ANSWER)
        return [[Message.system(instruction), Message.user(case.question)]]

    #: Each mode's flow, dispatched once by :meth:`run_case`, :meth:`dry_run_prompts` and :meth:`policies`.
    flows: ClassVar[dict[str, Flow]] = {
        "long_context": Flow(_answer_long_context, _prompts_long_context, lambda settings: []),
        "session_recall": Flow(_answer_session_recall, _prompts_session_recall,
                               lambda settings: [recall_policy(settings)]),
        "memory": Flow(_answer_memory, _prompts_memory, lambda settings: [
            memory_policy(settings, for_questions=False), memory_policy(settings, for_questions=True)]),
    }

    # ---------------------------------------------------------------------------- scores

    async def score(self, case: Case, result: CaseResult, ctx: RunContext) -> list[Score]:
        """LoCoMo F1, set F1 and BLEU-1 against the gold text, the refusal check of adversarial questions,
        and the judge's LLM score (an unparsable verdict counts 0).
        """
        item: LoCoMoItem = case.data
        category = item.qa.category
        prediction = result.prediction
        reference = case.reference
        scores = [Score("locomo_f1", locomo_f1(prediction, item.qa.answer, category), version_of("locomo_f1"))]
        if category == ADVERSARIAL_CATEGORY:
            # Gold is the refusal: the unigram metrics compare the answer with it (see module docstring).
            scores.append(Score("adversarial_refusal", locomo_adversarial_correct(prediction), version_of("locomo_f1")))
        scores.append(Score("set_f1", set_f1(prediction, reference), version_of("set_f1")))
        scores.append(Score("bleu1", bleu1(prediction, reference), version_of("bleu1")))
        if ctx.judge is not None:
            # The published LLM score divides by all questions: an unparsable verdict counts 0.
            judged = await ctx.judge.grade(LOCOMO_JUDGE, query=case.question, reference=reference, prediction=prediction)
            scores += judged.to_scores("llm_score", unparsed_scores_zero=True)
        return scores

    # ---------------------------------------------------------------------- retrieval only

    def retrieval_only(self, cases: Sequence[Case], mode: str, settings: Settings, *, unit: str | None = None,
                       retriever: str | None = None) -> dict[str, Any]:
        """Without ``unit``: recall of the session-recall preload window (``agentlab-preload-window``);
        with it: the paper's protocol (``locomo-acl2024-table3``) for ``retriever``, or without one
        every retriever of :data:`agentlab.bench.retrieval.retrievers.COMPARED` (a ``results`` list).
        """
        import agentlab.bench.retrieval.locomo as locomo_retrieval
        import agentlab.bench.retrieval.retrievers as locomo_retrievers

        if unit is None:
            window = locomo_retrieval.PreloadWindow(recall_policy(settings), _captions(settings), seed_sessions,
                                                    question_preload, hit_dia_ids)
            return locomo_retrieval.preload_window_recall(window, cases, settings)
        if retriever is None:
            return locomo_retrievers.compare(cases, unit, settings)
        return locomo_retrievers.measure(cases, unit, retriever, settings)

    # ---------------------------------------------------------------------------- report

    def report_tables(self, store: Any) -> dict[str, Any]:
        """Per-category scores (three name mappings), 5- and 4-category weighted figures, cost per question
        (:func:`agentlab.bench.tasks.locomo_report.report_tables`; failed cases and unparsable verdicts count 0).
        """
        import agentlab.bench.tasks.locomo_report as locomo_report

        return locomo_report.report_tables(store, self.name)
