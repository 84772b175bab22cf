"""A model that answers only from a call cache: a recorded conversation read back without calling anything.

MT-Bench-101 scores a summary-mode dialogue against the baseline's answers of the same dialogue;
when the results store does not hold them, the baseline conversation is replayed through the
exact baseline code path with :class:`ReplayOnly` around the run's
:class:`~agentlab.model.cache.CachedModel`, so every request (and its cache key) is the recorded
one. A request that was never recorded is :class:`NotInCache`, never a model call, and no call is
reported (the replay is not part of the run's cost).
"""

from __future__ import annotations

from typing import Any

from agentlab.model.base import ModelInfo, ModelRequest, ModelResponse

__all__ = ["NotInCache", "ReplayOnly", "replayable"]


class NotInCache(Exception):
    """The request was not recorded in the call cache."""


def replayable(model: Any) -> bool:
    """Whether ``model`` has a call cache to replay from (a :class:`~agentlab.model.cache.CachedModel`)."""
    return hasattr(model, "cache") and hasattr(model, "inner")


class ReplayOnly:
    """The recorded responses of ``cached`` (a model with ``inner`` and ``cache``), and nothing else."""

    def __init__(self, cached: Any) -> None:
        self.inner = cached.inner
        self.cache = cached.cache

    @property
    def info(self) -> ModelInfo:
        """The inner model's info."""
        return self.inner.info

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The recorded response of ``request``; :class:`NotInCache` when there is none."""
        stored = self.cache.get(request.cache_key(self.inner.info.name))
        if stored is None:
            raise NotInCache("a baseline call is not in the call cache")
        return ModelResponse(message=stored.message, usage=stored.usage, model=stored.model,
                             finish_reason=stored.finish_reason, cache_hit=True)

    async def stream(self, request: ModelRequest) -> Any:  # pragma: no cover - the agent does not stream here
        """Not supported: a replay is read whole."""
        raise NotInCache("streaming replay is not supported")
