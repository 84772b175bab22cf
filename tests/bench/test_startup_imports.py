"""Start-up cost of the CLI: what `python -m agentlab.bench list` and a run's start import.

rouge-score pulls in nltk and with it scipy, over a second of start-up; a command that scores no
ROUGE must not pay it. Checked in a fresh interpreter, since this test session has long imported
everything.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentlab.bench.scoring.metrics import rouge

#: Imported only when a ROUGE score is computed (QMSum, LongMemEval scoring).
LAZY = ("rouge_score", "nltk", "scipy")


def _loaded_after(code: str) -> set[str]:
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("code", [
    "import agentlab.bench.cli.main",
    "import io\nfrom agentlab.bench.cli.main import main\nmain(['list'], io.StringIO())",
], ids=["import-cli", "list"])
def test_cli_start_does_not_load_rouge_or_nltk(code: str) -> None:
    loaded = _loaded_after(code)
    assert "agentlab.bench.scoring.metrics" in loaded  # the check means something: metrics itself is imported
    assert not {m for m in loaded if m.split(".")[0] in LAZY}


def test_a_rouge_score_loads_rouge_score_when_needed() -> None:
    loaded = _loaded_after("from agentlab.bench.scoring.metrics import rouge\nrouge('the cat sat', 'a cat sat')")
    assert "rouge_score" in loaded
    assert rouge("the cat sat", "a cat sat")["rouge1"] == pytest.approx(2 / 3)


def test_a_run_of_one_benchmark_imports_only_its_task_module() -> None:
    loaded = _loaded_after("from agentlab.bench.tasks import get_task\nget_task('mtbench101')")
    assert "agentlab.bench.tasks.mtbench101" in loaded
    assert not {"agentlab.bench.tasks.locomo", "agentlab.bench.tasks.qmsum", "agentlab.memory"} & loaded


def test_an_unknown_benchmark_still_names_every_known_one() -> None:
    from agentlab.bench.tasks import UnknownBenchmark, get_task

    with pytest.raises(UnknownBenchmark, match="locomo.*longmemeval.*mtbench101.*qmsum"):
        get_task("no_such_benchmark")
