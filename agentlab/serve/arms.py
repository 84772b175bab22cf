"""The named arms the proxy can run: each is a set of context mechanisms for an ``LLMAgent``.

A small stand-in until the benchmark harness has its own arm registry: one function per arm
returning the ``LLMAgent`` keyword arguments (``summary=``, ``compaction=``, ``recall=``) built
from the existing policies. ``passthrough`` returns none and the proxy then forwards the client's
request unrewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentlab.compaction import CompactionPolicy
from agentlab.recall import RecallPolicy
from agentlab.summary import SummaryPolicy

Mechanisms = dict[str, Any]


def passthrough() -> Mechanisms:
    """No mechanism: the request goes upstream as the client sent it."""
    return {}


def compaction() -> Mechanisms:
    """The seed's request-side compaction with its reference defaults (older tool results over
    1,024 tokens become recoverable placeholders; the last completed request stays whole).
    """
    return {"compaction": CompactionPolicy(enabled=True)}


def _summary_policy() -> SummaryPolicy:
    # Refresh once more than three message events arrived since the last summary: with one user
    # turn and one answer per request that is every second request.
    return SummaryPolicy(events_over=3)


def summary() -> Mechanisms:
    """Rolling summary (made by the upstream model) injected with its boundary."""
    return {"summary": _summary_policy()}


def summary_recall() -> Mechanisms:
    """Rolling summary plus session recall (``session_search``/``session_load``, run by the server)."""
    return {"summary": _summary_policy(), "recall": RecallPolicy()}


@dataclass(frozen=True)
class Arm:
    """A named arm: its mechanisms and whether it rewrites the request at all."""

    name: str
    build: Callable[[], Mechanisms]

    @property
    def description(self) -> str:
        """The first line of the arm function's docstring."""
        return (self.build.__doc__ or "").strip().splitlines()[0]

    @property
    def rewrites(self) -> bool:
        """Whether the arm projects the request (``passthrough`` does not)."""
        return bool(self.build())

    def mechanisms(self) -> Mechanisms:
        """Fresh ``LLMAgent`` keyword arguments for this arm."""
        return self.build()


ARMS: dict[str, Arm] = {arm.name: arm for arm in (
    Arm("passthrough", passthrough),
    Arm("compaction", compaction),
    Arm("summary", summary),
    Arm("summary+recall", summary_recall),
)}


def get_arm(name: str) -> Arm:
    """The arm called ``name``; ``ValueError`` listing the known arms otherwise."""
    try:
        return ARMS[name]
    except KeyError:
        raise ValueError(f"unknown arm {name!r}; known arms: {', '.join(ARMS)}") from None
