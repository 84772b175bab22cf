"""QMSum's ``[summary]`` and ``[recall]`` sections: the shared policies plus how QMSum builds the summary and recalls.

``benchmarks/qmsum.toml`` holds the published values; :mod:`agentlab.bench.tasks.qmsum` runs them
(the ``[dataset]`` section is :class:`agentlab.bench.datasets.qmsum.QMSumDataset`, next to the selection it drives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentlab.recall import SCOPES, RecallPolicy
from agentlab.summary import SummaryPolicy

__all__ = ["RECALL_PATHS", "QMSumRecall", "QMSumSummary"]

#: Recall paths of recall mode (``[recall] qa``): the published on-demand tools, or preload recall
#: for a model that cannot call tools (the embedded model's ``[smoke]`` setting).
RECALL_PATHS = ("tool", "preload")


@dataclass(frozen=True)
class QMSumSummary(SummaryPolicy):
    """``[summary]``: the summary policy, plus how QMSum builds the summary.

    No "keep 20 visible events" knob (the published ``SessionEventLimit``): after the forced
    summary a request holds the question and at most 13 tool events, so it would never remove one.
    """

    #: Force the summary over the whole seeded transcript right after seeding (published); the
    #: trigger-driven alternative is not implemented.
    force_build: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.force_build:
            raise ValueError("force_build = false is not implemented; the published setup force-builds the "
                             "summary after seeding")


@dataclass(frozen=True)
class QMSumRecall(RecallPolicy):
    """``[recall]``: the recall policy, plus which recall path recall mode takes."""

    #: ``tool``: on-demand ``session_search`` / ``session_load`` (published); ``preload``: the
    #: retrieved turns are injected, for a model that cannot call tools.
    qa: Literal["tool", "preload"] = "tool"
    #: Scope the on-demand instruction tells the model to search first.
    scope: str = "current_hidden"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.qa not in RECALL_PATHS:
            raise ValueError(f"qa must be one of {', '.join(RECALL_PATHS)}; got {self.qa!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {self.scope!r}")
