"""Every peer-policy arm on all four benchmarks, in both seedings, on the scripted model and on the
project's OpenAI-compatible test server, and its dry run without a model.

The histories are the toy ones of ``test_toy_arm`` (a few turns each), run at a small context
budget so the fraction triggers are in play; what must hold is that every arm answers every case
(nothing failed, nothing dropped) through the ordinary executor path, and that its dry run counts
a prompt with no model at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_toy_arm import BENCHMARKS, echo, qmsum_selection, settings_of, tiny_data  # noqa: F401  (fixture)

from agentlab.bench.running import executor
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import get_task
from agentlab.model.base import ModelInfo
from agentlab.model.registry import build_model
from agentlab.model.scripted import ScriptedModel
from agentlab.policies import POLICIES
from agentlab.testing.openai_server import OpenAITestServer

PEERS = tuple(POLICIES)
SEEDINGS = ("forced", "lived")
BUDGET = 2048


async def run_every_arm(benchmark: str, model: object, lme: Path, db: Path) -> dict[tuple[str, str], tuple[int, int]]:
    """(arm, seeding) -> (ok, failed) of a two-case run of each peer arm in each seeding."""
    task = get_task(benchmark)
    settings = settings_of(benchmark, lme)
    selection = qmsum_selection() if benchmark == "qmsum" else None
    out = {}
    with ResultStore(db) as store:
        # MT-Bench-101 compares each turn with the baseline's answers: the baseline runs first, as in a league.
        base = executor.RunRequest(benchmark=benchmark, mode=task.roles().baseline,  # type: ignore[union-attr]
                                   model_spec="test", settings=settings, limit=2, progress=False)
        assert (await executor.run_task(task, base, model=model, store=store, selection=selection)).ok == 2  # type: ignore[arg-type]
        for seeding in SEEDINGS:
            for arm in PEERS:
                request = executor.RunRequest(benchmark=benchmark, mode=arm, model_spec="test", settings=settings,
                                              limit=2, progress=False, seeding=seeding, context_budget=BUDGET)
                summary = await executor.run_task(task, request, model=model, store=store,  # type: ignore[arg-type]
                                                  selection=selection)
                out[(arm, seeding)] = (summary.ok, summary.failed)
    return out


@pytest.mark.parametrize("benchmark", BENCHMARKS)
async def test_every_peer_arm_runs_in_both_seedings_on_the_scripted_model(benchmark: str, tiny_data: Path,  # noqa: F811
                                                                          tmp_path: Path) -> None:
    model = ScriptedModel(info=ModelInfo("scripted", 32_000), default_reply=echo)  # type: ignore[arg-type]
    results = await run_every_arm(benchmark, model, tiny_data, tmp_path / "r.duckdb")
    assert set(results) == {(a, s) for a in PEERS for s in SEEDINGS}
    assert {k: v for k, v in results.items() if v != (2, 0)} == {}


@pytest.mark.parametrize("benchmark", BENCHMARKS)
async def test_every_peer_arm_runs_in_both_seedings_on_the_test_server(benchmark: str, tiny_data: Path,  # noqa: F811
                                                                       tmp_path: Path) -> None:
    with OpenAITestServer(context_window=32_768) as server:
        model = build_model(server.model_spec)
        try:
            results = await run_every_arm(benchmark, model, tiny_data, tmp_path / "r.duckdb")
        finally:
            await model.aclose()  # type: ignore[attr-defined]
        assert server.stats.to_dict()["completions"] > 0
    assert {k: v for k, v in results.items() if v != (2, 0)} == {}


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_every_peer_arms_dry_run_counts_its_prompts_without_a_model(benchmark: str, tiny_data: Path) -> None:  # noqa: F811
    task = get_task(benchmark)
    settings = settings_of(benchmark, tiny_data)
    selection = qmsum_selection() if benchmark == "qmsum" else None
    for arm in PEERS:
        result = executor.dry_run(task, arm, settings, limit=2, selection=selection, context_budget=BUDGET)
        assert result["cases"] == 2 and result["avg_prompt_tokens"] > 0, arm
