"""Arms: the registered, typed experimental conditions a benchmark runs (``--arm NAME``).

An arm is a name, a role in the comparison tables (``baseline``, ``lossy``, or ``recovered`` with
the lossy arm it wins back from), the settings sections its mechanisms are built from, and a
builder returning those :class:`~agentlab.core.ContextMechanism` objects (given the typed
settings and the answer model, for summarising mechanisms)::

    from agentlab.policies.arms import Arm, register_arm

    register_arm(Arm("keep_last_8", role="lossy", build=lambda settings, model: [KeepLast(8)]))

    python -m agentlab.bench qmsum --arm keep_last_8          # baseline, then the arm
    python -m agentlab.bench qmsum --arm keep_last_8+recall   # baseline, keep_last_8, then recall over what it hid

Two kinds:

* **generic** arms (``build`` set) run the same way on every benchmark: the task seeds the case's
  history into a session, asks the question in one Runner/LLMAgent run with the arm's mechanisms
  (``ctx.run_options()`` carries the budget), and scores (:meth:`agentlab.bench.tasks.Task.run_arm`).
  Every peer policy of :mod:`agentlab.policies` is registered as a lossy generic arm under its
  name, and so are ``rolling_summary`` (the runtime's summary, from ``[summary]``, with its own
  triggers), ``compaction`` (tRPC-Agent-Go's passes 0/1/2 from ``[compaction]``, switched on) and
  ``codex_truncation`` (Codex's output truncation alone); ``compaction_recall`` is compaction's
  recovered partner (the same passes with ``session_search`` / ``session_load`` offered). An arm
  whose mechanisms call a model of their own says why in ``needs_model`` (the LLM-free
  ``retention`` command skips it with that reason). With ``[dataset] delivery = "tool_results"``
  a generic arm's history is the scripted tool-reading trajectory (:meth:`Task.delivered_history`).
  ``<lossy>+recall`` exists for every lossy generic arm: the lossy arm's mechanisms, then
  :class:`HiddenRecall`, which searches the history events that arm's projection hid — left out
  of the request, or shown with their content replaced (a clearing arm's placeholder, a
  truncated result; :func:`hidden_history`) — and preloads the best matches' original text. Its
  run id carries ``Arm.identity`` (``hidden_scope``), so runs made when only left-out events
  counted are not resumed as if they were the same.
* **task** arms are a benchmark's published modes (``long_context``, ``summary``, ``recall`` …):
  same names, same run ids; the task runs them through its own code (``Task.run_case``), since
  their published behaviour is specific (QMSum's shared meeting summary, LoCoMo's memory,
  MT-Bench-101's per-turn flow). ``--mode`` is a synonym of ``--arm``.

A task lists the generic arms that do not apply to it, with the reason, in
``Task.inapplicable_arms``; :func:`get_arm` of an unknown name is a ``LookupError`` naming the
known arms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentlab.core import ContextMechanism, Invocation, RequestDraft, Stage, StagedProcessor, is_history_event
from agentlab.core.project import replaced_in_request
from agentlab.extensions import load_extensions

Role = Literal["baseline", "lossy", "recovered"]
ROLES: tuple[str, ...] = ("baseline", "lossy", "recovered")
#: ``build(settings, model)``: the arm's mechanisms from the run's typed settings and the answer model.
Builder = Callable[[Any, Any], Sequence[ContextMechanism]]
#: Suffix of the recovered arm that adds recall over what a lossy arm hid.
RECALL_SUFFIX = "+recall"


@dataclass(frozen=True)
class Arm:
    """One experimental condition."""

    #: The CLI / store name (``runs.mode``).
    name: str
    #: Its part in the comparison tables.
    role: Role
    #: The builder of its mechanisms; ``None`` for a task arm (the task's own code path).
    build: Builder | None = None
    #: For a recovered arm: the lossy arm it is compared with (recovery = (recovered − lossy)/(baseline − lossy)).
    partner: str | None = None
    #: The settings sections its mechanisms read (a section a task does not have: the defaults).
    sections: tuple[str, ...] = ()
    #: One line for ``list`` and the run header.
    description: str = ""
    #: Why the arm needs a model besides the answer (its summariser), e.g. for the LLM-free
    #: ``retention`` command, which skips it with this reason; ``""``: its mechanisms call none.
    needs_model: str = ""
    #: What else decides the arm's requests beyond its name and settings, as (key, value) pairs;
    #: part of the run id when not empty (``runs.config["arm"]``), so a change of behaviour under
    #: the same name starts new runs. Empty for every arm but ``<lossy>+recall``.
    identity: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"arm {self.name!r}: role {self.role!r} is not one of {', '.join(ROLES)}")
        if (self.role == "recovered") != (self.partner is not None):
            raise ValueError(f"arm {self.name!r}: a recovered arm names its lossy partner, and only it")

    @property
    def generic(self) -> bool:
        """Whether the arm runs through the tasks' generic path (it has a builder)."""
        return self.build is not None

    def mechanisms(self, settings: Any, model: Any) -> list[ContextMechanism]:
        """The arm's mechanisms for one run (a task arm has none of its own here)."""
        return list(self.build(settings, model)) if self.build is not None else []


