"""The "Adding a policy" example of docs/adding-a-policy.md, as written: its module registers the arm, the CLI runs it.

The ```python block of that section is written to ``my_policy.py`` and named in
``AGENTLAB_EXTENSIONS`` as the page says; the dry run goes through the CLI, the scripted run
through the executor, and ``report`` pairs ``keep_last+recall`` with ``keep_last``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from cli_helpers import run_cli
from test_toy_arm import LOCOMO_RAW, echo

from agentlab.bench.config import load_settings
from agentlab.bench.datasets.locomo import LoCoMoData, parse_conversation
from agentlab.bench.running import executor
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import get_task
from agentlab.bench.tasks import locomo as lc
from agentlab.model.base import ModelInfo
from agentlab.model.scripted import ScriptedModel
from agentlab.policies import arms

PAGE = Path(__file__).resolve().parents[2] / "docs" / "adding-a-policy.md"


def readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1
    return blocks[0]


@pytest.fixture
def my_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    (tmp_path / "my_policy.py").write_text(readme_example())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AGENTLAB_EXTENSIONS", "my_policy")
    monkeypatch.setattr(lc, "load_locomo", lambda: LoCoMoData((parse_conversation(LOCOMO_RAW, "toy"),), "toy-sha"))
    yield
    arms.ARMS.pop("keep_last", None)
    sys.modules.pop("my_policy", None)


def test_the_example_is_about_thirty_lines() -> None:
    lines = [line for line in readme_example().splitlines() if line.strip()]
    assert 15 <= len(lines) <= 35


async def test_the_readme_policy_runs_and_pairs_with_its_recall(my_policy: None, tmp_path: Path) -> None:
    code, out, err = run_cli("locomo", "--arm", "keep_last+recall", "--dry-run", "--json", "--limit", "2")
    assert code == 0, err
    assert json.loads(out)["mode"] == "keep_last+recall" and json.loads(out)["cases"] == 2
    task = get_task("locomo")
    assert "keep_last" in task.arm_names()
    model = ScriptedModel(info=ModelInfo("scripted", 32_000), default_reply=echo)  # type: ignore[arg-type]
    db = tmp_path / "results.duckdb"
    with ResultStore(db) as store:
        for arm in ("long_context", "keep_last", "keep_last+recall"):
            request = executor.RunRequest(benchmark="locomo", mode=arm, model_spec="scripted",
                                          settings=load_settings("locomo", task.default_settings()), limit=2,
                                          progress=False)
            assert (await executor.run_task(task, request, model=model, store=store)).ok == 2
    code, out, err = run_cli("report", "locomo", "--db", str(db), "--json")
    assert code == 0, err
    recovery = json.loads(out)["recovery"]
    assert {(r["lossy_mode"], r["recovered_mode"]) for r in recovery} == {("keep_last", "keep_last+recall")}
