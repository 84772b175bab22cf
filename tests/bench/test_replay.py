"""``--seeding``: a generic arm's history reaches its session at once (``forced``) or lived event by event.

With a small ``summary.tokens_over`` the rolling summary's own trigger fires while a lived history
is replayed, so a summary covering part of the history exists before the question; forced seeding
keeps today's behaviour: the trigger has seen nothing before the question's request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlab.bench.config import apply_overrides, load_settings
from agentlab.bench.datasets.longmemeval import write_longmemeval_fixture
from agentlab.bench.running import executor
from agentlab.bench.running.replay import check_seeding
from agentlab.bench.spec import resolve_run
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import get_task
from agentlab.bench.usage import UsageError
from agentlab.model.base import ModelInfo, ModelRequest
from agentlab.model.scripted import ScriptedModel

SUMMARY = "The user moved to a new city and asked for recipes."


def reply(request: ModelRequest) -> str:
    return SUMMARY if request.purpose == "summary" else "You moved to Lisbon."


async def run(tmp_path: Path, seeding: str) -> tuple[list[ModelRequest], dict, str]:
    path = write_longmemeval_fixture(tmp_path / f"lme-{seeding}.json", n_questions=1,
                                     question_types=["single-session-user"])
    task = get_task("longmemeval")
    settings = apply_overrides(load_settings("longmemeval", task.default_settings()),
                               [f"dataset.path={path}", "summary.tokens_over=40", "summary.events_over=null", "summary.context_ratio=null"])
    model = ScriptedModel(info=ModelInfo("scripted", 32_000), default_reply=reply)  # type: ignore[arg-type]
    request = executor.RunRequest(benchmark="longmemeval", mode="rolling_summary", model_spec="scripted",
                                  settings=settings, progress=False, seeding=seeding)
    with ResultStore(tmp_path / f"{seeding}.duckdb") as store:
        summary = await executor.run_task(task, request, model=model, store=store)
        assert summary.ok == 1, summary.errors
        (metadata,), = store.query("SELECT metadata FROM cases")
        calls = store.query("SELECT purpose FROM calls")
    return list(model.requests), {"meta": json.loads(metadata), "calls": [c for c, in calls]}, summary.run_id


async def test_lived_seeding_fires_the_summary_trigger_before_the_question(tmp_path: Path) -> None:
    requests, facts, lived_id = await run(tmp_path, "lived")
    summaries = [i for i, r in enumerate(requests) if r.purpose == "summary"]
    answers = [i for i, r in enumerate(requests) if r.purpose == "answer"]
    assert summaries and answers and summaries[0] < answers[0]  # summarised while the history was lived
    assert facts["calls"].count("summary") == len(summaries)  # counted like any other call
    assert facts["meta"]["seeding"] == "lived" and facts["meta"]["lived_requests"] == facts["meta"]["seeded_events"]
    answer = requests[answers[-1]]
    system = answer.messages[0].content
    assert SUMMARY in system  # injected at a boundary before the end: the history is only partly shown
    assert len(answer.messages) < facts["meta"]["seeded_events"] + 2

    forced_requests, forced, forced_id = await run(tmp_path, "forced")
    first_answer = next(i for i, r in enumerate(forced_requests) if r.purpose == "answer")
    assert not any(r.purpose == "summary" for r in forced_requests[:first_answer])
    assert forced["meta"]["seeding"] == "forced" and "lived_requests" not in forced["meta"]
    assert forced_id != lived_id


def test_seeding_is_in_the_run_id_only_when_lived() -> None:
    forced = resolve_run("qmsum", mode="rolling_summary", model="scripted", action="dry_run")
    default = resolve_run("qmsum", mode="rolling_summary", model="scripted", action="dry_run", seeding="forced")
    lived = resolve_run("qmsum", mode="rolling_summary", model="scripted", action="dry_run", seeding="lived")
    assert forced == default and lived.seeding == "lived"
    task = get_task("qmsum")
    configs = {s.seeding: executor.run_config(task, s.request("rolling_summary"), "sha") for s in (forced, lived)}
    assert "seeding" not in configs["forced"] and configs["lived"]["seeding"] == "lived"
    info = ModelInfo("scripted", 32_000)
    assert "seeding lived" in lived.bind(info, "sha").header() and "seeding" not in forced.bind(info, "sha").header()
    with pytest.raises(ValueError, match="forced, lived"):
        check_seeding("sometimes")
    # A task's own mode seeds its own way: a lived id for it would name a run that is not lived.
    with pytest.raises(UsageError, match="--seeding lived is for generic arms"):
        resolve_run("qmsum", mode="summary", model="scripted", action="dry_run", seeding="lived")
