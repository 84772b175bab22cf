"""LoCoMo's ``[dataset]`` and ``[memory]`` sections (``benchmarks/locomo.toml`` holds the published values).

:mod:`agentlab.bench.tasks.locomo` runs them: ``[dataset]`` picks the questions, how a turn with an
image is written and how the history is delivered; ``[memory]`` is the memory policy plus how
questions reach the memories.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentlab.bench.datasets.locomo import CATEGORY_NAMES_OFFICIAL
from agentlab.bench.retention.delivery import DeliverySetting
from agentlab.memory.policies import MemoryPolicy

__all__ = ["PHASE_FIELDS", "LoCoMoDataset", "LoCoMoMemory"]


@dataclass(frozen=True)
class LoCoMoDataset(DeliverySetting):
    """``[dataset]``: which questions run, how a turn with an image is written, how the history is delivered."""

    #: LoCoMo categories to keep (1-5: 282 / 321 / 96 / 841 / 446 questions).
    categories: tuple[int, ...] = (1, 2, 3, 4, 5)
    #: Append ``[shares <caption>]`` to a turn that shared an image (published run: text only).
    include_image_captions: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = sorted(set(self.categories) - set(CATEGORY_NAMES_OFFICIAL))
        if not self.categories or unknown:
            raise ValueError(f"categories must be some of {', '.join(map(str, sorted(CATEGORY_NAMES_OFFICIAL)))}; "
                             f"got {list(self.categories)}")


#: MemoryPolicy fields the task sets per phase from ``qa`` (see :func:`agentlab.bench.tasks.locomo.memory_policy`).
PHASE_FIELDS = ("auto_extract", "search_tool", "preload_limit")


@dataclass(frozen=True)
class LoCoMoMemory(MemoryPolicy):
    """``[memory]``: the memory policy, plus how questions reach the memories.

    The task derives ``auto_extract``, ``search_tool`` and ``preload_limit`` per phase (extraction,
    then questions) from ``qa``, so they are not settings: a value for them is refused rather
    than stored and ignored.
    """

    #: ``tool``: the model calls ``memory_search`` (published); ``preload``: the top
    #: ``search_top_k`` memories are injected, for a model that cannot call tools.
    qa: Literal["tool", "preload"] = "tool"
    #: ``memory_search`` rounds before the answer (Original: 1 -> 2 calls per question).
    search_passes: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.qa not in ("tool", "preload"):
            raise ValueError(f"qa must be one of tool, preload; got {self.qa!r}")
        if self.search_passes < 1:
            raise ValueError(f"search_passes must be >= 1; got {self.search_passes}")
        base = MemoryPolicy()
        fixed = [name for name in PHASE_FIELDS if getattr(self, name) != getattr(base, name)]
        if fixed:
            raise ValueError(f"{', '.join(fixed)} cannot be set: the task derives them from qa per phase")
