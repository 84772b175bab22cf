"""MT-Bench-101's settings sections: which tasks run, the answer calls, the rolling summary, and the report's rules.

``benchmarks/mtbench101.toml`` holds the published values; :mod:`agentlab.bench.tasks.mtbench101` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentlab.bench.datasets.mtbench101 import ALL_TASKS, PUBLISHED_TASKS
from agentlab.model.base import GenerationConfig
from agentlab.policy_json import PolicyJSON
from agentlab.summary import SummaryPolicy

__all__ = ["ANSWER_INSTRUCTION", "ANSWER_INSTRUCTION_VERSION", "ConsistencySettings", "MTBenchAnswer",
           "MTBenchDataset", "MTBenchSummary", "RetentionSettings", "SuitabilityRule"]

#: The published agent had no instruction; an empty instruction sends no system message.
ANSWER_INSTRUCTION_VERSION = "mtbench-answer-v1"
ANSWER_INSTRUCTION = ""
#: Consistency value the reference counts as a pass (Pass^1).
PASS_THRESHOLD = 0.7


@dataclass(frozen=True)
class MTBenchDataset(PolicyJSON):
    """``[dataset]``: which MT-Bench-101 tasks run."""

    #: Task codes (the published 9 = 917 dialogues); ``["ALL"]`` = all 13 tasks.
    tasks: tuple[str, ...] = PUBLISHED_TASKS

    def __post_init__(self) -> None:
        tasks = [t.strip().upper() for t in self.tasks]
        unknown = sorted(set(tasks) - set(ALL_TASKS))
        if not tasks or (tasks != ["ALL"] and unknown):
            raise ValueError(f"tasks must be some of {', '.join(sorted(ALL_TASKS))} or ALL; got {list(self.tasks)}")


@dataclass(frozen=True)
class MTBenchAnswer(GenerationConfig):
    """``[answer]``: the answer calls' generation config, plus the agent's instruction."""

    #: System instruction of the answering agent (the published agent had none).
    instruction: str = ANSWER_INSTRUCTION


@dataclass(frozen=True)
class MTBenchSummary(SummaryPolicy):
    """``[summary]``: the rolling summary policy, plus whether a turn waits for a queued summary."""

    #: The next turn waits for a queued summary (ours: deterministic replay; the published
    #: service summarised asynchronously).
    wait_between_turns: bool = True


@dataclass(frozen=True)
class ConsistencySettings(PolicyJSON):
    """``[consistency]``: the Pass^1 rule."""

    #: A case passes when its consistency (0.4 + 0.6 x judge) is at least this.
    pass_threshold: float = PASS_THRESHOLD

    def __post_init__(self) -> None:
        if not 0.0 <= self.pass_threshold <= 1.0:
            raise ValueError(f"pass_threshold must be in [0, 1]; got {self.pass_threshold}")


@dataclass(frozen=True)
class RetentionSettings(PolicyJSON):
    """``[retention]``: whether the LLM retention score is added to the rule-based one."""

    #: Add ``retention_llm`` (one judge call per turn); the rule-based retention is always computed.
    llm: bool = False


@dataclass(frozen=True)
class SuitabilityRule(PolicyJSON):
    """``[suitability]``: the report's rule for when to enable summaries, applied literally."""

    #: Enable at >= this many average turns ...
    enable_min_turns: float = 4.0
    #: ... and more than this many average baseline prompt tokens.
    enable_min_prompt: float = 2000.0
    #: Disable at <= this many average turns ...
    disable_max_turns: float = 2.0
    #: ... or fewer than this many average baseline prompt tokens.
    disable_max_prompt: float = 1000.0
