"""The arms the proxy can run (``--arm NAME``): the benchmark harness's arms, from its one registry.

:mod:`agentlab.policies.arms` holds every arm: the baseline ``long_context`` (no mechanism: the proxy
forwards the client's request unrewritten; ``passthrough`` is its older name here), the arms only
the proxy runs (``summary``: the rolling summary refreshed every second request;
``summary+recall``: that summary plus session recall, whose tools the server runs itself), and
every generic arm: ``compaction``, ``rolling_summary``, the peer policies, ``<lossy arm>+recall``,
and any arm a module named in ``$AGENTLAB_EXTENSIONS`` registers (docs/adding-a-policy.md).

An arm here wraps one of those with the proxy's builder signature (``build(model)``: no run
settings, so each section's defaults). The baseline is resolved without importing the registry,
so a proxy that only forwards starts without loading the harness.

A request may name another arm for one call with the ``X-Agentlab-Arm`` header; an unknown name
there is an HTTP 400 listing the known arms, as it is a start-up error for ``--arm``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: ``build(model)``: fresh mechanisms for one request (``model`` is the upstream, or ``None``).
Builder = Callable[[Any], list[Any]]
#: The baseline and its older names (kept in step with ``agentlab.policies.arms``; a test checks).
BASELINE = "long_context"
BASELINE_SYNONYMS = ("passthrough",)


def _nothing(model: Any = None) -> list[Any]:
    """No mechanism: the request goes upstream as the client sent it."""
    return []


@dataclass(frozen=True)
class Arm:
    """A named arm: the builder of its mechanisms and what it is."""

    name: str
    build: Builder
    #: ``"baseline"``, ``"lossy"`` or ``"recovered"`` (the registry's role).
    role: str = "lossy"
    #: One line for listings (the builder's docstring when empty).
    summary: str = ""

    @property
    def description(self) -> str:
        """The arm's one-line description."""
        return self.summary or (self.build.__doc__ or "").strip().splitlines()[0]

    @property
    def rewrites(self) -> bool:
        """Whether the arm projects the request at all (the baseline does not)."""
        return self.build is not _nothing

    def mechanisms(self, model: Any = None) -> list[Any]:
        """Fresh mechanisms for one request; ``model`` is the upstream (summarisers call it)."""
        return list(self.build(model))


BASELINE_ARM = Arm(BASELINE, _nothing, role="baseline")


def arm_names() -> list[str]:
    """Every name ``--arm`` accepts (synonyms aside), from the registry."""
    import agentlab.policies.arms as registry

    return registry.serve_arm_names()


def get_arm(name: str) -> Arm:
    """The arm called ``name``; ``ValueError`` listing the known arms otherwise (an extension
    module that cannot be imported: its ``ExtensionError``, one line).
    """
    if name == BASELINE or name in BASELINE_SYNONYMS:
        return BASELINE_ARM
    import agentlab.policies.arms as registry

    arm = registry.serve_arm(name)
    if arm is None:
        raise ValueError(f"unknown arm {name!r}; known arms: {', '.join(arm_names())}")
    if arm.role == "baseline" and not arm.mechanisms(None, None):
        return BASELINE_ARM

    def build(model: Any, arm: Any = arm) -> list[Any]:
        return arm.mechanisms(None, model)  # no run settings: each section's defaults

    return Arm(arm.name, build, role=arm.role, summary=arm.description or f"arm {arm.name} ({arm.role})")
