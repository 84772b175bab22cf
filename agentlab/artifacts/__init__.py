"""Artifacts: files kept out of the event text, by (app, user, session, name) and integer revision.

The service (this package, layer 2 beside ``session``): :class:`ArtifactService` with
:class:`InMemoryArtifactService` and :class:`DuckDBArtifactService` (bytes in files, metadata in
DuckDB; imported lazily so ``import agentlab.artifacts`` does not load duckdb). Names, the
``user:`` scope and the refused names are :mod:`agentlab.artifacts.names`'s.

Built on it, in the mechanisms' layer: the ``artifact_save`` / ``artifact_list`` /
``artifact_load`` tools (:mod:`agentlab.artifacts.tools`) and the ``artifact_offload`` mechanism
(:mod:`agentlab.artifacts.offload`), which this package does not import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab._lazy import lazy_exports
from agentlab.artifacts.names import (
    MAX_NAME_LENGTH,
    USER_PREFIX,
    ArtifactError,
    ArtifactNotFound,
    ArtifactOwnershipError,
    ArtifactTooLarge,
    InvalidArtifactName,
    check_name,
    is_user_scoped,
)
from agentlab.artifacts.service import (
    DEFAULT_MAX_BYTES,
    Artifact,
    ArtifactInfo,
    ArtifactScope,
    ArtifactService,
    InMemoryArtifactService,
)

if TYPE_CHECKING:
    from agentlab.artifacts.duckdb import DuckDBArtifactService

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_NAME_LENGTH",
    "USER_PREFIX",
    "Artifact",
    "ArtifactError",
    "ArtifactInfo",
    "ArtifactNotFound",
    "ArtifactOwnershipError",
    "ArtifactScope",
    "ArtifactService",
    "ArtifactTooLarge",
    "DuckDBArtifactService",
    "InMemoryArtifactService",
    "InvalidArtifactName",
    "check_name",
    "is_user_scoped",
]

__getattr__, __dir__ = lazy_exports("agentlab.artifacts", {"DuckDBArtifactService": "agentlab.artifacts.duckdb"},
                                    globals())
