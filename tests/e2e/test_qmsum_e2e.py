"""One QMSum case in ``recall`` mode on the embedded model, through the executor, into a temporary DB.

What this proves: the whole recall-mode path runs on a real (weak) model — seeding, the forced
summary, installing it, evidence recall, the agent with the recall tools, the judge, and the
one-transaction case write — and ends in a stored case row that is ``ok`` or a recorded failure
with a code, never a crash. To stay short it uses a real case whose evidence is early in its
meeting, with the transcript cut to about 600 tokens, short answer/summary limits and no judge
(the judge has its own tests). Both recall paths run: the published on-demand tools and the
preload path the embedded model's smoke settings choose. Answer quality is not checked
(SmolLM2-135M is a smoke-test model).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from agentlab.bench.config import load_settings
from agentlab.bench.running import executor
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import CaseSelection, get_task
from agentlab.model import tokens

pytestmark = pytest.mark.slow

CASE_ID = "education_13_specific_02"  # evidence in turns 1..5 of 133
TOKEN_BUDGET = 600


def short_case():  # type: ignore[no-untyped-def]
    data_dir = os.environ.get("AGENTLAB_DATA_DIR", "")
    if not data_dir or not (Path(data_dir) / "qmsum").is_dir():
        pytest.skip("needs AGENTLAB_DATA_DIR with the QMSum test split")
    task = get_task("qmsum")
    settings = (load_settings("qmsum", task.default_settings())
                .with_values("answer", max_tokens=64).with_values("summary", max_output_tokens=128))
    [case] = [c for c in task.load_cases(settings).cases if c.id == CASE_ID]
    item = case.data
    keep, used = 0, 0
    for i, text in enumerate(item.meeting.turn_texts()):
        used += tokens.count_text(text)
        keep = i + 1
        if used > TOKEN_BUDGET and keep > item.support_window[1] + 2:
            break
    meeting = replace(item.meeting, turns=item.meeting.turns[:keep])
    return task, settings, task.case_from(replace(item, meeting=meeting))


@pytest.mark.parametrize("recall_path", ["tool", "preload"])
async def test_one_recall_case_on_the_embedded_model(tmp_path: Path, recall_path: str) -> None:
    pytest.importorskip("xllamacpp")
    from agentlab.model.registry import get_model

    task, settings, case = short_case()
    settings = settings.with_values("recall", qa=recall_path)
    model = get_model("embedded", cache=False)
    request = executor.RunRequest(benchmark="qmsum", mode="recall", model_spec="embedded", settings=settings,
                                  concurrency=1, smoke_test=True, progress=False)
    with ResultStore(tmp_path / "e2e.duckdb") as store:
        summary = await executor.run_task(task, request, model=model, store=store,
                                          selection=CaseSelection([case], "e2e-trimmed", 1))
        rows = store.query("SELECT case_id, status, error_code, metadata FROM cases WHERE run_id = ?",
                           [summary.run_id])
        purposes = dict(store.query("SELECT purpose, count(*) FROM calls WHERE run_id = ? GROUP BY purpose",
                                    [summary.run_id]))
    assert summary.status == "finished" and summary.attempted == 1
    [(case_id, status, error_code, metadata)] = rows
    assert case_id == CASE_ID
    if status == "ok":
        meta = json.loads(metadata)
        assert meta["summary_chars"] > 0 and meta["answer_calls"] >= 1
        assert "evidence_recall@5" in meta and meta["recall_path"] == recall_path
        if recall_path == "preload":  # the evidence is in the request whether or not the model calls tools
            assert meta["recall_hits"] >= 1 and meta["tool_calls"] == 0
        assert purposes.get("summary", 0) >= 1 and purposes.get("answer", 0) >= 1
    else:
        assert status == "failed" and error_code  # recorded with its code, e.g. context_length
