"""Sessions: the event ledger, state and summaries, behind one ``SessionService`` protocol.

``InMemorySessionService`` keeps everything in the process; ``DuckDBSessionService`` persists to
one DuckDB file (imported lazily so ``import agentlab.session`` does not load duckdb).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab._lazy import lazy_exports
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


__getattr__, __dir__ = lazy_exports("agentlab.session", {"DuckDBSessionService": "agentlab.session.duckdb"}, globals())
