"""The work order of one run: who runs, on which session, with which services and options."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlab.events import Event, Message, new_id
from agentlab.model.base import GenerationConfig
from agentlab.session.base import Session, SessionService

if TYPE_CHECKING:
    from agentlab.runtime.agent import Agent


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


@dataclass
class Invocation:
    """Everything one run needs. Built by the Runner, handed to ``Agent.run``."""

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
    memory_service: Any = None
    summary_worker: Any = None
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    #: Free-form per-run scratch space for processors and tools (never persisted).
    scratch: dict[str, Any] = field(default_factory=dict)

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
