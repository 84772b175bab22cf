"""A call observer that counts one purpose's calls and tokens, for a case row's own columns.

The executor records every model call of a case (:func:`agentlab.model.base.observe_calls`);
a task that also wants, say, its answer calls on the case row observes them with a
:class:`CallTally` inside the run::

    tally = CallTally("answer")
    with observe_calls(tally):
        ...
    tally.calls, tally.prompt_tokens, tally.completion_tokens
"""

from __future__ import annotations

from dataclasses import dataclass

from agentlab.model.base import CallRecord

__all__ = ["CallTally"]


@dataclass
class CallTally:
    """Calls of ``purpose`` (``answer``, ``summary`` …) seen while observing, and their tokens."""

    purpose: str = "answer"
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __call__(self, record: CallRecord) -> None:
        """Count ``record`` when it is a call of :attr:`purpose`."""
        if record.purpose == self.purpose:
            self.calls += 1
            self.prompt_tokens += record.usage.prompt_tokens
            self.completion_tokens += record.usage.completion_tokens
