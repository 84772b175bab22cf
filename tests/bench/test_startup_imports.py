"""Start-up cost of the CLI: what `python -m agentlab.bench list` and a run's start import (issue 20).

rouge-score pulls in nltk and with it scipy, over a second of start-up; a command that scores no
ROUGE must not pay it. Checked in a fresh interpreter, since this test session has long imported
everything.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentlab.bench.metrics import rouge

#: Imported only when a ROUGE score is computed (QMSum, LongMemEval scoring).
LAZY = ("rouge_score", "nltk", "scipy")


def _loaded_after(code: str) -> set[str]:
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("code", [
    "import agentlab.bench.cli",
    "import io\nfrom agentlab.bench.cli import main\nmain(['list'], io.StringIO())",
], ids=["import-cli", "list"])
def test_cli_start_does_not_load_rouge_or_nltk(code: str) -> None:
    loaded = _loaded_after(code)
    assert "agentlab.bench.metrics" in loaded  # the check means something: metrics itself is imported
    assert not {m for m in loaded if m.split(".")[0] in LAZY}


def test_a_rouge_score_loads_rouge_score_when_needed() -> None:
    loaded = _loaded_after("from agentlab.bench.metrics import rouge\nrouge('the cat sat', 'a cat sat')")
    assert "rouge_score" in loaded
    assert rouge("the cat sat", "a cat sat")["rouge1"] == pytest.approx(2 / 3)
