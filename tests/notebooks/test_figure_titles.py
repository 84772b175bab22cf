"""Every figure a notebook draws says what made it.

Each notebook in ``notebooks/`` (a new one included) is executed with a first cell that records
every rendered figure's titles and the kind of model its banner named
(:func:`agentlab.notebooks.provenance.record_figures`). A figure made while the local test server
answered must carry "test server" in a title, one made on the embedded model "smoke test".

The notebooks' model calls replay from their call caches (``results/cache/``) and their runs are
found stored, so after ``make test``'s nbmake pass (or a first run of this test) an execution
costs seconds, not model time. The notebook executions are marked slow (``make test-slow``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlab.notebooks.provenance import REQUIRED_PHRASE, says_what_made_it

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def rendered_figures(notebook: Path, log: Path) -> list[dict[str, object]]:
    """Execute ``notebook`` and return one record per figure it rendered (titles, model kind)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(notebook, as_version=4)
    recorder = f"from agentlab.notebooks import provenance\nprovenance.record_figures({str(log)!r})"
    nb.cells.insert(0, nbformat.v4.new_code_cell(recorder))
    nbclient.NotebookClient(nb, timeout=1800, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO)}}).execute()
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


def unlabelled(records: list[dict[str, object]]) -> list[str]:
    """The figures whose titles do not say what made them, one line each."""
    return [f"{r['kind']} ({r['model']}): titles {r['titles']} lack {REQUIRED_PHRASE[str(r['kind'])]!r}"
            for r in records if not says_what_made_it(list(r["titles"]), str(r["kind"]))]  # type: ignore[arg-type]


def test_the_check_fails_on_a_figure_without_the_label() -> None:
    # The rule the notebook test applies, on records like those the recorder writes.
    bad = [{"titles": ["qmsum · rougeL: savings against delta"], "kind": "test server", "model": "openai:x"},
           {"titles": ["ours: locomo_f1"], "kind": "embedded", "model": "embedded"}]
    good = [{"titles": ["test server: replies are not a model's — plumbing only\nqmsum"], "kind": "test server",
             "model": "openai:x"},
            {"titles": ["LoCoMo — SMOKE TEST, embedded SmolLM2-135M"], "kind": "embedded", "model": "embedded"},
            {"titles": ["QMSum — openai:gpt-4o-mini"], "kind": "model", "model": "openai:gpt-4o-mini"},
            {"titles": ["no model at all"], "kind": "none", "model": None}]
    assert len(unlabelled(bad)) == 2 and unlabelled(good) == []


# Slow: it executes every notebook again (make test's nbmake pass executes them once; CI's test-slow
# runs this after it, so the notebooks' runs and calls replay from results/).
@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_every_figure_made_without_a_model_says_so(notebook: Path, tmp_path: Path) -> None:
    records = rendered_figures(notebook, tmp_path / "figures.jsonl")
    problems = unlabelled(records)
    assert not problems, f"{notebook.name}: " + "; ".join(problems)
