"""The one place the server asks agentlab for a request: ledger + mechanisms + input -> request.

It is :func:`agentlab.core.project` (the projection entry point the runtime's ``LLMAgent`` and the
benchmark arms share) over the conversation's ledger, with the caller's tools declared and the
proxy's summary worker as the run's summary service (so summaries are made in the background
after an answer, not by the projection).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentlab.core import Invocation, ProjectionResult, ServiceRegistry, SummaryService, ToolContext
from agentlab.core import project as core_project
from agentlab.events import Event
from agentlab.session.base import Session, SessionService


class CallerTool:
    """A tool the caller declared and runs itself: the declaration goes upstream verbatim."""

    def __init__(self, declaration: dict[str, Any]) -> None:
        self._declaration = declaration
        fn = declaration.get("function") or {}
        self.name = str(fn.get("name", ""))
        self.description = str(fn.get("description", ""))

    def declaration(self) -> dict[str, Any]:
        """The caller's own ``tools`` entry."""
        return self._declaration

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        """Never run here: the caller executes its own tools."""
        raise RuntimeError(f"tool {self.name!r} belongs to the caller and is executed by it")


async def project(*, model: Any, instruction: str, caller_tools: Sequence[dict[str, Any]],
                  mechanisms: Sequence[Any], session: Session, session_service: SessionService,
                  current: Event, context_window: int | None,
                  summary_worker: Any = None) -> tuple[ProjectionResult, Invocation]:
    """The projection of ``session`` under ``mechanisms`` and the invocation it was built for (the
    server's own tools run against it).

    ``current`` is the ledger event of the latest input, already the last event of ``session``;
    its request unit is the one the projection continues (compaction keeps the current unit whole).
    """
    services = ServiceRegistry()
    if summary_worker is not None:
        services.add(summary_worker, as_type=SummaryService)  # not owned: it outlives the request
    result = await core_project(session, mechanisms, current, model=model, instruction=instruction,
                                context_window=context_window, tools=[CallerTool(t) for t in caller_tools],
                                session_service=session_service, services=services,
                                app_name=session.app_name, user_id=session.user_id)
    return result, result.invocation
