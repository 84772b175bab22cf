"""QMSum's ``[dataset]``, ``[summary]`` and ``[recall]`` sections.

``[dataset]`` is the case selection and how the transcript is delivered; ``[summary]`` and
``[recall]`` are the shared policies plus how QMSum builds the summary and recalls.
``benchmarks/qmsum.toml`` holds the published values; :mod:`agentlab.bench.tasks.qmsum` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentlab.bench.datasets.qmsum import DEFAULT_MIN_DISTANCE_FROM_END
from agentlab.bench.retention.delivery import Delivery
from agentlab.recall import SCOPES, RecallPolicy
from agentlab.summary import SummaryPolicy

__all__ = ["RECALL_PATHS", "QMSumDataset", "QMSumRecall", "QMSumSummary"]

#: Recall paths of recall mode (``[recall] qa``): the published on-demand tools, or preload recall
#: for a model that cannot call tools (the embedded model's ``[smoke]`` setting).
RECALL_PATHS = ("tool", "preload")


@dataclass(frozen=True)
class QMSumDataset(Delivery):
    """``[dataset]``: which QMSum cases run (the published selection by default) and how they are delivered."""

    #: Split of the data; only the test split is shipped.
    split: str = "test"
    #: Meeting domain; only ``ALL`` (every domain) is shipped.
    domain: str = "ALL"
    #: Query type of the cases (244 ``specific`` queries in the test split).
    query_type: str = "specific"
    #: Keep cases whose evidence ends at least this many turns before the end (80 -> 189 cases).
    min_distance_from_end: int = DEFAULT_MIN_DISTANCE_FROM_END

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.split != "test" or self.domain != "ALL":
            raise ValueError(f"only split 'test' and domain 'ALL' are available; got split {self.split!r}, "
                             f"domain {self.domain!r}")
        if self.min_distance_from_end < 0:
            raise ValueError(f"min_distance_from_end must be >= 0; got {self.min_distance_from_end}")


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
