"""The code workspace: :class:`CodeExecutor` runs code in a per-run temporary folder (layer 2).

It answers "how does this machine run code?": a subprocess in a fresh workspace with a timeout,
an output cap, a scrubbed environment and cancellation that ends its whole process group; inputs
staged from artifacts and chosen outputs saved back as artifacts (:mod:`agentlab.artifacts`).
It is not a sandbox and refuses to start without ``workspace_opt_in=True``; what it does not
isolate is listed in :mod:`agentlab.executor.workspace`.
"""

from __future__ import annotations

from agentlab.executor.workspace import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_TIMEOUT,
    ArtifactRef,
    CodeExecutor,
    ExecutionResult,
    WorkspaceError,
    WorkspaceNotEnabled,
)

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_TIMEOUT",
    "ArtifactRef",
    "CodeExecutor",
    "ExecutionResult",
    "WorkspaceError",
    "WorkspaceNotEnabled",
]
