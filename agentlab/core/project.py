"""``project``: the request a set of mechanisms builds for a ledger, without an Agent or a Runner.

The same functions ``LLMAgent.build_request`` uses (:mod:`agentlab.core.build`) run over a session
— or a plain list of Events or Messages, as an OpenAI-compatible proxy receives them — and the
result says, per mechanism, what it did to the request: events it hid (the summary), tool results
it replaced (compaction), system text it added, the summary it injected, and whether it rebuilt
the request before the model call (the synchronous summary of the pressure path).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlab.core.build import build_draft, finish_request, request_chain, request_tools
from agentlab.core.invocation import Invocation, RunOptions
from agentlab.core.mechanism import (
    ContextMechanism,
    EventsRole,
    RequestDraft,
    RequestProcessor,
    as_mechanism,
    in_filter,
    is_history_event,
)
from agentlab.core.services import ServiceRegistry
from agentlab.events import OBJ_TOOL_RESPONSE, OBJ_USER, Event, Message, new_id, user_event
from agentlab.model.base import GenerationConfig, Model, ModelInfo, ModelRequest
from agentlab.session.base import Session, SessionService, Summary

if TYPE_CHECKING:
    from agentlab.core.tools import Tool

log = logging.getLogger(__name__)


@dataclass
class MechanismReport:
    """What one mechanism did to one request."""

    #: The mechanism (``ContextMechanism.describe()``), or ``"runtime"`` for the chain's own steps.
    mechanism: str
    #: Ledger events visible under the filter key that this mechanism kept out of the request.
    hidden_event_ids: list[str] = field(default_factory=list)
    #: Events this mechanism showed as a copy with another message (:func:`replaced_in_request`):
    #: event id -> the copy's ``compacted`` mark, else ``policy:<name>`` of the peer policy, else ``changed``.
    replaced: dict[str, str] = field(default_factory=dict)
    #: Events it put into the request that were not there before it ran (e.g. the current input).
    added_event_ids: list[str] = field(default_factory=list)
    #: System text (and user-prefix text) it added.
    system_text: list[str] = field(default_factory=list)
    #: The summary it injected, if any.
    summary: Summary | None = None
    #: Stats records it left (compaction, synchronous summary).
    stats: list[dict[str, Any]] = field(default_factory=list)
    #: Whether its ``before_request`` replaced the finished request (e.g. after a synchronous summary).
    rebuilt_request: bool = False

    @property
    def acted(self) -> bool:
        """Whether the mechanism changed anything in the request."""
        return bool(self.hidden_event_ids or self.replaced or self.added_event_ids or self.system_text
                    or self.summary is not None or self.stats or self.rebuilt_request)


@dataclass
class ProjectionResult:
    """The request ``project`` built, its prompt tokens, and what each mechanism did."""

    request: ModelRequest
    draft: RequestDraft
    prompt_tokens: int
    #: One report per mechanism, in mechanism order (the chain's own steps are left out).
    reports: list[MechanismReport]
    #: The session projected (a copy when ``project`` added the current input or built it from a list).
    session: Session
    #: The invocation the chain ran with.
    invocation: Invocation

    def report(self, mechanism: ContextMechanism | str) -> MechanismReport:
        """The report of one mechanism (by object or by its ``describe()`` name)."""
        name = mechanism if isinstance(mechanism, str) else mechanism.describe()
        for r in self.reports:
            if r.mechanism == name:
                return r
        raise KeyError(f"no report for mechanism {name!r} (have: {', '.join(r.mechanism for r in self.reports)})")

    @property
    def hidden_event_ids(self) -> list[str]:
        """Every visible ledger event left out of the request, by any mechanism."""
        return [i for r in self.reports for i in r.hidden_event_ids]


class _InfoModel:
    """Stands for a model when only its ``ModelInfo`` is known (the window is all the chain reads)."""

    def __init__(self, info: ModelInfo) -> None:
        self.info = info


@dataclass
class _Host:
    """What the chain reads from ``inv.agent``: a name, the instruction, the model and the chain."""

    name: str
    instruction: str
    model: Any
    processors: list[RequestProcessor]

    def run(self, inv: Invocation) -> AsyncIterator[Event]:
        """Not an agent that runs: ``project`` builds one request and stops."""
        raise TypeError("a projection host builds requests; it does not run")


def ledger_events(items: Sequence[Event | Message], *, filter_key: str = "") -> list[Event]:
    """Events for a plain list of Messages (Events pass through), grouped into request units.

    Each user message opens a unit: it and the messages after it share a ``request_id``, so
    compaction can tell old units from the recent ones as it does in a live session. System
    messages are left out (a request's system text comes from the instruction and the mechanisms).
    """
    out: list[Event] = []
    unit = ""
    for item in items:
        if isinstance(item, Event):
            out.append(item)
            continue
        if item.role == "system":
            continue
        if item.role == "user" or not unit:
            unit = new_id("unit-")
        kind = OBJ_USER if item.role == "user" else (OBJ_TOOL_RESPONSE if item.role == "tool" else None)
        event = Event(author=item.role, choices=[item], invocation_id=unit, request_id=unit, filter_key=filter_key)
        if kind is not None:
            event.object = kind
        out.append(event)
    return out


async def project(source: Session | Sequence[Event | Message], mechanisms: Sequence[ContextMechanism],
                  current_input: str | Message | Event | None = None, model_info: ModelInfo | None = None, *,
                  model: Model | None = None, filter_key: str = "", instruction: str = "",
                  context_window: int | None = None, tools: Sequence[Tool] = (),
                  generation: GenerationConfig | None = None, session_service: SessionService | None = None,
                  services: ServiceRegistry | None = None, allow_tools: bool = True,
                  app_name: str = "agentlab", user_id: str = "user", report_steps: bool = True) -> ProjectionResult:
    """Project ``source`` into the next model request through ``mechanisms`` (no Agent, no Runner).

    ``source`` is a Session (left unchanged: a copy is used when the current input is added) or a
    list of Events / Messages (:func:`ledger_events`). ``current_input`` is the new user turn
    (text, a Message, or an Event; an Event already at the end of the ledger is not added twice);
    ``None`` projects the ledger as it is. ``model_info`` (or ``model.info``) gives the window,
    ``context_window`` overrides it as ``RunOptions.context_window`` does. ``model`` is also the
    model mechanisms bind to (:meth:`ContextMechanism.for_model`, e.g. the summariser of a
    synchronous summary). Services: ``services`` (else a new registry) with ``session_service``
    (else an in-memory one), opened by every mechanism; services they register as owned are
    closed before returning, so background work does not outlive the call. ``report_steps=False`` skips
    what each mechanism did (no copy of the draft per step; ``ProjectionResult.reports`` is empty):
    the request, the draft and the prompt tokens are the same, at less cost (a replay that only
    reads the request).
    """
    bound = [as_mechanism(m, model) for m in mechanisms]
    host_model: Any = model
    if model is None or (model_info is not None and model.info != model_info):
        host_model = _InfoModel(model_info or ModelInfo("unknown", 0))

    registry = services if services is not None else ServiceRegistry()
    session, svc = await _working_session(source, session_service, app_name, user_id, filter_key)
    registry.add(svc, as_type=SessionService, replace=session_service is not None)
    for mechanism in bound:
        mechanism.open(registry)

    owners: dict[int, ContextMechanism] = {}
    processors = request_chain(bound, owners)
    host = _Host("project", instruction, host_model, processors)

    inv_id = new_id("inv-")
    current: Event | None = None
    if isinstance(current_input, Event):
        current = current_input
        inv_id = current.invocation_id or inv_id
    elif current_input is not None:
        message = Message.user(current_input) if isinstance(current_input, str) else current_input
        current = user_event(message.content, invocation_id=inv_id, request_id=inv_id, filter_key=filter_key)
        if message.role != "user" or message.tool_calls:
            current.choices = [message]
    if current is not None and (not session.events or session.events[-1].id != current.id) \
            and session.event_index(current.id) < 0:
        session = Session(session.app_name, session.user_id, session.id, events=[*session.events, current],
                          state=session.state, summaries=session.summaries, created_at=session.created_at,
                          updated_at=session.updated_at)
    inv = Invocation(app_name=session.app_name, user_id=session.user_id, session=session, session_service=svc,
                     agent=host, message=current.message if current and current.message else Message.user(""),
                     options=RunOptions(context_window=context_window), id=inv_id, filter_key=filter_key,
                     user_event=current, services=registry)

    ledger = tuple(session.events)  # the visible ones are worked out only if a summary step needs them
    # The reports describe the build that produced the request sent: a rebuild (after a
    # synchronous summary) starts them over; who rebuilt is recorded on top.
    reports: dict[int, MechanismReport] = {}

    def observe_step(processor: RequestProcessor, before: RequestDraft, after: RequestDraft) -> None:
        owner = owners.get(id(processor))
        if owner is not None:
            _record_step(reports[id(owner)], before, after)

    config = generation or GenerationConfig()
    all_tools = request_tools(inv, tools, bound)

    async def observed_build() -> RequestDraft:
        reports.clear()
        reports.update((id(m), MechanismReport(m.describe())) for m in bound)
        return await build_draft(inv, processors, tools=all_tools, config=config, allow_tools=allow_tools,
                                 observe=observe_step if report_steps else None)

    rebuilt_by: list[ContextMechanism] = []
    try:
        draft = await observed_build()
        request, draft = await finish_request(inv, bound, draft, allow_tools=allow_tools, rebuild=observed_build,
                                              observe=lambda mechanism, old, new: rebuilt_by.append(mechanism))
        if report_steps:
            _attribute_unscanned(reports, owners, processors, ledger, filter_key, draft)
            for mechanism in rebuilt_by:
                report = reports[id(mechanism)]
                report.rebuilt_request = True
                report.stats.extend(s for s in draft.stats if s.get("kind") == "sync_summary")
        result = ProjectionResult(request=request, draft=draft, prompt_tokens=draft.prompt_tokens(request),
                                  reports=[reports[id(m)] for m in bound] if report_steps else [], session=session,
                                  invocation=inv)
    finally:
        for mechanism in bound:
            await mechanism.close()
        await registry.aclose()
    return result


async def _working_session(source: Session | Sequence[Event | Message], session_service: SessionService | None,
                           app_name: str, user_id: str, filter_key: str) -> tuple[Session, SessionService]:
    if isinstance(source, Session):
        if session_service is not None:
            return source, session_service
        svc = _memory_service()
        stored = await svc.create_session(source.app_name, source.user_id, source.id)
        return Session(stored.app_name, stored.user_id, stored.id, events=list(source.events),
                       state=dict(source.state), summaries=dict(source.summaries)), svc
    svc = session_service or _memory_service()
    stored = await svc.create_session(app_name, user_id, new_id("projection-"))
    stored.events = ledger_events(source, filter_key=filter_key)
    return stored, svc


def _memory_service() -> SessionService:
    from agentlab.session.inmemory import InMemorySessionService

    return InMemorySessionService()


def replaced_in_request(shown: Event, original: Event) -> bool:
    """Whether ``shown`` (a request's event) is ``original`` (same id) with its message changed.

    A mechanism never edits the ledger: it puts a copy with another message in the request (a
    placeholder, a head-and-tail truncation, cleared arguments — compaction marks it
    ``compacted``, a peer policy ``policy``). The test is structural: any mechanism's copy whose
    message differs counts; a copy with the same message (metadata only) does not.
    """
    return shown is not original and shown.message != original.message


def _record_step(report: MechanismReport, before: RequestDraft, after: RequestDraft) -> None:
    before_by_id = {e.id: e for e in before.events}
    after_ids = {e.id for e in after.events}
    report.hidden_event_ids.extend(e.id for e in before.events if e.id not in after_ids)
    for e in after.events:
        old = before_by_id.get(e.id)
        if old is None:
            report.added_event_ids.append(e.id)
        elif (old is not e and e.metadata.get("compacted")) or replaced_in_request(e, old):
            mark = e.metadata.get("compacted") or (f"policy:{e.metadata['policy']}" if e.metadata.get("policy")
                                                   else "changed")
            report.replaced[e.id] = str(mark)
    report.system_text.extend(after.system_parts[len(before.system_parts):])
    report.system_text.extend(after.user_prefix[len(before.user_prefix):])
    if after.summary is not None and after.summary is not before.summary:
        report.summary = after.summary
    report.stats.extend(after.stats[len(before.stats):])


def _attribute_unscanned(reports: dict[int, MechanismReport], owners: dict[int, ContextMechanism],
                         processors: Sequence[RequestProcessor], events: Sequence[Event], filter_key: str,
                         final: RequestDraft) -> None:
    """Visible events missing from the request that no step removed are the summary step's.

    The history step reads the ledger only from the summary boundary's round on (and a rebuilt
    request after a synchronous summary starts later still), so the events a summary hides mostly
    never enter the draft; they are attributed to the mechanism owning the summary step.
    """
    summary_owner = next((owners.get(id(p)) for p in processors
                          if getattr(p, "events_role", None) is EventsRole.SUMMARY), None)
    if summary_owner is None:
        return
    report = reports[id(summary_owner)]
    visible = [e.id for e in events if is_history_event(e) and in_filter(e.filter_key, filter_key)]
    by_others = {i for r in reports.values() if r is not report for i in r.hidden_event_ids}
    final_ids = {e.id for e in final.events}
    report.hidden_event_ids = [i for i in visible if i not in final_ids and i not in by_others]


__all__ = ["MechanismReport", "ProjectionResult", "ledger_events", "project", "replaced_in_request"]
