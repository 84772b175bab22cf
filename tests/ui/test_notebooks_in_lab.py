"""Notebooks used the way a person uses them: JupyterLab in headless Chromium, all cells run, a widget
changed, and what its output then shows checked (``make test-ui``; ``make test`` deselects these).

Adding a notebook is one entry of ``CASES``: which widget to change (by its description), to what,
and what the changed output must show.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.ui.lab import REPO, JupyterLab, LabPage, Shown, chromium_page, copy_notebook, require_ui

pytestmark = pytest.mark.ui


@dataclass(frozen=True)
class NotebookCase:
    """One notebook: its parameters for the test run, the widget a person changes, and the check."""

    notebook: str
    #: The widget's description label, and the option to pick in it.
    widget: str
    choose: str
    #: The parameter cell's overrides, given the test's temporary folder (results go there).
    parameters: Callable[[Path], dict[str, Any]]
    #: What must differ between the output before and after the change (beyond "it changed").
    check: Callable[[Shown, Shown], None]


def check_policy_comparison(before: Shown, after: Shown) -> None:
    """Notebook 03, metric rougeL → f1: a new figure, and the quality-loss table shows f1's deltas."""
    assert len(before.images) == len(after.images) == 1, "the widget shows one figure before and after"
    assert before.images[0] != after.images[0], "the figure was not redrawn for the new metric"
    assert len(after.tables) == 2, "the quality-loss and token-savings tables are shown"
    assert before.column(0, "variant") == after.column(0, "variant"), "the same variants are listed"
    assert before.column(0, "delta") != after.column(0, "delta"), (
        f"the quality-loss deltas still read {before.column(0, 'delta')} after switching the metric")


def check_policy_league(before: Shown, after: Shown) -> None:
    """Notebook 04, budget 8,192 → 32,768: a new Pareto plot, the same arms, other savings in the league table."""
    assert len(before.images) == len(after.images) == 1, "the league shows one figure before and after"
    assert before.images[0] != after.images[0], "the Pareto plot was not redrawn for the new budget"
    assert before.tables and after.tables, "the league table is shown"
    assert before.column(0, "arm") == after.column(0, "arm"), "the same arms are listed"
    assert before.column(0, "prompt_savings") != after.column(0, "prompt_savings"), (
        f"the savings still read {before.column(0, 'prompt_savings')} at the larger budget")


CASES = [
    NotebookCase("03_policy_comparison.ipynb", widget="metric", choose="f1",
                 parameters=lambda tmp: {"DB": str(tmp / "03.duckdb"), "CACHE_DB": str(tmp / "03-cache.duckdb")},
                 check=check_policy_comparison),
    # One benchmark keeps the run short; the budget dropdown switches between the two leagues.
    NotebookCase("04_policy_league.ipynb", widget="budget", choose="32,768",
                 parameters=lambda tmp: {"DB": str(tmp / "04.duckdb"), "CACHE_DB": str(tmp / "04-cache.duckdb"),
                                         "BENCHMARKS": ["qmsum"]},
                 check=check_policy_league),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.notebook)
def test_a_person_runs_the_notebook_and_changes_a_widget(case: NotebookCase, tmp_path: Path) -> None:
    require_ui()
    artifacts = Path(os.environ.get("AGENTLAB_UI_ARTIFACTS") or tmp_path / "artifacts")
    artifacts.mkdir(parents=True, exist_ok=True)
    root = tmp_path / "root"
    root.mkdir()
    copy_notebook(REPO / "notebooks" / case.notebook, root, case.parameters(tmp_path))
    lab = JupyterLab(root, tmp_path / "home")
    try:
        with chromium_page() as page:
            person = LabPage(page, lab, artifacts)
            try:
                person.open(case.notebook)
                person.run_all()
                saved = person.saved_notebook(case.notebook)
                errors = [(i, out.get("ename"), out.get("evalue")) for i, cell in enumerate(saved.cells)
                          if cell.cell_type == "code" for out in cell.outputs if out.output_type == "error"]
                assert not errors, f"cells failed in JupyterLab: {errors}"
                unrun = [i for i, cell in enumerate(saved.cells) if cell.cell_type == "code" and not cell.execution_count]
                assert not unrun, f"cells {unrun} did not run"
                assert page.get_by_text(f"agentlab imported from {REPO / 'agentlab' / '__init__.py'}").count() == 1, (
                    "the kernel did not import this checkout's agentlab")

                control = person.widget(case.widget)
                output = person.output_of(control)
                output.locator("img").first.wait_for(state="visible", timeout=60_000)
                before = person.read(output)
                person.screenshot(output, f"{Path(case.notebook).stem}-before.png")
                person.change(control, case.choose)
                after = person.wait_changed(output, before)
                person.screenshot(output, f"{Path(case.notebook).stem}-after.png")
                case.check(before, after)
            except BaseException:
                page.screenshot(path=str(artifacts / f"{Path(case.notebook).stem}-failure.png"), full_page=True)
                raise
    finally:
        lab.close()