ARMS: dict[str, Arm] = {}


class UnknownArm(LookupError, ValueError):
    """No arm of that name (or it does not apply to the task); the message lists the known ones."""


def register_arm(arm: Arm, *, replace: bool = False) -> Arm:
    """Make ``arm`` available to every benchmark under ``arm.name``; returns it."""
    if not arm.generic:
        raise ValueError(f"arm {arm.name!r}: a registered arm needs a builder (task arms are the tasks' modes)")
    if arm.name in ARMS and not replace and ARMS[arm.name] != arm:
        raise ValueError(f"arm {arm.name!r} is already registered (pass replace=True to replace it)")
    if arm.partner is not None and arm.partner not in ARMS:
        raise ValueError(f"arm {arm.name!r}: its lossy partner {arm.partner!r} is not a registered arm")
    ARMS[arm.name] = arm
    return arm


def generic_arm(name: str) -> Arm | None:
    """The generic arm ``name`` (``<lossy>+recall`` built on demand), or ``None``.

    The user's modules (``$AGENTLAB_EXTENSIONS``) are loaded first, so their arms are found from
    every entry point (bench, notebooks, proxy).
    """
    if name not in ARMS:
        load_extensions()
    if name in ARMS:
        return ARMS[name]
    base = name[: -len(RECALL_SUFFIX)] if name.endswith(RECALL_SUFFIX) else None
    lossy = ARMS.get(base) if base else None
    if lossy is None or lossy.role != "lossy":
        return None
    return with_recall(lossy)


def with_recall(lossy: Arm) -> Arm:
    """``<lossy>+recall``: the lossy arm's mechanisms, then recall over the events they hid."""
    build = lossy.build
    assert build is not None

    def build_recalled(settings: Any, model: Any) -> list[ContextMechanism]:
        return [*build(settings, model), HiddenRecall(_recall_policy(settings))]

    return Arm(lossy.name + RECALL_SUFFIX, "recovered", build_recalled, partner=lossy.name,
               sections=(*lossy.sections, "recall"), description=f"{lossy.name}, then recall over what it hid",
               needs_model=lossy.needs_model, identity=RECALL_IDENTITY)


def full_history_arm(name: str) -> Arm:
    """A baseline arm with no mechanism: the whole history stays visible (the baseline of a tool-result delivery)."""
    return Arm(name, "baseline", lambda settings, model: [], description="no mechanism: the whole history")


def generic_names() -> list[str]:
    """Every registered generic arm (the user's extensions loaded first), then each lossy one's ``+recall``."""
    load_extensions()
    names = list(ARMS)
    return names + [n + RECALL_SUFFIX for n, a in ARMS.items() if a.role == "lossy" and n + RECALL_SUFFIX not in ARMS]


