"""Offloading at arrival: a tool result over N tokens becomes an artifact and a handle in the transcript.

The ``artifact_offload`` arm (:class:`ArtifactOffload`, configured by :class:`ArtifactOffloadPolicy`).
A tool result whose text is over ``threshold_tokens`` is saved as the artifact
``tool-results/<event id>`` when it arrives (the Runner's ``on_event_appended``), and every
request shows it as a **handle** instead: one line naming the artifact, its size and how to page
it, then the result's first ``preview_head_tokens`` and last ``preview_tail_tokens`` tokens around
a marker that gives the byte offset where the hidden part starts. ``artifact_load`` (offered in
every request, with the policy's page sizes) pages the full text back; its own results are never
offloaded, so a loaded page stays readable.

Why it is a policy of its own: the handle is a pure function of the event and the policy, so the
request shows the same text for a result from the step it arrives on to the end of the run — the
full text never enters the prefix and nothing has to be cleared later, unlike every clearing arm,
whose placeholders rewrite a prefix the provider had cached. The price is paid up front: a
support in the hidden middle needs an ``artifact_load`` call even on the next step.

Where the bytes go: the run's :class:`~agentlab.artifacts.service.ArtifactService`, or, when the
run has none, an in-memory store this mechanism registers for the Runner's lifetime (so a handle
always pages back within the run). A handle is also written when no save could happen yet (a
ledger projected without a Runner: :func:`agentlab.core.project` saves it during projection).
The ledger is never changed: the request shows a copy (``metadata["offloaded"]`` = the name).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentlab.artifacts.names import ArtifactError
from agentlab.artifacts.service import ArtifactScope, ArtifactService, InMemoryArtifactService
from agentlab.artifacts.tools import (
    ARTIFACT_LIST_TOOL,
    ARTIFACT_LOAD_TOOL,
    ARTIFACT_SAVE_TOOL,
    DEFAULT_LOAD_LIMIT,
    MAX_LOAD_LIMIT,
    ArtifactLoadTool,
)
from agentlab.core.mechanism import (
    ContextMechanism,
    RequestDraft,
    Stage,
    StagedProcessor,
    register_mechanism,
)
from agentlab.events import Event
from agentlab.model import tokens
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.core.services import ServiceRegistry
    from agentlab.core.tools import Tool

#: Right after the history is read (before summaries, compaction and the peers): what arrives is
#: offloaded before any other mechanism sees it, as it would be when the result is stored.
OFFLOAD = Stage("artifact_offload", 350)
#: The folder offloaded results are saved under (the name ends with the event id).
OFFLOAD_FOLDER = "tool-results"
#: The registry label of the record of what this run already saved.
SAVED_NAME = "artifact_offload_saved"
#: The artifact tools' own results are never offloaded (a loaded page must stay readable).
EXEMPT_TOOLS = frozenset({ARTIFACT_LOAD_TOOL, ARTIFACT_LIST_TOOL, ARTIFACT_SAVE_TOOL})
#: The version of the handle's wording and layout (stored with measured rows through the arm's name).
HANDLE_VERSION = "offload-handle-v1"

HANDLE_HEADER = ("[tool result offloaded to artifact {name!r}: {size:,} bytes, about {tokens:,} tokens (tool {tool}). "
                 "Only its start and end are shown; read the rest with {load}(name={name!r}, offset=..., limit=...).]")
HIDDEN_MARKER = "[... {hidden:,} bytes not shown; {load} offset {offset} ...]"


@dataclass(frozen=True)
class ArtifactOffloadPolicy(PolicyJSON):
    """``[artifact_offload]``: when a tool result is offloaded and what its handle shows."""

    #: A tool result over this many tokens is offloaded (default 1,024: tRPC-Agent-Go's compaction's
    #: ``tool_result_max_tokens``, so the two arms cut at the same size).
    threshold_tokens: int = 1024
    #: Tokens of the result's start the handle shows.
    preview_head_tokens: int = 128
    #: Tokens of the result's end the handle shows.
    preview_tail_tokens: int = 64
    #: Bytes one ``artifact_load`` returns by default.
    load_limit: int = DEFAULT_LOAD_LIMIT
    #: The largest page ``artifact_load`` returns.
    max_load_limit: int = MAX_LOAD_LIMIT

    def __post_init__(self) -> None:
        if self.threshold_tokens < 1:
            raise ValueError("ArtifactOffloadPolicy.threshold_tokens must be >= 1")
        if self.preview_head_tokens < 0 or self.preview_tail_tokens < 0:
            raise ValueError("ArtifactOffloadPolicy preview sizes must be >= 0")
        if self.preview_head_tokens + self.preview_tail_tokens >= self.threshold_tokens:
            raise ValueError("ArtifactOffloadPolicy: preview_head_tokens + preview_tail_tokens must be below "
                             "threshold_tokens (else the handle shows the whole result)")
        if not 0 < self.load_limit <= self.max_load_limit:
            raise ValueError("ArtifactOffloadPolicy: need 0 < load_limit <= max_load_limit")


def offload_name(event: Event) -> str:
    """The artifact name of an offloaded result: ``tool-results/<event id>`` (unsafe characters as ``_``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", event.id or "event")[:200].lstrip(".") or "event"
    return f"{OFFLOAD_FOLDER}/{safe}"


def _longest_fitting(text: str, budget: int, *, from_end: bool) -> int:
    """Characters of ``text``'s start (or end) that fit ``budget`` tokens (binary search, <= 8 per token)."""
    if budget <= 0 or not text:
        return 0
    low, high, best = 0, min(len(text), budget * 8), 0
    while low <= high:
        mid = (low + high) // 2
        piece = text[len(text) - mid:] if from_end else text[:mid]
        if tokens.count_text(piece) <= budget:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def handle_text(name: str, content: str, tool: str, size_tokens: int, policy: ArtifactOffloadPolicy) -> str:
    """The handle a request shows for an offloaded result (see the module docstring)."""
    head = content[:_longest_fitting(content, policy.preview_head_tokens, from_end=False)]
    rest = content[len(head):]
    tail_chars = _longest_fitting(rest, policy.preview_tail_tokens, from_end=True)
    tail = rest[len(rest) - tail_chars:] if tail_chars else ""
    head_bytes = len(head.encode("utf-8"))
    total = len(content.encode("utf-8"))
    hidden = total - head_bytes - len(tail.encode("utf-8"))
    lines = [HANDLE_HEADER.format(name=name, size=total, tokens=size_tokens, tool=tool or "unnamed",
                                  load=ARTIFACT_LOAD_TOOL)]
    if head:
        lines.append(head)
    lines.append(HIDDEN_MARKER.format(hidden=hidden, load=ARTIFACT_LOAD_TOOL, offset=head_bytes))
    if tail:
        lines.append(tail)
    return "\n".join(lines)


class _Saved:
    """What this Runner (or projection) already saved: (app, user, session, name)."""

    def __init__(self) -> None:
        self.keys: set[tuple[str, str, str, str]] = set()


class _OffloadProcessor:
    name = "artifact_offload"

    def __init__(self, owner: ArtifactOffload) -> None:
        self.owner = owner

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        owner = self.owner
        changed = 0
        before = after = 0
        failed: list[str] = []
        events = list(draft.events)
        for i, e in enumerate(events):
            replacement = owner.replacement(e)
            if replacement is None:
                continue
            try:
                await owner.save(inv, e)
            except ArtifactError as exc:  # no handle to nowhere: the result stays whole, and the stats say why
                failed.append(f"{e.id}: {exc}")
                continue
            events[i] = replacement
            changed += 1
            before += tokens.event_tokens(e)
            after += tokens.event_tokens(replacement)
        if changed or failed:
            draft.events = events
            draft.stats.append({"kind": "artifact_offload", "results": changed, "tokens_before": before,
                                "tokens_after": after, "failed": failed})


class ArtifactOffload(ContextMechanism):
    """Offloads tool results over the threshold at arrival; requests show a handle (module docstring)."""

    def __init__(self, policy: ArtifactOffloadPolicy | None = None) -> None:
        self.policy = policy or ArtifactOffloadPolicy()
        # A pure function of the event and the policy, kept per event so every request shows the
        # same handle object (and the token count is made once).
        self._handles: dict[tuple[str, int], Event | None] = {}
        self._load = ArtifactLoadTool(self.policy.load_limit, self.policy.max_load_limit)

    def describe(self) -> str:
        """``"artifact_offload"``."""
        return "artifact_offload"

    def request_processors(self) -> Sequence[StagedProcessor]:
        """The handle processor at :data:`OFFLOAD`."""
        return [StagedProcessor(OFFLOAD, _OffloadProcessor(self))]

    def request_tools(self, inv: Invocation) -> Sequence[Tool]:
        """``artifact_load``, with the policy's page sizes."""
        return [self._load]

    def open(self, services: ServiceRegistry) -> None:
        """Register an in-memory artifact store when the run has none, and the record of saves."""
        if services.get(ArtifactService) is None:  # type: ignore[type-abstract]
            services.add(InMemoryArtifactService(), as_type=ArtifactService, owned=True)
        if services.named(SAVED_NAME) is None:
            services.add(_Saved(), name=SAVED_NAME)

    def replacement(self, event: Event) -> Event | None:
        """The handle copy of ``event`` when it is a tool result over the threshold, else ``None``."""
        m = event.message
        if m is None or not event.is_tool_result() or (m.name or "") in EXEMPT_TOOLS or event.metadata.get("offloaded"):
            return None
        key = (event.id, len(m.content))
        if key in self._handles:
            return self._handles[key]
        handle = None
        threshold = self.policy.threshold_tokens
        if event.token_count is None or event.token_count > threshold:
            size = tokens.count_text(m.content)
            if size > threshold:
                name = offload_name(event)
                handle = event.copy_with(choices=[m.with_content(handle_text(name, m.content, m.name or "", size,
                                                                              self.policy))],
                                         metadata={**event.metadata, "offloaded": name}, token_count=None)
                handle.token_count = tokens.count_event(handle)
        self._handles[key] = handle
        return handle

    async def save(self, inv: Invocation, event: Event) -> None:
        """Save ``event``'s full text as its artifact in ``inv``'s scope, once per run's services."""
        service = inv.services.get(ArtifactService)  # type: ignore[type-abstract]
        m = event.message
        if service is None or m is None:
            return
        name = offload_name(event)
        saved = inv.services.named(SAVED_NAME)
        key = (inv.app_name, inv.user_id, inv.session.id, name)
        if saved is not None and key in saved.keys:
            return
        scope = ArtifactScope(service, inv.app_name, inv.user_id, inv.session.id)
        if not await service.versions(*key):
            await scope.save(name, m.content)
        if saved is not None:
            saved.keys.add(key)

    async def on_event_appended(self, inv: Invocation, event: Event) -> None:
        """A result over the threshold arrived: save it now."""
        if self.replacement(event) is not None:
            await self.save(inv, event)


def paged_back(draft: RequestDraft) -> set[str]:
    """Ids of the events ``draft`` shows as an offload handle while it offers ``artifact_load``.

    What a model reading that request could page back in full by name (the measure of ``recoverable``
    for the offload arm); empty when the request does not offer the tool.
    """
    if not any(getattr(t, "name", "") == ARTIFACT_LOAD_TOOL for t in draft.tools):
        return set()
    out = set()
    for e in draft.events:
        name = e.metadata.get("offloaded")
        if name and e.message is not None and repr(name) in e.message.content:
            out.add(e.id)
    return out


def _mechanism(policy: Any, model: Any) -> ContextMechanism:
    return ArtifactOffload(policy)


register_mechanism(ArtifactOffloadPolicy, _mechanism)

__all__ = [
    "EXEMPT_TOOLS",
    "HANDLE_VERSION",
    "OFFLOAD",
    "OFFLOAD_FOLDER",
    "ArtifactOffload",
    "ArtifactOffloadPolicy",
    "handle_text",
    "offload_name",
    "paged_back",
]
