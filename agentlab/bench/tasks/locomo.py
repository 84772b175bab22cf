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
the published report's, and mem0's maintainers' from mem0 issue #2609); :meth:`LoCoMoTask.report_tables`
gives per-category, 5-category (÷ all questions) and 4-category (no adversarial) weighted figures,
tokens and calls per question and latency p50/p95. Every table divides by all questions: a failed
case and a judge verdict that does not parse both count 0 (the published LLM score divides by all
questions), and the counts of each are shown. ``--retrieval-only`` measures retrieval without any model
(:mod:`agentlab.bench.locomo_retrieval`): the preload window of session recall, or with ``--unit`` the
paper's own recall protocol.

Known difference from the published numbers: the report's "F1" is neither of the above (its
``metrics.go`` drops ~60 stop words and applies no category rule) and its adversarial gold was
"The information is not available."; compare ``locomo_f1`` with the official LoCoMo scorer, not
with the report's F1 column.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from datetime import datetime, timezone
from typing import Any, Literal, cast

from agentlab.bench.config import JudgeSettings, RetrievalSettings, RunSettings, Settings, generation_config
from agentlab.bench.datasets.locomo import (
    ADVERSARIAL_CATEGORY,
    CATEGORY_NAMES_MEM0,
    CATEGORY_NAMES_MEMORY_REPORT,
    CATEGORY_NAMES_OFFICIAL,
    QA,
    Conversation,
    LoCoMoData,
    load_locomo,
)
from agentlab.bench.delivery import DeliverySetting, ToolDelivery, locomo_tool_delivery
from agentlab.bench.facts import SUM_ANSWER_CALLS, ModeRoles
from agentlab.bench.loops import run_sync
from agentlab.bench.metrics import (
    Score,
    bleu1,
    locomo_adversarial_correct,
    locomo_f1,
    percentile,
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
from agentlab.bench.tasks.locomo_judge import LOCOMO_JUDGE
from agentlab.compaction import CompactionPolicy
from agentlab.events import Event, Message, user_event
from agentlab.memory.policies import MemoryPolicy
from agentlab.model.base import GenerationConfig, ModelRequest
from agentlab.progress import report_progress
from agentlab.recall import RecallPolicy

APP_NAME = "locomo"
AGENT_NAME = "locomo-agent"
#: The refusal every prompt asks for when the answer is absent; the official category-5 rule
#: accepts any answer containing "not mentioned", so this phrase scores there.
ADVERSARIAL_REFERENCE = "Not mentioned in the conversation."
FALLBACK_ANSWER = ADVERSARIAL_REFERENCE
# --------------------------------------------------------------------------------- prompts

LONG_CONTEXT_PROMPT_VERSION = "locomo-long-context-v1"
LONG_CONTEXT_PROMPT = """You answer questions about a long conversation between two people, using its full transcript.

# ABOUT THE TRANSCRIPT
The transcript below holds every session of the conversation, oldest first. Each session starts
with a SessionDate line that says when it took place; every other line is one message, written as
"Speaker: text".

# HOW TO ANSWER
1. Read the whole transcript and find every passage that bears on the question.
2. Use the SessionDate lines to work out when things happened.
3. Answer from direct evidence in the transcript whenever there is some.
4. When the transcript contradicts itself, trust the most recent information.
5. Resolve relative time expressions ("last year", "two weeks ago", "next month") against the
   date of the session in which they were said. For example, "I visited India last year" said in
   a session dated 4 May 2022 means the visit took place in 2021.
6. Always answer with absolute dates, months or years:
   - "last year" becomes "2022", never "last year"
   - "this month" becomes "July 2023", never "this month"
   - "next month" becomes "August 2023", never "next month"
   - "for seven years" becomes "since 2016" or "7 years"
   Never give a relative time expression as the answer.
7. Keep to the transcript: its people are not the public figures who may share their names.
8. Keep the answer short: five or six words at most.
9. If the transcript does not contain the answer, reply exactly "{fallback}"

# METHOD
1. Collect every part of the transcript related to the question.
2. Check the SessionDate and the content of each of those parts.
3. Look for explicit dates, times, places or events that answer the question.
4. If the answer needs a calculation, such as turning a relative time into a date, do it carefully.
5. Write a precise, concise answer that rests only on the transcript.
6. Check that the answer addresses exactly what was asked.
7. Check that every time in the answer is absolute, never "last year" or "this month".

# TRANSCRIPT:

{transcript}

Question: {question}
Answer:"""

SESSION_RECALL_PROMPT_VERSION = "locomo-session-recall-v1"
SESSION_RECALL_INSTRUCTION = """You answer one question about earlier conversations between two people. Messages from
those conversations that look related are listed below under "Related Session Recall"; each one
starts with the date of its session, as [SessionDate: ...].

How to answer:
- Read every recalled message before answering, and reuse their exact words where you can.
- Turn relative times ("yesterday", "last week", "next month") into absolute dates using the
  SessionDate of the message that contains them.
- Reply with the answer only: one to eight words, no sentence, no explanation.
- If any recalled message is about the topic of the question, answer from it. Reply
  "{fallback}" only when no recalled message relates to the question.

By kind of question:
- Facts (who, what, where, when, how many): copy the key phrase of the message that states it.
- Hypothetical or inference questions (would, could, is it likely, what might): reason from the
  evidence and commit to an answer such as "Yes" or "Likely no"; never fall back for these.
- Time calculations (how long, which came first): combine the dates of several messages.
- Open questions (what does someone think, feel, enjoy, value): copy the most relevant phrase.
- Indirect questions: combine the messages with common knowledge (a trip to Indianapolis means
  the state is Indiana; Xenoblade Chronicles means a Nintendo Switch).
- Names: when the question is about one person but every message about that exact activity
  concerns a different person, reply "{fallback}"; otherwise answer.

Format:
- Dates like "7 May 2023" or "June 2023", never "2023-05-07".
- Numbers as digits: "3", not "three".
- Do not start with a name or a pronoun: "Running, painting", not "She runs and paints"."""

#: The instruction of a generic arm (agentlab.bench.arms): the conversation is the history, the question the turn.
ARM_INSTRUCTION = """You answer one question about the conversation between two people shown above (each message
starts with its session date and speaker). Answer briefly, with the facts as stated in the conversation. If the
conversation does not contain the answer, answer exactly: {fallback}"""

MEMORY_QA_PROMPT_VERSION = "locomo-memory-qa-v1"
MEMORY_QA_INSTRUCTION = """You answer one question about earlier conversations between two people, using the long-term
memories stored about them.

Workflow:
1. Call memory_search once with a short keyword query taken from the question (for example
   "Melanie beach", not a full sentence).
2. Read every returned memory; use its exact words and, for "when" questions, its event_time.
3. Reply with the answer only: one to eight words, no sentence, no explanation.

If any returned memory relates to the question, answer from it; reply "{fallback}" only when none
does. Inference questions (would, could, is it likely) need a committed answer such as "Yes" or
"Likely no". Dates like "7 May 2023", numbers as digits, and no leading name or pronoun."""

MEMORY_PRELOAD_INSTRUCTION = """You answer one question about earlier conversations between two people, using the long-term
memories about them listed in this message. Use their exact words and, for "when" questions,
their dates. Reply with the answer only: one to eight words, no sentence, no explanation. Reply
"{fallback}" only when no memory relates to the question. Dates like "7 May 2023", numbers as
digits, and no leading name or pronoun."""


# ------------------------------------------------------------------------------------ data


@dataclass(frozen=True)
class LoCoMoItem:
    """What a LoCoMo case carries: its conversation and its question."""

    conversation: Conversation
    qa: QA


_DIA_ID = re.compile(r"D\d+:\d+")


def evidence_dia_ids(evidence: Sequence[str]) -> list[str]:
    """Clean ``dia_id``s of an evidence list.

    A few entries in the file are malformed ("D8:6; D9:17", "D9:1 D4:4 D4:6", "D", "D:11:26"):
    well-formed ids inside them are kept, the rest dropped.
    """
    found: list[str] = []
    for entry in evidence:
        for dia_id in _DIA_ID.findall(str(entry)):
            if dia_id not in found:
                found.append(dia_id)
    return found


def parse_session_date(text: str) -> float | None:
    """Epoch seconds of a LoCoMo session date such as ``1:56 pm on 8 May, 2023`` (UTC), else None."""
    raw = " ".join(text.split())
    for layout in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %B %Y", "%d %B, %Y", "%d %B %Y", "%Y-%m-%d"):
        try:
            return datetime.strptime(raw, layout).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    return None


def turn_text(text: str, caption: str | None, include_captions: bool) -> str:
    """A message's text, with the shared image's caption when asked (the paper's prompt style)."""
    if include_captions and caption:
        return f"{text} [shares {caption}]"
    return text


def render_transcript(conversation: Conversation, include_captions: bool = False) -> str:
    """Sessions in order: a ``SessionDate:`` line, then ``Speaker: text`` lines; blank line between sessions."""
    blocks = []
    for session in conversation.sessions:
        lines = []
        if session.date_time.strip():
            lines.append(f"SessionDate: {session.date_time.strip()}")
        for turn in session.turns:
            text = turn_text(turn.text.strip(), turn.blip_caption, include_captions)
            if text:
                lines.append(f"{turn.speaker.strip() or 'Unknown'}: {text}")
        blocks.append("\n".join(lines))
    return "\n\n".join(b for b in blocks if b)


def long_context_messages(conversation: Conversation, question: str, include_captions: bool = False) -> list[Message]:
    """The ``long_context`` answer prompt: the whole conversation and the question in one system message."""
    prompt = LONG_CONTEXT_PROMPT.format(fallback=FALLBACK_ANSWER, question=question,
                                        transcript=render_transcript(conversation, include_captions))
    return [Message.system(prompt)]


def session_id_for(conversation: Conversation, number: int) -> str:
    """The id of a conversation's session ``number``, so a recall hit names the LoCoMo session it came from."""
    return f"{conversation.sample_id}-session_{number}"


def seed_plan(conversation: Conversation, include_captions: bool = False) -> list[tuple[str, list[Event]]]:
    """Each LoCoMo session as (session id, events): speaker A as user, speaker B as assistant.

    Messages are prefixed ``[SessionDate: …] Speaker: `` and timestamped with their session's date
    (one second apart), so recalled events carry their date both in the text and in ``created=``.
    Event ids embed the ``dia_id`` (``metadata["dia_id"]`` too), which evidence recall reads back.
    """
    plan: list[tuple[str, list[Event]]] = []
    clock = datetime(2000, 1, 1, tzinfo=timezone.utc).timestamp()
    for session in conversation.sessions:
        start = parse_session_date(session.date_time)
        clock = start if start is not None and start > clock else clock + 86_400
        events: list[Event] = []
        prefix = f"[SessionDate: {session.date_time.strip()}] " if session.date_time.strip() else ""
        for position, turn in enumerate(session.turns):
            text = turn_text(turn.text.strip(), turn.blip_caption, include_captions)
            if not text:
                continue
            content = f"{prefix}{turn.speaker}: {text}"
            timestamp = clock + position
            meta = {"dia_id": turn.dia_id, "speaker": turn.speaker}
            event_id = f"{conversation.sample_id}:{turn.dia_id}"
            if turn.speaker == conversation.speaker_b:
                events.append(Event(author=AGENT_NAME, choices=[Message.assistant(content)], id=event_id,
                                    timestamp=timestamp, metadata=meta))
            else:
                event = user_event(content, timestamp=timestamp)
                event.id, event.metadata = event_id, meta
                events.append(event)
        clock += max(1, len(session.turns))
        plan.append((session_id_for(conversation, session.number), events))
    return plan


async def seed_sessions(service: Any, conversation: Conversation, include_captions: bool = False) -> list[Any]:
    """Create and fill one session per LoCoMo session for user ``sample_id``; returns the sessions."""
    sessions = []
    for session_id, events in seed_plan(conversation, include_captions):
        session = await service.create_session(APP_NAME, conversation.sample_id, session_id)
        for event in events:
            await service.append_event(session, event)
        sessions.append(session)
    return sessions


# --------------------------------------------------------------------------------- policies


@dataclass(frozen=True)
class LoCoMoDataset(DeliverySetting):
    """``[dataset]``: which questions run, how a turn with an image is written, how the history is delivered."""

    #: LoCoMo categories to keep (1-5: 282 / 321 / 96 / 841 / 446 questions).
    categories: tuple[int, ...] = (1, 2, 3, 4, 5)
    #: Append ``[shares <caption>]`` to a turn that shared an image (published run: text only).
    include_image_captions: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = sorted(set(self.categories) - set(CATEGORY_NAMES_OFFICIAL))
        if not self.categories or unknown:
            raise ValueError(f"categories must be some of {', '.join(map(str, sorted(CATEGORY_NAMES_OFFICIAL)))}; "
                             f"got {list(self.categories)}")


#: MemoryPolicy fields the task sets per phase from ``qa`` (see :func:`memory_policy`).
_PHASE_FIELDS = ("auto_extract", "search_tool", "preload_limit")


@dataclass(frozen=True)
class LoCoMoMemory(MemoryPolicy):
    """``[memory]``: the memory policy, plus how questions reach the memories.

    The task derives ``auto_extract``, ``search_tool`` and ``preload_limit`` per phase (extraction,
    then questions) from ``qa``, so they are not settings: a value for them is refused rather
    than stored and ignored.
    """

    #: ``tool``: the model calls ``memory_search`` (published); ``preload``: the top
    #: ``search_top_k`` memories are injected, for a model that cannot call tools.
    qa: Literal["tool", "preload"] = "tool"
    #: ``memory_search`` rounds before the answer (Original: 1 -> 2 calls per question).
    search_passes: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.qa not in ("tool", "preload"):
            raise ValueError(f"qa must be one of tool, preload; got {self.qa!r}")
        if self.search_passes < 1:
            raise ValueError(f"search_passes must be >= 1; got {self.search_passes}")
        base = MemoryPolicy()
        fixed = [name for name in _PHASE_FIELDS if getattr(self, name) != getattr(base, name)]
        if fixed:
            raise ValueError(f"{', '.join(fixed)} cannot be set: the task derives them from qa per phase")


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


# ------------------------------------------------------------------------------- retrieval


def hit_dia_ids(hits: Sequence[Any]) -> list[str]:
    """The ``dia_id``s of recalled events, best first (seeded event ids are ``<sample_id>:<dia_id>``)."""
    return [str(h.ref.event_id).split(":", 1)[1] for h in hits if ":" in str(h.ref.event_id)]


# ------------------------------------------------------------------------------------ task


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

    def __init__(self) -> None:
        self._data: LoCoMoData | None = None
        # Seeded in-memory services for --dry-run / --retrieval-only (sync callers), per conversation.
        self._probe_services: dict[tuple[str, bool], Any] = {}

    def default_settings(self) -> dict[str, type[Any]]:
        """The sections; ``benchmarks/locomo.toml`` holds the published values."""
        return {"dataset": LoCoMoDataset, "answer": GenerationConfig, "recall": RecallPolicy,
                "memory": LoCoMoMemory, "retrieval": RetrievalSettings, "compaction": CompactionPolicy,
                "judge": JudgeSettings, "run": RunSettings}

    def policies(self, mode: str, settings: Settings) -> list[Any]:
        """Session recall: the recall policy; memory: the extraction and question-time memory policies."""
        if mode == "session_recall":
            return [recall_policy(settings)]
        if mode == "memory":
            return [memory_policy(settings, for_questions=False), memory_policy(settings, for_questions=True)]
        return []

    # ---------------------------------------------------------------------------- cases

    def _load(self) -> LoCoMoData:
        if self._data is None:
            self._data = load_locomo()
        return self._data

    def load_cases(self, settings: Settings) -> CaseSelection:
        """The questions of the chosen categories in dataset order; adversarial ones keep the refusal as gold."""
        data = self._load()
        wanted = set(settings.of("dataset", LoCoMoDataset).categories)
        cases = []
        for conversation, qa in data.all_qa():
            if qa.category not in wanted:
                continue
            adversarial = qa.category == ADVERSARIAL_CATEGORY
            cases.append(Case(
                id=qa.qa_id,
                question=qa.question,
                reference=ADVERSARIAL_REFERENCE if adversarial else qa.answer,
                data=LoCoMoItem(conversation, qa),
                metadata={
                    "sample_id": conversation.sample_id,
                    "category": qa.category,
                    "category_official": CATEGORY_NAMES_OFFICIAL[qa.category],
                    "category_memory_report": CATEGORY_NAMES_MEMORY_REPORT[qa.category],
                    "category_mem0": CATEGORY_NAMES_MEM0[qa.category],
                    "evidence": evidence_dia_ids(qa.evidence),
                    "adversarial_answer": qa.adversarial_answer if adversarial else None,
                },
            ))
        total = sum(len(c.qa) for c in data.conversations)
        note = (f"{len(data.conversations)} conversations, {len(cases)} of {total} questions "
                f"(categories {sorted(wanted)})")
        return CaseSelection(cases, dataset_sha256=data.sha256, loaded=total, note=note)

    # ----------------------------------------------------------------------------- modes

    def _generation(self, settings: Settings) -> GenerationConfig:
        return generation_config(settings.section("answer"))

    def case_group(self, case: Case) -> str | None:
        """The conversation: its seeded sessions and extracted memories are built once per run."""
        # The seeded sessions and the extracted memories are built once per conversation and run.
        return str(case.data.conversation.sample_id)

    # Generic arms (agentlab.bench.arms): every session's turns in order, in one session.
    def history(self, case: Case, settings: Settings) -> list[Event]:
        """The conversation's sessions as one history, oldest first (the events the recall modes seed)."""
        captions = settings.of("dataset", LoCoMoDataset).include_image_captions
        return [e for _, events in seed_plan(case.data.conversation, captions) for e in events]

    def tool_delivery(self, case: Case, settings: Settings, session_id: str) -> ToolDelivery:
        """Every session of the conversation opened in order with ``open_session(n)``."""
        captions = settings.of("dataset", LoCoMoDataset).include_image_captions
        return locomo_tool_delivery(case.data.conversation, session_id, captions)

    def arm_instruction(self, case: Case, settings: Settings) -> str:
        """:data:`ARM_INSTRUCTION`."""
        return ARM_INSTRUCTION.format(fallback=FALLBACK_ANSWER)

    def arm_generation(self, settings: Settings) -> GenerationConfig:
        """The ``[answer]`` generation config."""
        return self._generation(settings)

    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        """Answer one question in ``mode`` (see the module docstring for what each mode sends)."""
        item: LoCoMoItem = case.data
        if mode == "long_context":
            return await self._long_context(case, item, ctx)
        if mode == "session_recall":
            return await self._session_recall(case, item, ctx)
        if mode == "memory":
            return await self._memory(case, item, ctx)
        raise CaseError(f"unknown mode {mode!r}", code="bad_mode")

    async def _long_context(self, case: Case, item: LoCoMoItem, ctx: RunContext) -> CaseResult:
        captions = ctx.settings.of("dataset", LoCoMoDataset).include_image_captions
        messages = long_context_messages(item.conversation, case.question, captions)
        # Recorded as a context_length failure without sending ~19k tokens to a small window.
        estimate = check_window(messages, ctx)
        request = ModelRequest(messages, config=self._generation(ctx.settings), purpose="answer")
        with context_length_need(estimate):  # the estimate let it through, the model's tokenizer may not
            response = await ctx.model.generate(request)
        return CaseResult(prediction=response.message.content.strip(),
                          metadata={"prompt_version": LONG_CONTEXT_PROMPT_VERSION, "image_captions": captions})

    async def _seeded_service(self, item: LoCoMoItem, ctx: RunContext) -> Any:
        captions = ctx.settings.of("dataset", LoCoMoDataset).include_image_captions

        async def build() -> Any:
            service = ctx.new_session_service()
            await seed_sessions(service, item.conversation, captions)
            return service

        return await ctx.once(("locomo-seeded", item.conversation.sample_id), build)

    async def _session_recall(self, case: Case, item: LoCoMoItem, ctx: RunContext) -> CaseResult:
        from agentlab.runtime import LLMAgent, Runner

        service = await self._seeded_service(item, ctx)
        policy = recall_policy(ctx.settings)
        agent = LLMAgent(AGENT_NAME, ctx.model, instruction=SESSION_RECALL_INSTRUCTION.format(fallback=FALLBACK_ANSWER),
                         recall=policy, generation=self._generation(ctx.settings), max_tool_iterations=1)
        runner = Runner(APP_NAME, agent, service)
        session_id = f"qa-{case.id}"
        try:
            # Its own filter key hides the other questions' sessions from this question's recall.
            outcome = await collect_run(runner.run(item.conversation.sample_id, session_id, case.question,
                                                   filter_key=f"qa/{case.id}", options=ctx.run_options()))
        finally:
            await runner.close()
            await service.delete_session(APP_NAME, item.conversation.sample_id, session_id)
        return CaseResult(prediction=outcome.answer, compactions=outcome.compactions,
                          metadata={"prompt_version": SESSION_RECALL_PROMPT_VERSION,
                                    "search_mode": policy.effective_preload_search_mode,
                                    "model_calls": _model_calls(outcome.events)})

    async def _memory(self, case: Case, item: LoCoMoItem, ctx: RunContext) -> CaseResult:
        from agentlab.runtime import LLMAgent, Runner

        memory_service, extraction = await self._extracted_memory(item, ctx)
        policy = memory_policy(ctx.settings, for_questions=True)
        memory = ctx.settings.of("memory", LoCoMoMemory)
        preload = memory.qa == "preload"
        instruction = (MEMORY_PRELOAD_INSTRUCTION if preload else MEMORY_QA_INSTRUCTION).format(fallback=FALLBACK_ANSWER)
        agent = LLMAgent(AGENT_NAME, ctx.model, instruction=instruction, memory=policy,
                         generation=self._generation(ctx.settings),
                         max_tool_iterations=memory.search_passes)
        runner = Runner(APP_NAME, agent, ctx.new_session_service(), memory_service=memory_service)
        try:
            outcome = await collect_run(runner.run(item.conversation.sample_id, f"qa-{case.id}", case.question,
                                                   options=ctx.run_options()))
        finally:
            await runner.close()
        return CaseResult(prediction=outcome.answer, compactions=outcome.compactions,
                          metadata={"prompt_version": MEMORY_QA_PROMPT_VERSION, "memory_qa": "preload" if preload else "tool",
                                    "update_policy": policy.update_policy, "tool_calls": outcome.tool_calls,
                                    "model_calls": _model_calls(outcome.events), **extraction})

    async def _extracted_memory(self, item: LoCoMoItem, ctx: RunContext) -> tuple[Any, dict[str, Any]]:
        """Seed the sessions and run one extraction pass per session, once per conversation."""
        from agentlab.memory.extractor import MemoryExtractor
        from agentlab.memory.service import InMemoryMemoryService, MemoryService

        settings = ctx.settings
        captions = settings.of("dataset", LoCoMoDataset).include_image_captions
        conversation = item.conversation

        async def build() -> tuple[Any, dict[str, Any]]:
            policy = memory_policy(settings, for_questions=False)
            memory_service = InMemoryMemoryService()
            session_service = ctx.new_session_service()
            # The extractor caps its own output (``extract_max_tokens``). cast: the in-memory service
            # exposes a read-only ``embedder``, which the protocol declares as a plain attribute.
            extractor = MemoryExtractor(ctx.model, policy)
            counts = {"extraction_passes": 0, "extraction_errors": 0}
            sessions = await seed_sessions(session_service, conversation, captions)
            for number, session in enumerate(sessions, start=1):
                result = await extractor.extract(session, cast(MemoryService, memory_service), session_service,
                                                 force=True)
                counts["extraction_passes"] += 1
                counts["extraction_errors"] += int(result.status == "error")
                report_progress("memory extraction", number, len(sessions), unit="session")
            memories = await memory_service.list(APP_NAME, conversation.sample_id)
            counts["memories"] = len(memories)
            return memory_service, counts

        return await ctx.once(("locomo-memory", conversation.sample_id), build)

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

    # ------------------------------------------------------------------------ dry run

    def _probe_service(self, conversation: Conversation, captions: bool) -> Any:
        key = (conversation.sample_id, captions)
        service = self._probe_services.get(key)
        if service is None:
            from agentlab.session.inmemory import InMemorySessionService

            service = InMemorySessionService()
            run_sync(seed_sessions(service, conversation, captions))
            self._probe_services[key] = service
        return service

    def dry_run_prompts(self, case: Case, mode: str, settings: Settings) -> list[list[Message]]:
        """The answer prompt of ``mode`` where it is known without a model (memory: without memories)."""
        item: LoCoMoItem = case.data
        captions = settings.of("dataset", LoCoMoDataset).include_image_captions
        if mode == "long_context":
            return [long_context_messages(item.conversation, case.question, captions)]
        if mode == "session_recall":
            # Preload recall needs no model, so the exact answer prompt can be built.
            from agentlab.recall.preload import render_preload_block

            policy = recall_policy(settings)
            service = self._probe_service(item.conversation, captions)
            hits = run_sync(_preload(service, item.conversation, case, policy))
            system = SESSION_RECALL_INSTRUCTION.format(fallback=FALLBACK_ANSWER)
            block = render_preload_block(hits, policy)
            return [[Message.system("\n\n".join(p for p in (system, block) if p)), Message.user(case.question)]]
        # memory: before extraction runs only the question prompt without memories is known.
        instruction = MEMORY_QA_INSTRUCTION.format(fallback=FALLBACK_ANSWER)
        return [[Message.system(instruction), Message.user(case.question)]]

    # ---------------------------------------------------------------------- retrieval only

    #: ``--unit`` values: the LoCoMo paper's retrieval protocol (:mod:`agentlab.bench.locomo_retrieval`).
    retrieval_units = ("dialog", "observation", "summary")

    def retrieval_only(self, cases: Sequence[Case], mode: str, settings: Settings, *, unit: str | None = None,
                       retriever: str | None = None) -> dict[str, Any]:
        """Without ``unit``: recall of the session-recall preload window (``agentlab-preload-window``);
        with it: the paper's protocol (``locomo-acl2024-table3``) for ``retriever`` (default hybrid).
        """
        from agentlab.bench import locomo_retrieval

        if unit is None:
            window = locomo_retrieval.PreloadWindow(
                recall_policy(settings), settings.of("dataset", LoCoMoDataset).include_image_captions,
                seed_sessions, _preload, hit_dia_ids)
            return locomo_retrieval.preload_window_recall(window, cases, settings)
        return locomo_retrieval.protocol_recall(cases, unit, retriever or "hybrid", settings)

    # ---------------------------------------------------------------------------- report

    def report_tables(self, store: Any) -> dict[str, Any]:
        """Per-category scores (three name mappings), 5- and 4-category weighted figures, cost per question.

        Every figure divides by all questions of its group: failed cases (``n_failed``) and judge
        verdicts that did not parse (``n_judge_unparsed``) count 0. Memory-mode rows also show the
        extraction passes and extraction errors of the conversations their questions belong to.
        """
        import pandas as pd

        cases = _current_cases(store, self.name)
        if cases.empty:
            return {}
        metrics = [m for m in ("locomo_f1", "set_f1", "bleu1", "llm_score") if m in cases.columns]

        def counts(sub: Any) -> dict[str, int]:
            return {"n": len(sub), "n_failed": int((sub["status"] != "ok").sum()),
                    "n_judge_unparsed": int(sub["judge_unparsed"].sum())}

        per_category = []
        weighted = []
        for (model, mode), group in cases.groupby(["model", "mode"]):
            for category, sub in group.groupby("category"):
                row = {"model": model, "mode": mode, "category": int(category),
                       "official": CATEGORY_NAMES_OFFICIAL[int(category)],
                       "memory_report": CATEGORY_NAMES_MEMORY_REPORT[int(category)],
                       "mem0": CATEGORY_NAMES_MEM0[int(category)], **counts(sub)}
                row.update({m: sub[m].mean() for m in metrics})
                per_category.append(row)
            for label, sub in (("5-category", group), ("4-category", group[group["category"] != ADVERSARIAL_CATEGORY])):
                row = {"model": model, "mode": mode, "weighting": label, **counts(sub)}
                row.update({m: sub[m].mean() for m in metrics})
                row.update(_extraction_counts(sub))
                weighted.append(row)
        cost = []
        for (model, mode), group in cases.groupby(["model", "mode"]):
            # Query latency = the answer calls of a question (judge and extraction time excluded);
            # failed questions are left out; cache hits replay in ~0 ms.
            ok = group[group["status"] == "ok"]
            latencies = [float(v) for v in ok["answer_latency_ms"].dropna()]
            cost.append({
                "model": model, "mode": mode, "n": len(group),
                "answer_prompt_tokens_per_q": group["answer_prompt"].mean(),
                "answer_total_tokens_per_q": (group["answer_prompt"] + group["answer_completion"]).mean(),
                "all_tokens_per_q": group["all_tokens"].mean(),
                "answer_calls_per_q": group["answer_calls"].mean(),
                "all_calls_per_q": group["all_calls"].mean(),
                "answer_latency_p50_ms": percentile(latencies, 50) if latencies else None,
                "answer_latency_p95_ms": percentile(latencies, 95) if latencies else None,
                "case_latency_p50_ms": percentile([float(v) for v in ok["latency_ms"].dropna()], 50)
                if len(ok) else None,
                "failed": int((group["status"] != "ok").sum()),
            })
        return {"per_category": pd.DataFrame(per_category), "weighted": pd.DataFrame(weighted),
                "cost_per_question": pd.DataFrame(cost)}


# --------------------------------------------------------------------------------- helpers


async def _preload(service: Any, conversation: Conversation, case: Case, policy: Any) -> list[Any]:
    from agentlab.recall.preload import preload_hits
    from agentlab.runtime.invocation import Invocation
    from agentlab.session.base import Session

    probe = Session(app_name=APP_NAME, user_id=conversation.sample_id, id=f"qa-{case.id}")
    inv = Invocation(app_name=APP_NAME, user_id=conversation.sample_id, session=probe, session_service=service,
                     agent=None, message=Message.user(case.question), filter_key=f"qa/{case.id}")  # type: ignore[arg-type]
    return await preload_hits(inv, policy, case.question)


def _model_calls(events: Sequence[Event]) -> int:
    """Model responses in a run: events that carry usage."""
    return sum(1 for e in events if e.usage is not None)


def _extraction_counts(cases: Any) -> dict[str, Any]:
    """Extraction passes and errors of the conversations behind these (memory-mode) questions.

    Extraction runs once per conversation and every question of it carries the same counts, so
    they are taken once per conversation. None for modes that extract nothing.
    """
    per_conversation: dict[str, tuple[int, int]] = {}
    for sample, passes, errors in zip(cases["sample_id"], cases["extraction_passes"], cases["extraction_errors"],
                                      strict=True):
        if passes is not None and passes == passes:  # NaN-safe: failed cases may not carry the counts
            per_conversation.setdefault(str(sample), (int(passes), int(errors or 0)))
    if not per_conversation:
        return {"extraction_passes": None, "extraction_errors": None}
    return {"extraction_passes": sum(p for p, _ in per_conversation.values()),
            "extraction_errors": sum(e for _, e in per_conversation.values())}


def _current_cases(store: Any, benchmark: str) -> Any:
    """One row per case of the run shown for each (model, mode) (store.PRIMARY_RUNS_CTE): status, category, latency, tokens, scores.

    Failed cases score 0 (they stay in every denominator), as in the store's derived tables; a
    judge verdict that did not parse was stored as 0 and is flagged in ``judge_unparsed``.
    """
    import json

    from agentlab.bench.judge import PARSE_ERROR_PREFIX

    cases = store.current_runs_df(
        """
        SELECT r.model, r.mode, c.run_id, c.case_id, c.status, c.metadata, c.latency_ms,
            COALESCE(SUM(k.prompt_tokens) FILTER (WHERE k.purpose = 'answer'), 0) AS answer_prompt,
            COALESCE(SUM(k.completion_tokens) FILTER (WHERE k.purpose = 'answer'), 0) AS answer_completion,
            COALESCE(SUM(k.prompt_tokens + k.completion_tokens), 0) AS all_tokens,
            COALESCE(SUM(k.latency_ms) FILTER (WHERE k.purpose = 'answer'), 0) AS answer_latency_ms,
            count(k.seq) FILTER (WHERE k.purpose = 'answer') AS answer_calls,
            count(k.seq) AS all_calls
        FROM current_runs r JOIN cases c ON c.run_id = r.run_id
        LEFT JOIN calls k ON k.run_id = c.run_id AND k.case_id = c.case_id
        GROUP BY ALL
        """, benchmark)
    if cases.empty:
        return cases
    scores = store.df(
        "SELECT s.run_id, s.case_id, s.metric, s.value FROM scores s WHERE s.run_id IN "
        "(SELECT run_id FROM runs WHERE benchmark = ?)", [benchmark])
    if not scores.empty:
        wide = scores.pivot_table(index=["run_id", "case_id"], columns="metric", values="value", aggfunc="first")
        cases = cases.merge(wide.reset_index(), on=["run_id", "case_id"], how="left")
    meta = [json.loads(m) if isinstance(m, str) else (m or {}) for m in cases["metadata"]]
    cases["category"] = [int(m.get("category", 0)) for m in meta]
    cases["sample_id"] = [m.get("sample_id") for m in meta]
    cases["extraction_passes"] = [m.get("extraction_passes") for m in meta]
    cases["extraction_errors"] = [m.get("extraction_errors") for m in meta]
    unparsed = store.df(
        "SELECT s.run_id, s.case_id FROM scores s WHERE s.metric = 'llm_score' AND starts_with(s.detail, ?) "
        "AND s.run_id IN (SELECT run_id FROM runs WHERE benchmark = ?)", [PARSE_ERROR_PREFIX, benchmark])
    flagged = set(zip(unparsed["run_id"], unparsed["case_id"], strict=True)) if not unparsed.empty else set()
    cases["judge_unparsed"] = [(r, c) in flagged and s == "ok"
                               for r, c, s in zip(cases["run_id"], cases["case_id"], cases["status"], strict=True)]
    for metric in ("locomo_f1", "set_f1", "bleu1"):
        if metric not in cases.columns:
            cases[metric] = float("nan")  # a run whose cases all failed has no score rows
    for metric in ("locomo_f1", "set_f1", "bleu1", "llm_score"):
        if metric in cases.columns:
            cases.loc[cases["status"] != "ok", metric] = 0.0
    if "llm_score" in cases.columns:
        # Verdicts stored before unparsable ones were scored 0 are NULL: the same rule applies.
        cases.loc[cases["judge_unparsed"], "llm_score"] = cases.loc[cases["judge_unparsed"], "llm_score"].fillna(0.0)
    return cases
