"""Session Recall as a context mechanism: preload recall, the tool overview and the recall tools.

:class:`RecallMechanism` is what ``LLMAgent(recall=policy)`` (or ``mechanisms=[policy]``) runs for
a :class:`~agentlab.recall.policy.RecallPolicy`; the policy itself is plain settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentlab.core.mechanism import (
    PRELOAD_RECALL,
    TOOL_GUIDE,
    PolicyMechanism,
    StagedProcessor,
    register_mechanism,
)
from agentlab.recall.policy import RecallPolicy
from agentlab.recall.preload import PreloadRecallProcessor
from agentlab.recall.tools import RecallOverviewProcessor, recall_tools

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.core.tools import Tool
    from agentlab.model.base import Model


class RecallMechanism(PolicyMechanism):
    """Preload recall (when ``preload_limit`` > 0), the tool overview and the tools (when tools are on)."""

    policy: RecallPolicy

    def __init__(self, policy: RecallPolicy | None = None, model: Model | None = None) -> None:
        super().__init__(policy or RecallPolicy(), model)

    def describe(self) -> str:
        """``"recall"``."""
        return "recall"

    def request_processors(self) -> list[StagedProcessor]:
        """Preload recall (when ``preload_limit`` > 0) and the tool overview (when tools are on)."""
        out: list[StagedProcessor] = []
        if self.policy.preload_limit:
            out.append(StagedProcessor(PRELOAD_RECALL, PreloadRecallProcessor(self.policy)))
        if self.policy.tools_enabled:
            out.append(StagedProcessor(TOOL_GUIDE, RecallOverviewProcessor(self.policy)))
        return out

    def request_tools(self, inv: Invocation) -> Sequence[Tool]:
        """``session_search`` / ``session_load`` as the policy offers them."""
        if not self.policy.tools_enabled:
            return ()
        return recall_tools(self.policy)


register_mechanism(RecallPolicy, RecallMechanism)

__all__ = ["RecallMechanism"]