def get_arm(name: str, task: Any = None) -> Arm:
    """The arm ``name`` (of ``task`` when given: its modes and the generic arms that apply to it).

    Unknown → ``LookupError`` listing the known arms; an arm the task declared inapplicable →
    ``LookupError`` with the task's reason.
    """
    if task is not None:
        reason = _inapplicable(task, name)
        if reason:
            raise UnknownArm(f"{task.name}: arm {name!r} does not apply: {reason}")
        if name in task.modes:
            return task_arm(task, name)
    arm = generic_arm(name)
    if arm is None:
        known = ([*task.modes] if task is not None else []) + generic_names()
        where = f"{task.name}: " if task is not None else ""
        raise UnknownArm(f"{where}unknown mode {name!r}; arms (--arm / --mode): {', '.join(known) or 'none'}")
    return arm


def task_arm(task: Any, mode: str) -> Arm:
    """The arm of a task's published mode: role from ``Task.mode_roles`` (lossy when not named there)."""
    roles = task.roles()
    if roles is not None and mode == roles.baseline:
        return Arm(mode, "baseline", description=f"{task.name}'s {mode} mode")
    if roles is not None and mode == roles.recovered and roles.lossy:
        return Arm(mode, "recovered", partner=roles.lossy, description=f"{task.name}'s {mode} mode")
    return Arm(mode, "lossy", description=f"{task.name}'s {mode} mode")


def _inapplicable(task: Any, name: str) -> str | None:
    """The task's reason ``name`` does not apply to it (``<lossy>+recall`` inherits its lossy arm's)."""
    skip = dict(task.inapplicable_arms)
    base = name[: -len(RECALL_SUFFIX)] if name.endswith(RECALL_SUFFIX) else name
    return skip.get(name) or skip.get(base)


def arm_names(task: Any) -> list[str]:
    """The arms ``task`` runs: its modes, then every generic arm it did not declare inapplicable."""
    return [*task.modes, *(n for n in generic_names() if n not in task.modes and not _inapplicable(task, n))]


def role_of(mode: str, baseline: str, lossy: str | None, recovered: str | None) -> tuple[str, str | None]:
    """(role, lossy partner) of a stored run's mode: the task's named roles first, then the arms."""
    if mode == baseline:
        return "baseline", None
    if mode == lossy:
        return "lossy", None
    if mode == recovered:
        return "recovered", lossy
    arm = generic_arm(mode)
    if arm is None:
        return "other", None
    return arm.role, arm.partner


# ---------------------------------------------------------------------------- recall over what an arm hid

#: After every built-in stage (the peer policies run at ``compact``): the arm's projection is final.
ARM_RECALL = Stage("arm_recall", 900)
#: The block in front of the recalled turns.
HIDDEN_RECALL_HEADER = ("Earlier conversation turns and tool results that are not shown above in full, retrieved "
                        "because they match the current question (oldest first):")
#: What :func:`hidden_history` counts as hidden, in ``+recall`` arms' run ids: events left out of
#: the request, and events shown with their message replaced.
HIDDEN_SCOPE = "absent_or_replaced"
#: ``Arm.identity`` of every ``<lossy>+recall``: the hidden scope, and the preloaded text is the
#: query's window of each hit (:func:`recalled_excerpt`), not its head.
RECALL_IDENTITY = (("hidden_scope", HIDDEN_SCOPE), ("excerpt", "query_window"))


def _recall_policy(settings: Any) -> Any:
    from agentlab.recall import RecallPolicy

    section = settings.section("recall") if settings is not None and "recall" in settings else None
    return section if isinstance(section, RecallPolicy) else RecallPolicy()


def hidden_history(inv: Invocation, draft: RequestDraft) -> list[Any]:
    """The ledger's history events (visible to ``inv``) that ``draft`` does not show as they are, oldest first.

    Hidden: left out of the request (a summary's range, a trimmed prefix), or shown with their
    message replaced (:func:`agentlab.core.project.replaced_in_request`: a cleared tool result's placeholder, a truncated
    one). This run's own events and events without text are never hidden.
    """
    from agentlab.core import in_filter

    shown = {e.id: e for e in draft.events}
    out = []
    for e in inv.session.events:
        if not (is_history_event(e) and in_filter(e.filter_key, inv.filter_key) and e.invocation_id != inv.id
                and e.text):
            continue
        in_request = shown.get(e.id)
        if in_request is None or replaced_in_request(in_request, e):
            out.append(e)
    return out


