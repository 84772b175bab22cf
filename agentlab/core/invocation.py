"""The work order of one run: who runs, on which session, with which services and options."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentlab.core.services import ServiceRegistry, SummaryService
from agentlab.events import Event, Message, new_id
from agentlab.model.base import GenerationConfig
from agentlab.session.base import Session, SessionService


@runtime_checkable
class Agent(Protocol):
    """What the Runner drives: takes a work order, streams the events of the run."""

    name: str

    def run(self, inv: Invocation) -> AsyncIterator[Event]:
        """Run ``inv`` and yield its events (the Runner decides which ones are persisted)."""
        ...


@dataclass
class RunOptions:
    """Per-run overrides. ``None`` means: use the agent's setting."""

    #: Upper bound on model <-> tool rounds in this run.
    max_tool_iterations: int | None = None
    #: Context window to assume instead of the model's own (for triggers and the 70 % path).
    context_window: int | None = None
    #: Stream partial chunks out (they are never persisted).
    stream: bool | None = None
    generation: GenerationConfig | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


_UNSET: Any = object()


@dataclass
class Invocation:
    """Everything one run needs. Built by the Runner (or ``project``), handed to ``Agent.run``.

    Services (memory, the summary worker, anything a mechanism registers) are reached by type
    through :attr:`services`. ``summary_worker`` remains as a keyword and attribute for older
    callers: it reads and writes the registry's :class:`~agentlab.core.services.SummaryService`.
    """

    app_name: str
    user_id: str
    session: Session
    session_service: SessionService
    agent: Agent
    message: Message
    options: RunOptions = field(default_factory=RunOptions)
    id: str = field(default_factory=lambda: new_id("inv-"))
    filter_key: str = ""
    user_event: Event | None = None
    #: The typed services of this run (shared with the Runner that built it).
    services: ServiceRegistry = field(default_factory=ServiceRegistry)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    #: Free-form per-run scratch space for processors and tools (never persisted).
    scratch: dict[str, Any] = field(default_factory=dict)
    #: Older keyword: a summary worker for this run (goes into ``services``).
    summary_worker: Any = field(default=_UNSET, repr=False, compare=False)

    @property
    def request_id(self) -> str:
        """The request unit of this run: one user message = one unit (compaction protects whole units)."""
        return self.id

    @property
    def context_window(self) -> int:
        """The window this run assumes: its override, else the agent model's (0 = unknown)."""
        if self.options.context_window:
            return self.options.context_window
        info = getattr(getattr(self.agent, "model", None), "info", None)
        return int(getattr(info, "context_window", 0) or 0)

    def cancel(self) -> None:
        """Ask the run to stop at its next step."""
        self.cancelled.set()


def _get_summary_worker(self: Invocation) -> Any:
    return self.services.get(SummaryService)


def _set_summary_worker(self: Invocation, worker: Any) -> None:
    if worker is _UNSET:
        return
    if worker is None:
        self.services.remove(SummaryService)
    else:
        self.services.add(worker, as_type=SummaryService)


# The dataclass field above only makes ``summary_worker`` an __init__ keyword; reads and writes go
# to the registry.
Invocation.summary_worker = property(_get_summary_worker, _set_summary_worker)

__all__ = ["Agent", "Invocation", "RunOptions"]
