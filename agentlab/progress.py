"""Progress inside one long piece of work, for whoever is listening in the current context.

A rolling summary of a 20k-token meeting, a memory-extraction pass over many sessions or the
embedding of a few thousand events can each take minutes inside a single benchmark case. The
components doing that work call :func:`report_progress` after every step; a harness that wants to
show it (the bench executor's progress bar) installs a listener with :func:`observe_progress`
around the case. With no listener a report costs one context-variable lookup.

The listeners live in a :class:`contextvars.ContextVar`, like the call observers of
:mod:`agentlab.model.base`: a report reaches the listeners of the case it belongs to, also from
the worker threads ``asyncio.to_thread`` starts (they run in a copy of the caller's context), and
concurrent cases never see each other's steps. This module imports nothing of the toolkit, so any
layer may report, and it draws nothing itself (no tqdm here: displays belong to the caller).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["Progress", "ProgressListener", "listening", "observe_progress", "report_progress"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    """Step ``done`` of ``total`` (``None`` when the number of steps is not known in advance) of
    ``what``, counted in ``unit``; ``tokens`` of ``tokens_total`` are done when given.
    """

    what: str
    done: int
    total: int | None = None
    unit: str = "step"
    tokens: int | None = None
    tokens_total: int | None = None

    def describe(self) -> str:
        """One short line, e.g. ``summary step 3, 12,400/20,512 tokens``."""
        text = f"{self.what} {self.unit} {self.done}" + (f"/{self.total}" if self.total is not None else "")
        if self.tokens is not None:
            text += f", {self.tokens:,}" + (f"/{self.tokens_total:,}" if self.tokens_total is not None else "") + " tokens"
        return text


ProgressListener = Callable[[Progress], None]

_listeners: contextvars.ContextVar[tuple[ProgressListener, ...]] = contextvars.ContextVar(
    "agentlab_progress_listeners", default=()
)


@contextlib.contextmanager
def observe_progress(listener: ProgressListener) -> Iterator[None]:
    """Send every :func:`report_progress` of this context (and the tasks it starts) to ``listener``."""
    token = _listeners.set((*_listeners.get(), listener))
    try:
        yield
    finally:
        _listeners.reset(token)


def listening() -> bool:
    """Whether anyone listens here: reporters skip the work of measuring progress otherwise."""
    return bool(_listeners.get())


def report_progress(what: str, done: int, total: int | None = None, *, unit: str = "step",
                    tokens: int | None = None, tokens_total: int | None = None) -> None:
    """Tell the listeners of the current context that step ``done`` of ``what`` is finished."""
    listeners = _listeners.get()
    if not listeners:
        return
    event = Progress(what, done, total, unit, tokens, tokens_total)
    for listener in listeners:
        try:
            listener(event)
        except Exception as exc:  # a broken display must never break the work it watches
            log.debug("progress listener failed: %s: %s", type(exc).__name__, exc)
