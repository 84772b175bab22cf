"""The one place the server asks agentlab for a request: ledger + mechanisms + input -> request.

Today that is ``LLMAgent.build_request`` on an ``Invocation``; when ``agentlab.core.project``
lands, :func:`project` becomes a call to it and nothing else in ``agentlab.serve`` changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentlab.events import Event, Message
from agentlab.model.base import ModelRequest
from agentlab.runtime.agent import LLMAgent
from agentlab.runtime.invocation import Invocation, RunOptions
from agentlab.runtime.tools import Tool, ToolContext
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
                  mechanisms: dict[str, Any], session: Session, session_service: SessionService,
                  current: Event, unit_id: str, context_window: int | None,
                  summary_worker: Any = None) -> tuple[ModelRequest, list[Tool], Invocation]:
    """The upstream request for ``session`` under ``mechanisms``, with the tools it offers and the
    invocation it was built for (the server tools run against it).

    ``current`` is the ledger event of the latest input; ``unit_id`` the request unit it opens or
    continues (compaction keeps the current unit whole).
    """
    agent = LLMAgent("agentlab-serve", model, instruction=instruction,
                     tools=[CallerTool(t) for t in caller_tools], incremental_projection=False,
                     **mechanisms)
    message = current.message or Message.user("")
    inv = Invocation(app_name=session.app_name, user_id=session.user_id, session=session,
                     session_service=session_service, agent=agent, message=message,
                     options=RunOptions(context_window=context_window), id=unit_id,
                     user_event=current, summary_worker=summary_worker)
    request, draft = await agent.build_request(inv)
    return request, list(draft.tools), inv
