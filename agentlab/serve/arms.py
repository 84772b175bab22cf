"""The arms the proxy can run (``--arm NAME``): the proxy's own four, then every generic arm of the
benchmark harness's registry (:mod:`agentlab.bench.arms`).

An arm here is a name and a builder returning the context mechanisms (policies or
:class:`~agentlab.core.ContextMechanism` objects) that :func:`agentlab.serve.projection.project`
runs over a conversation's ledger, given the upstream as an agentlab model (summarising
mechanisms call it). The proxy's own arms:

* ``passthrough``: no mechanism; the proxy forwards the client's request unrewritten;
* ``compaction``: the seed's request-side compaction;
* ``summary``: the rolling summary, refreshed after every second answer;
* ``summary+recall``: that summary plus session recall, whose tools the server runs itself.

Every other name is looked up in the harness's registry: its peer policies
(``langchain_summarization``, ``codex_compaction``, ...), ``rolling_summary``, and
``<lossy arm>+recall`` (recall over what that arm hid). The registry is imported only for those
names, so a proxy running one of its own arms does not load the harness at start-up.

A request may name another arm for one call with the ``X-Agentlab-Arm`` header; an unknown name
there is an HTTP 400 listing the known arms, as it is a start-up error for ``--arm``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: ``build(model)``: fresh mechanisms for one request (``model`` is the upstream, or ``None``).
Builder = Callable[[Any], list[Any]]


def passthrough(model: Any = None) -> list[Any]:
    """No mechanism: the request goes upstream as the client sent it."""
    return []


def compaction(model: Any = None) -> list[Any]:
    """The seed's request-side compaction with its reference defaults (older tool results over
    1,024 tokens become recoverable placeholders; the last completed request stays whole).
    """
    from agentlab.compaction import CompactionPolicy

    return [CompactionPolicy(enabled=True)]


def _summary_policy() -> Any:
    from agentlab.summary import SummaryPolicy

    # Refresh once more than three message events arrived since the last summary: with one user
    # turn and one answer per request that is every second request.
    return SummaryPolicy(events_over=3)


def summary(model: Any = None) -> list[Any]:
    """Rolling summary (made by the upstream model) injected with its boundary."""
    return [_summary_policy()]


def summary_recall(model: Any = None) -> list[Any]:
    """Rolling summary plus session recall (``session_search``/``session_load``, run by the server)."""
    from agentlab.recall import RecallPolicy

    return [_summary_policy(), RecallPolicy()]


@dataclass(frozen=True)
class Arm:
    """A named arm: the builder of its mechanisms and where it comes from."""

    name: str
    build: Builder
    #: ``"serve"`` (this module's) or ``"bench"`` (the harness's registry).
    source: str = "serve"
    #: One line for listings (the builder's docstring when empty).
    summary: str = ""

    @property
    def description(self) -> str:
        """The arm's one-line description."""
        return self.summary or (self.build.__doc__ or "").strip().splitlines()[0]

    @property
    def rewrites(self) -> bool:
        """Whether the arm projects the request at all (``passthrough`` does not)."""
        return self.build is not passthrough

    def mechanisms(self, model: Any = None) -> list[Any]:
        """Fresh mechanisms for one request; ``model`` is the upstream (summarisers call it)."""
        return list(self.build(model))


ARMS: dict[str, Arm] = {arm.name: arm for arm in (
    Arm("passthrough", passthrough),
    Arm("compaction", compaction),
    Arm("summary", summary),
    Arm("summary+recall", summary_recall),
)}


def _bench_arm(name: str) -> Arm | None:
    import agentlab.bench.arms as registry

    arm = registry.generic_arm(name)
    if arm is None:
        return None

    def build(model: Any, arm: Any = arm) -> list[Any]:
        return arm.mechanisms(None, model)  # no run settings: each section's defaults

    return Arm(name, build, source="bench", summary=arm.description or f"harness arm {name} ({arm.role})")


def arm_names() -> list[str]:
    """Every name ``--arm`` accepts: the proxy's own arms, then the harness's generic arms."""
    import agentlab.bench.arms as registry

    return [*ARMS, *(n for n in registry.generic_names() if n not in ARMS)]


def get_arm(name: str) -> Arm:
    """The arm called ``name``; ``ValueError`` listing the known arms otherwise."""
    arm = ARMS.get(name) or _bench_arm(name)
    if arm is None:
        raise ValueError(f"unknown arm {name!r}; known arms: {', '.join(arm_names())}")
    return arm
