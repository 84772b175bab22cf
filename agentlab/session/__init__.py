"""Sessions: the event ledger, state and summaries, behind one ``SessionService`` protocol.

``InMemorySessionService`` keeps everything in the process; ``DuckDBSessionService`` persists to
one DuckDB file (imported lazily so ``import agentlab.session`` does not load duckdb).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlab.session.base import (
    FULL_SESSION_KEY,
    EventTokenCounter,
    Session,
    SessionKey,
    SessionService,
    Summary,
    SummaryBoundary,
)
from agentlab.session.inmemory import InMemorySessionService

if TYPE_CHECKING:
    from agentlab.session.duckdb import DuckDBSessionService

__all__ = [
    "FULL_SESSION_KEY",
    "DuckDBSessionService",
    "EventTokenCounter",
    "InMemorySessionService",
    "Session",
    "SessionKey",
    "SessionService",
    "Summary",
    "SummaryBoundary",
]


def __getattr__(name: str) -> Any:
    if name == "DuckDBSessionService":
        from agentlab.session.duckdb import DuckDBSessionService

        return DuckDBSessionService
    raise AttributeError(f"module 'agentlab.session' has no attribute {name!r}")
