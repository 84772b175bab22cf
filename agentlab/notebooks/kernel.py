"""Setting a notebook kernel up, running async code from a cell, and what every notebook displays.

The smoke banner marks anything made with the embedded model, whose numbers only show that the
pipeline runs.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

# Coroutines from notebook cells (a running loop) run through the harness's one helper.
from agentlab.bench.running.loops import run_sync as run_sync
from agentlab.notebooks import provenance

#: The checkout this package runs from (``agentlab/notebooks/`` is two levels below it).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: The shared read-only dataset copies beside a checkout (what ``make test`` points at).
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"

SMOKE_LABEL = (
    "SMOKE TEST — made with the embedded SmolLM2-135M model (offline, 8,192-token window, no tool "
    "calling). These numbers show that the pipeline runs end to end; they say nothing about the "
    "mechanisms' quality and are not comparable with the published numbers."
)
TEST_SERVER_BANNER = (
    f"{provenance.TEST_SERVER_LABEL.upper()} — answered by agentlab's local OpenAI-compatible test server, "
    "which picks sentences of the prompt (deterministic, no model). The numbers show that the pipeline "
    "runs; they say nothing about a policy."
)



#: ``$AGENTLAB_DATA_DIR`` as the kernel started (setup() returns to it, so rerunning a cell that
#: pointed it elsewhere does not compound).
_INITIAL_DATA_DIR = os.environ.get("AGENTLAB_DATA_DIR")


def setup(*, cache_db: str | os.PathLike[str] | None = None, data_dir: str | os.PathLike[str] | None = None,
          manifest: str | os.PathLike[str] | None = None) -> Path:
    """Prepare a notebook kernel; returns the repository root.

    Works from the repository root so relative paths (``results/...``) mean the same thing in a
    notebook, the CLI and CI. Points the dataset loaders at ``data_dir`` (else at
    ``$AGENTLAB_DATA_DIR`` as the kernel started, else at the shared copies beside the checkout
    when they exist, as the Makefile does), at ``manifest`` instead of ``data/manifest.toml`` when
    given, and the call cache at ``cache_db`` when given.
    """
    os.chdir(REPO_ROOT)
    if data_dir is not None:
        os.environ["AGENTLAB_DATA_DIR"] = str(Path(data_dir).resolve())
    elif _INITIAL_DATA_DIR:
        os.environ["AGENTLAB_DATA_DIR"] = _INITIAL_DATA_DIR
    elif SHARED_DATASETS.is_dir():
        os.environ["AGENTLAB_DATA_DIR"] = str(SHARED_DATASETS)
    if manifest is not None:
        os.environ["AGENTLAB_MANIFEST"] = str(Path(manifest).resolve())
    else:
        os.environ.pop("AGENTLAB_MANIFEST", None)
    if cache_db is not None:
        os.environ["AGENTLAB_CACHE_DB"] = str(Path(cache_db).resolve())
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.figsize": (9, 3.6), "figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.spines.top": False, "axes.spines.right": False, "font.size": 10})
    pd.set_option("display.max_colwidth", 90)
    pd.set_option("display.width", 160)
    return REPO_ROOT


def is_smoke(model_spec: str) -> bool:
    """Whether results of this model are smoke tests (the embedded model)."""
    return model_spec.strip() == "embedded"


def smoke_banner(model_spec: str) -> Any:
    """An HTML banner naming what answers this notebook's calls: a model, the embedded smoke-test
    model, or the local test server (whose replies are not a model's).

    It also notes ``model_spec`` as what the notebook's figures are made with
    (:func:`agentlab.notebooks.provenance.note_model`).
    """
    from IPython.display import HTML

    provenance.note_model(model_spec)
    kind = provenance.model_kind(model_spec)
    if kind == "model":
        return HTML(f"<p><b>Model:</b> {html.escape(model_spec)}</p>")
    text = SMOKE_LABEL if kind == "embedded" else TEST_SERVER_BANNER + f" ({model_spec})"
    return HTML('<div style="border:2px solid #c44e52;background:#fbeaea;padding:8px;margin:4px 0">'
                f"<b>{html.escape(text)}</b></div>")


def titled(title: str, model_spec: str) -> str:
    """``title`` under what answered (:func:`agentlab.notebooks.provenance.titled`)."""
    return provenance.titled(title, model_spec)


def model_label(model_spec: str) -> str:
    """The phrase a figure title carries for ``model_spec`` (:func:`agentlab.notebooks.provenance.model_label`)."""
    return provenance.model_label(model_spec)


def side_by_side(frames: Mapping[str, pd.DataFrame | str], *, max_rows: int = 40) -> Any:
    """Several tables (or HTML snippets) next to each other, each under its title."""
    from IPython.display import HTML

    cells = []
    for title, frame in frames.items():
        body = frame if isinstance(frame, str) else frame.head(max_rows).to_html(index=False, na_rep="–")
        cells.append(f'<div style="flex:1;min-width:320px;overflow-x:auto"><b>{html.escape(title)}</b>{body}</div>')
    return HTML(f'<div style="display:flex;gap:16px;align-items:flex-start">{"".join(cells)}</div>')
