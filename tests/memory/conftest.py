from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentlab.memory import InMemoryMemoryService
from agentlab.memory.duckdb import DuckDBMemoryService
from agentlab.recall.embed import HashEmbedder


@pytest.fixture(params=["inmemory", "duckdb"])
async def memory_service(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[object]:
    """Each backend, with the deterministic hash embedder (dense and hybrid search work)."""
    if request.param == "inmemory":
        service: object = InMemoryMemoryService(HashEmbedder())
    else:
        service = DuckDBMemoryService(tmp_path / "memories.duckdb", HashEmbedder())
    yield service
    await service.close()  # type: ignore[attr-defined]
