"""What made a figure, said in its title: a model, the embedded smoke-test model, or the test server.

A number drawn from the local test server's replies (:mod:`agentlab.testing.openai_server`) or
from the embedded SmolLM2-135M shows that the pipeline runs, nothing about a policy; out of its
notebook a figure must still say so. :func:`model_label` is the phrase a title carries for a
model spec, :func:`titled` puts it into a title, and :func:`says_what_made_it` is the check the
notebook test applies to every figure a notebook renders (:func:`record_figures`).

The kind of the model behind a notebook's figures is the spec its banner showed last
(:func:`note_model`, called by :func:`agentlab.notebooks.kernel.smoke_banner`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["EMBEDDED_LABEL", "REQUIRED_PHRASE", "TEST_SERVER_LABEL", "captioned", "current_kind", "figure_titles",
           "model_kind", "model_label", "note_model", "record_figures", "says_what_made_it", "titled"]

#: The title phrase of anything the local test server answered.
TEST_SERVER_LABEL = "test server: replies are not a model's — plumbing only"
#: The title phrase of anything the embedded model answered.
EMBEDDED_LABEL = "SMOKE TEST, embedded SmolLM2-135M"
#: What a figure's title must contain (case-insensitive), per model kind.
REQUIRED_PHRASE = {"test server": "test server", "embedded": "smoke test"}

#: The model spec of the latest banner in this kernel (None before any).
_noted: list[str | None] = [None]


def model_kind(spec: str | None) -> str:
    """``"test server"``, ``"embedded"``, ``"model"`` (a real one) or ``"none"`` (no spec)."""
    if spec is None or not spec.strip():
        return "none"
    if spec.strip() == "embedded":
        return "embedded"
    from agentlab.testing.openai_server import SERVED_MODEL_SPECS

    return "test server" if spec.strip() in SERVED_MODEL_SPECS else "model"


def model_label(spec: str | None) -> str:
    """The phrase naming what answered: the test-server or smoke-test label, else the model spec."""
    kind = model_kind(spec)
    if kind == "test server":
        return TEST_SERVER_LABEL
    if kind == "embedded":
        return EMBEDDED_LABEL
    return spec or "no model"


def titled(title: str, spec: str | None) -> str:
    """``title`` with what answered on a line of its own above it (the spec of a real model)."""
    return f"{model_label(spec)}\n{title}" if title else model_label(spec)


def captioned(frame: Any, title: str, spec: str | None) -> Any:
    """``frame`` to display with :func:`titled` ``title`` as its caption (a pandas Styler)."""
    return frame.style.set_caption(titled(title, spec))


def note_model(spec: str | None) -> None:
    """Remember ``spec`` as what this kernel's figures are made with (the banner calls it)."""
    _noted[0] = spec


def current_kind() -> str:
    """The :func:`model_kind` of the spec noted last; with none noted, ``"test server"`` when a
    test server has served in this process (a notebook that drew without showing its banner).
    """
    if _noted[0] is None:
        from agentlab.testing.openai_server import SERVED_MODEL_SPECS

        return "test server" if SERVED_MODEL_SPECS else "none"
    return model_kind(_noted[0])


def figure_titles(figure: Any) -> list[str]:
    """The figure's suptitle and every axes' title (non-empty ones), top to bottom."""
    titles = []
    suptitle = getattr(figure, "_suptitle", None)
    if suptitle is not None and suptitle.get_text():
        titles.append(suptitle.get_text())
    for ax in figure.get_axes():
        for where in ("center", "left", "right"):
            text = ax.get_title(loc=where)
            if text:
                titles.append(text)
    return titles


def says_what_made_it(titles: list[str], kind: str) -> bool:
    """Whether ``titles`` carry the phrase ``kind`` requires (a real model or no model requires none)."""
    phrase = REQUIRED_PHRASE.get(kind)
    return phrase is None or any(phrase in t.lower() for t in titles)


def record_figures(path: str | os.PathLike[str]) -> None:
    """Append one JSON line per rendered figure to ``path``: its titles and the kind of model noted.

    Wraps matplotlib's ``print_figure``, which every inline display and ``display(fig)`` goes
    through, so a figure is recorded as it was shown. Used by ``tests/notebooks``.
    """
    from matplotlib.backend_bases import FigureCanvasBase

    original = FigureCanvasBase.print_figure
    if getattr(original, "_records_to", None) is not None:
        original = original._records_to  # type: ignore[attr-defined]
    target = Path(path)

    def print_figure(self: Any, *args: Any, **kwargs: Any) -> Any:
        record = {"titles": figure_titles(self.figure), "kind": current_kind(), "model": _noted[0]}
        with target.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        return original(self, *args, **kwargs)

    print_figure._records_to = original  # type: ignore[attr-defined]
    FigureCanvasBase.print_figure = print_figure  # type: ignore[method-assign]
