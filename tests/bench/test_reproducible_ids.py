"""A case creates the same event, session and memory ids every time it runs.

Ids reach prompts: the memory extractor lists the ids of the memories it may update, and
``memory_search`` / ``session_search`` hits carry them. With random ids a rerun of a LoCoMo memory
case sent different prompts from its second extraction pass on, so the call cache replayed 2 of its
22 calls (measured against the local test server before this fix). The test below reruns that case
into a fresh results file with the same call cache and requires every call to be a cache hit.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from cli_helpers import run_cli

from agentlab.bench.store.results import ResultStore
from agentlab.events import new_id, reproducible_ids
from agentlab.memory.service import new_memory_id
from agentlab.session.inmemory import new_session_id
from agentlab.testing.openai_server import OpenAITestServer

pytestmark = pytest.mark.usefixtures("real_model_env")


def test_the_same_seed_gives_the_same_ids_and_other_seeds_other_ids() -> None:
    def ids(seed: str) -> list[str]:
        with reproducible_ids(seed):
            return [new_id("ev-"), new_session_id(), new_memory_id(), new_id()]

    first, again, other = ids("qmsum/recall/c1"), ids("qmsum/recall/c1"), ids("qmsum/recall/c2")
    assert first == again
    assert not set(first) & set(other)
    assert len(set(first)) == 4 and first[2].startswith("mem-") and len(first[2]) == 20
    assert new_id() != new_id()  # outside a scope: random, as before


async def test_tasks_started_in_the_scope_share_its_sequence() -> None:
    async def one() -> str:
        return new_id()

    with reproducible_ids("s"):
        a = await asyncio.create_task(one())
        b = new_id()
    with reproducible_ids("s"):
        assert [await asyncio.create_task(one()), new_id()] == [a, b]


def _locomo_available() -> bool:
    root = Path(os.environ.get("AGENTLAB_DATA_DIR", "data/cache"))
    return (root / "locomo").exists()


@pytest.mark.skipif(not _locomo_available(), reason="needs the LoCoMo data under $AGENTLAB_DATA_DIR")
def test_a_memory_case_replays_entirely_from_the_call_cache(tmp_path: Path) -> None:
    flags = ("locomo", "--mode", "memory", "--no-baselines", "--limit", "1", "--no-progress")
    with OpenAITestServer(context_window=131_072, window_style="vllm") as server:
        code, out, err = run_cli(*flags, "--model", server.model_spec, "--db", str(tmp_path / "first.duckdb"))
        assert code == 0, err
        searched = server.stats.answers["tool_calls"]
        code, out, err = run_cli(*flags, "--model", server.model_spec, "--db", str(tmp_path / "again.duckdb"))
        assert code == 0, err
    assert searched >= 1  # the answer went through memory_search, whose hits carry memory ids
    with ResultStore(tmp_path / "again.duckdb", read_only=True) as store:
        rows = store.query("SELECT purpose, cache_hit FROM calls")
    extractions = [hit for purpose, hit in rows if purpose == "memory"]
    assert len(extractions) >= 2  # the second pass onwards lists the memories (and ids) already stored
    assert all(hit for _, hit in rows), rows