def search_hidden(inv: Invocation, draft: RequestDraft, query: str, top_k: int, max_events: int) -> list[Any]:
    """The recall lexical scan over only the events ``draft`` hid: hits, best first."""
    from agentlab.recall.search import scan_session

    hidden = {e.id for e in hidden_history(inv, draft)}
    if not hidden:
        return []
    return scan_session(inv.session, query, top_k, lambda e: e.id in hidden, max_events)


def recalled_excerpt(text: str, query: str, runes: int) -> str:
    """At most ``runes`` characters of ``text`` where ``query``'s keywords are.

    Whole when it fits (as it is, else with its whitespace collapsed). Otherwise the window
    holding the most distinct query keywords (the recall package's keyword tokens; of the windows
    starting a quarter of their length before a keyword occurrence, the earliest best), marked
    ``...`` where cut; the head when no keyword occurs. A truncated tool result shows its head and
    tail in the request, so its head would repeat what is shown.
    """
    import re

    from agentlab.recall.query import keyword_tokens

    if runes <= 0:
        return ""
    if len(text) <= runes:
        return text
    flat = " ".join(text.split())
    if len(flat) <= runes:
        return flat
    keywords = sorted(keyword_tokens(query), key=len, reverse=True)
    found = [(m.start(), m.end(), m.group()) for m in re.finditer("|".join(map(re.escape, keywords)), flat.lower())] \
        if keywords else []
    best_start, best_count = 0, 0
    counts: dict[str, int] = {}
    lo = hi = 0
    for p, _, _ in found:  # window starts only move forward: one pass, occurrences in and out
        start = max(0, min(p - runes // 4, len(flat) - runes))
        while hi < len(found) and found[hi][1] <= start + runes:
            counts[found[hi][2]] = counts.get(found[hi][2], 0) + 1
            hi += 1
        while lo < hi and found[lo][0] < start:
            counts[found[lo][2]] -= 1
            if not counts[found[lo][2]]:
                del counts[found[lo][2]]
            lo += 1
        if len(counts) > best_count:
            best_start, best_count = start, len(counts)
    head = "..." if best_start > 0 else ""
    tail = "..." if best_start + runes < len(flat) else ""
    return head + flat[best_start + len(head):best_start + runes - len(tail)] + tail


class _HiddenRecallProcessor:
    name = "hidden_recall"

    def __init__(self, owner: HiddenRecall) -> None:
        self.owner = owner

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        policy = self.owner.policy
        query = inv.message.content if inv.message is not None else ""
        hits = search_hidden(inv, draft, query, int(policy.preload_limit or policy.search_top_k),
                             int(policy.max_scan_events))
        if not hits:
            return
        order = {e.id: i for i, e in enumerate(inv.session.events)}
        hits = sorted(hits, key=lambda h: order.get(h.ref.event_id, 0))
        runes = int(policy.preload_event_runes)
        lines = [f"- {recalled_excerpt(h.text, query, runes)}" for h in hits]
        draft.system_parts.append(HIDDEN_RECALL_HEADER + "\n" + "\n".join(lines))
        draft.stats.append({"hidden_recall": {"hits": [h.ref.event_id for h in hits]}})


class HiddenRecall(ContextMechanism):
    """Recall whose hidden scope is what the other mechanisms' projection hid (any lossy arm).

    At :data:`ARM_RECALL`, after the lossy arm's processors, it searches the history events the
    draft no longer shows as they are (:func:`hidden_history`: left out, or replaced by a
    placeholder or a truncation) with the current question (the recall package's lexical scan)
    and preloads the ``preload_limit`` (else ``search_top_k``) best — the ledger's original text,
    its ``preload_event_runes`` characters around the question's keywords
    (:func:`recalled_excerpt`) — as a system block, in ledger order. It adds
    text, never events, so the draft's tool calls and results stay paired as the arm left them.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def describe(self) -> str:
        """The mechanism's name in projection reports."""
        return "hidden_recall"

    def request_processors(self) -> Sequence[StagedProcessor]:
        """The one preload processor."""
        return [StagedProcessor(ARM_RECALL, _HiddenRecallProcessor(self))]


# ---------------------------------------------------------------------------- peer policies as arms


def _peer_builder(name: str) -> Builder:
    def build(settings: Any, model: Any) -> list[ContextMechanism]:
        from agentlab.policies import POLICIES, mechanism

        section = settings.section(name) if settings is not None and name in settings else None
        policy = section if isinstance(section, POLICIES[name].policy_class) else None
        return [mechanism(name, policy)]

    return build


def _rolling_summary(settings: Any, model: Any) -> list[ContextMechanism]:
    """The runtime's rolling summary, from the ``[summary]`` section (defaults without one)."""
    from agentlab.core import as_mechanism
    from agentlab.summary import SummaryPolicy

    section = settings.section("summary") if settings is not None and "summary" in settings else None
    policy = section if isinstance(section, SummaryPolicy) else SummaryPolicy()
    return [as_mechanism(policy, model)]


def _peer_summarisers() -> dict[str, str]:
    from agentlab.policies import POLICIES

    return {name: entry.needs_model for name, entry in POLICIES.items() if entry.needs_model}


#: The peer policies that write a summary with a model, and what it is (each peer's ``needs_model``).
PEER_SUMMARISERS: dict[str, str] = _peer_summarisers()


def _register_peers() -> None:
    from agentlab.policies import POLICIES

    for name, entry in POLICIES.items():
        register_arm(Arm(name, "lossy", _peer_builder(name), sections=(name,),
                         description=f"peer policy {name} ({entry.source})", needs_model=entry.needs_model))


def _compaction_policy(settings: Any) -> Any:
    import dataclasses

    from agentlab.compaction import CompactionPolicy

    section = settings.section("compaction") if settings is not None and "compaction" in settings else None
    policy = section if isinstance(section, CompactionPolicy) else CompactionPolicy()
    return dataclasses.replace(policy, enabled=True)


def _compaction(settings: Any, model: Any) -> list[ContextMechanism]:
    """tRPC-Agent-Go's compaction passes, from ``[compaction]``, switched on (the arm is the switch)."""
    return [_compaction_policy(settings)]


def _compaction_recall(settings: Any, model: Any) -> list[ContextMechanism]:
    """:func:`_compaction` with Session Recall's ``session_search`` / ``session_load`` offered.

    The rest of ``[recall]`` (search depth, mode, load window) as set; the tools switched on, as
    the arm's point is to offer them (LoCoMo's published ``[recall]`` is preload-only).
    """
    import dataclasses

    from agentlab.recall import RecallMechanism

    recall = dataclasses.replace(_recall_policy(settings), tools_enabled=True, search_tool=True, load_tool=True)
    return [_compaction_policy(settings), RecallMechanism(recall)]


def _codex_truncation(settings: Any, model: Any) -> list[ContextMechanism]:
    """Codex's tool-output truncation alone: its auto-compaction (a model-written summary) out of reach."""
    from agentlab.policies import mechanism

    return [mechanism("codex_compaction", auto_compact_token_limit=1 << 62)]


#: The rolling summary as a generic arm: its own triggers decide when it summarises (with
#: ``--seeding lived`` they fire during the replayed history, as in a live agent). Its worker runs
#: after a run completes, so with ``--seeding forced`` (the history appended, then one question) the
#: answer still sees the whole history and the summary call comes after it: the arm then equals
#: the baseline plus one summary's cost, which the league names as "unchanged".
register_arm(Arm("rolling_summary", "lossy", _rolling_summary, sections=("summary",),
                 description="the rolling summary ([summary]) with its own triggers, which fire after a run: "
                             "compare it with --seeding lived (forced: the answer sees the whole history)",
                 needs_model="the rolling summary (SummaryPolicy) writes its text with a model"))
#: tRPC-Agent-Go's request-side compaction (passes 0/1/2) as a generic arm, its knobs from ``[compaction]``
#: (``--set compaction.tool_result_max_tokens=512``); ``enabled`` is the switch of code that passes
#: ``compaction=`` itself, this arm runs the passes on. Its synchronous pressure summary needs a
#: summary service, which no arm of it has, so it never runs here.
register_arm(Arm("compaction", "lossy", _compaction, sections=("compaction",),
                 description="tRPC-Agent-Go's compaction passes 0/1/2 ([compaction], switched on)"))
register_arm(Arm("compaction_recall", "recovered", _compaction_recall, partner="compaction",
                 sections=("compaction", "recall"),
                 description="compaction, with session_search / session_load offered (the placeholder points there)"))
register_arm(Arm("codex_truncation", "lossy", _codex_truncation, sections=(),
                 description="Codex's tool-output truncation only (10,000 tokens x 1.2); auto-compaction off"))


def _artifact_offload(settings: Any, model: Any) -> list[ContextMechanism]:
    """Tool results over the threshold offloaded at arrival, from ``[artifact_offload]`` (defaults without one)."""
    from agentlab.artifacts.offload import ArtifactOffload, ArtifactOffloadPolicy

    section = settings.section("artifact_offload") if settings is not None and "artifact_offload" in settings else None
    return [ArtifactOffload(section if isinstance(section, ArtifactOffloadPolicy) else ArtifactOffloadPolicy())]


#: Offloading at arrival (tRPC-Agent-Go's artifacts as a context policy): a tool result over
#: ``[artifact_offload] threshold_tokens`` is saved as an artifact and shown as a handle with its head
#: and tail; ``artifact_load`` pages it back. It never rewrites what a request already showed.
register_arm(Arm("artifact_offload", "lossy", _artifact_offload, sections=("artifact_offload",),
                 description="tool results over [artifact_offload] threshold_tokens saved as artifacts at arrival; "
                             "a head+tail handle stays, artifact_load pages them back"))
_register_peers()

__all__ = [
    "ARMS",
    "Arm",
    "HiddenRecall",
    "UnknownArm",
    "arm_names",
    "full_history_arm",
    "generic_arm",
    "get_arm",
    "hidden_history",
    "recalled_excerpt",
    "register_arm",
    "role_of",
    "with_recall",
]


# ---------------------------------------------------------------------------- the proxy's arms

#: The baseline's name: no mechanism, the whole history (a task's ``long_context`` mode; the proxy
#: forwards the client's request unrewritten).
BASELINE_ARM = "long_context"
#: Older names still accepted, and the arm each means.
ARM_SYNONYMS = {"passthrough": BASELINE_ARM}


def _proxy_summary_policy() -> Any:
    from agentlab.summary import SummaryPolicy

    # Refresh once more than three message events arrived since the last summary: with one user
    # turn and one answer per request that is every second request.
    return SummaryPolicy(events_over=3)


def _proxy_summary(settings: Any, model: Any) -> list[Any]:
    """Rolling summary (made by the upstream model) injected with its boundary, refreshed every second request."""
    return [_proxy_summary_policy()]


def _proxy_summary_recall(settings: Any, model: Any) -> list[Any]:
    """That summary plus session recall (``session_search``/``session_load``, run by the proxy itself)."""
    from agentlab.recall import RecallPolicy

    return [_proxy_summary_policy(), RecallPolicy()]


#: Arms only ``python -m agentlab.serve`` runs: a benchmark's ``summary`` is its task's own mode,
#: while the proxy's summarises a live conversation as it grows.
SERVE_ARMS: dict[str, Arm] = {arm.name: arm for arm in (
    Arm("summary", "lossy", _proxy_summary, description=(_proxy_summary.__doc__ or "").strip()),
    Arm("summary+recall", "recovered", _proxy_summary_recall, partner="summary",
        description=(_proxy_summary_recall.__doc__ or "").strip()),
)}


def serve_arm(name: str) -> Arm | None:
    """The arm the proxy runs under ``name`` (a synonym resolved): the baseline, a proxy-only arm,
    or any generic arm (the user's extensions loaded first); ``None`` when there is none.
    """
    name = ARM_SYNONYMS.get(name, name)
    if name == BASELINE_ARM:
        return full_history_arm(BASELINE_ARM)
    return SERVE_ARMS.get(name) or generic_arm(name)


def serve_arm_names() -> list[str]:
    """Every name the proxy accepts: the baseline, the proxy-only arms, then the generic arms."""
    return [BASELINE_ARM, *SERVE_ARMS, *(n for n in generic_names() if n not in SERVE_ARMS)]
