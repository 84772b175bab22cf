"""Cross-session memory: facts and episodes per (app, user), extracted after runs, searched on demand.

* :class:`MemoryPolicy` — every knob (extraction gate, update policy and its thresholds, search
  mode, preload, worker sizes), JSON round-trip.
* :class:`InMemoryMemoryService` / :class:`DuckDBMemoryService` — the ``MemoryService`` backends
  (``DuckDBMemoryService`` is imported lazily so ``import agentlab.memory`` does not load duckdb).
* :class:`MemoryExtractor` and :class:`MemoryWorker` (:func:`memory_worker_for`) — automatic
  extraction after a run, on a background queue.
* :func:`memory_tools` (``memory_search``) and :class:`MemoryPreloadProcessor` — memory in the request.
* :class:`MemoryMechanism` — what ``LLMAgent(memory=policy)`` runs: preload, the tool, and the
  extraction worker after completed runs; it reaches the store through ``inv.services``.

"The reference" in this package is trpc-agent-go's auto memory (docs/sources.md#auto-memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab._lazy import lazy_exports
from agentlab.memory.extractor import (
    LAST_ERROR_KEY,
    LAST_EXTRACTED_AT_KEY,
    ExtractionResult,
    MemoryExtractor,
)
from agentlab.memory.mechanism import MemoryMechanism
from agentlab.memory.policies import Decision, MemoryOperation, MemoryPolicy
from agentlab.memory.preload import MemoryPreloadProcessor
from agentlab.memory.service import InMemoryMemoryService, Memory, MemoryHit, MemoryService, MemoryVersion
from agentlab.memory.tools import MemorySearchTool, memory_tools
from agentlab.memory.worker import MemoryWorker, memory_worker_for

if TYPE_CHECKING:
    from agentlab.memory.duckdb import DuckDBMemoryService

__all__ = [
    "LAST_ERROR_KEY",
    "LAST_EXTRACTED_AT_KEY",
    "Decision",
    "DuckDBMemoryService",
    "ExtractionResult",
    "InMemoryMemoryService",
    "Memory",
    "MemoryExtractor",
    "MemoryHit",
    "MemoryMechanism",
    "MemoryOperation",
    "MemoryPolicy",
    "MemoryPreloadProcessor",
    "MemorySearchTool",
    "MemoryService",
    "MemoryVersion",
    "MemoryWorker",
    "memory_tools",
    "memory_worker_for",
]


__getattr__, __dir__ = lazy_exports("agentlab.memory", {"DuckDBMemoryService": "agentlab.memory.duckdb"}, globals())
