"""Notebooks are committed without outputs, and each starts with a parameter cell."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
ANALYSIS = [p for p in NOTEBOOKS if p.name.split("_")[0] >= "10"]


def test_the_expected_notebooks_exist() -> None:
    names = {p.name for p in NOTEBOOKS}
    assert {"01_runtime_tour.ipynb", "02_compaction_explorer.ipynb", "03_policy_comparison.ipynb",
            "04_policy_league.ipynb", "06_composition.ipynb", "10_qmsum_analysis.ipynb",
            "11_mtbench101_analysis.ipynb", "12_longmemeval_analysis.ipynb", "13_locomo_analysis.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name} cell {i} has outputs: strip them before committing"
            assert cell.execution_count is None, f"{path.name} cell {i} has an execution count"
    assert "widgets" not in nb.metadata, f"{path.name} carries widget state"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_parameter_cell_comes_first(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), f"{path.name}: first code cell is not tagged parameters"


@pytest.mark.parametrize("path", ANALYSIS, ids=lambda p: p.name)
def test_analysis_parameters_name_model_limit_and_db(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    params = next(c for c in nb.cells if c.cell_type == "code").source
    for name in ("MODEL =", "LIMIT =", "DB ="):
        assert name in params, f"{path.name}: parameter cell lacks {name}"
