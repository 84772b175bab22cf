"""What an offload arm's requests can page back: the LLM-free measure of ``recoverable`` for ``artifact_offload``.

The retention measures (:mod:`agentlab.bench.retention.questions` per question, :mod:`agentlab.bench.retention.trajectories`
per step) count a hidden piece of evidence as *recoverable* when the request offers a way back to
it. For a recall arm that is a search over what the projection hid (top ``k`` hits). For the
offload arm it needs no search: the request shows a handle naming the artifact that holds the
result, and offers ``artifact_load``, so one call with that name pages the full text back. So:

* :func:`offers_paging` — whether any of the requests offers ``artifact_load`` (the arm's
  ``recoverable`` column is then defined, else ``None`` as for an arm without recall);
* :func:`paged_back` — the ledger events a request shows as an offload handle
  (:func:`agentlab.artifacts.offload.paged_back`): a piece held by one of them is recoverable.

It counts what one call can bring back, not whether a model would make it, nor the call's cost
(the ``refetch`` columns give the tokens of the results that would be read again).
"""

from __future__ import annotations

from collections.abc import Iterable

from agentlab.artifacts.offload import paged_back
from agentlab.artifacts.tools import ARTIFACT_LOAD_TOOL
from agentlab.core import RequestDraft


def offers_paging(drafts: Iterable[RequestDraft]) -> bool:
    """Whether any of the requests offers ``artifact_load``."""
    return any(getattr(t, "name", "") == ARTIFACT_LOAD_TOOL for d in drafts for t in d.tools)


__all__ = ["offers_paging", "paged_back"]
