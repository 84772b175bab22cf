"""The ``ArtifactService`` protocol, its records, and the in-memory backend.

An artifact is a file kept out of the event text: bytes with a MIME type, stored under
(app, user, session, name) with integer revisions — the first save of a name is revision 0 and
each later save adds one, as tRPC-Agent-Go's artifact service counts them
(``trpc-group/trpc-agent-go@19d50feb``, ``artifact/service.go`` and ``artifact/inmemory/service.go``,
which also gives the ``user:`` prefix its meaning). ``save`` returns the
new revision's :class:`ArtifactInfo`; ``load`` reads a revision or the latest (``None``: no such
name); ``list`` gives the latest revision of every name the session sees (its own and the
user-scoped ones, :mod:`agentlab.artifacts.names`); ``versions`` lists a name's revisions and
``delete`` removes them all (a later save starts again at 0).

Every backend checks the same things before it stores anything: the name and the ids
(:func:`~agentlab.artifacts.names.check_name`, :func:`~agentlab.artifacts.names.check_id`) and the
size limit (``max_bytes``, :data:`DEFAULT_MAX_BYTES` by default). The MIME type is the caller's,
else guessed from the name's extension, else ``text/plain; charset=utf-8`` for text and
``application/octet-stream`` for bytes. Both backends (this one and
:mod:`agentlab.artifacts.duckdb`) pass the same contract tests.

A run reaches its artifact store through its typed services (``inv.services.get(ArtifactService)``);
:class:`ArtifactScope` binds a store to one (app, user, session) for code that is not a tool,
such as :class:`agentlab.executor.CodeExecutor`.
"""

from __future__ import annotations

import builtins
import hashlib
import mimetypes
import threading
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentlab.artifacts.names import (
    ArtifactNotFound,
    ArtifactTooLarge,
    check_id,
    check_name,
    is_user_scoped,
)

#: Default size limit of one revision: 16 MiB.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
#: MIME type of text saved without one (and without a known extension).
TEXT_MIME = "text/plain; charset=utf-8"
#: MIME type of bytes saved without one (and without a known extension).
BINARY_MIME = "application/octet-stream"
#: The session column of a user-scoped artifact (it belongs to no one session).
USER_SCOPE = ""


@dataclass(frozen=True)
class ArtifactInfo:
    """One stored revision, without its bytes."""

    app_name: str
    user_id: str
    #: The session it was saved in (for a user-scoped name: the session that saved this revision).
    session_id: str
    name: str
    revision: int
    mime_type: str
    #: Bytes.
    size: int
    sha256: str
    created_at: float

    @property
    def user_scoped(self) -> bool:
        """Whether the name is user-scoped (shared by every session of the user)."""
        return is_user_scoped(self.name)


@dataclass(frozen=True)
class Artifact:
    """One revision with its bytes."""

    info: ArtifactInfo
    data: bytes

    @property
    def text(self) -> str:
        """The bytes as UTF-8 text (undecodable bytes replaced)."""
        return self.data.decode("utf-8", errors="replace")


@runtime_checkable
class ArtifactService(Protocol):
    """Files by (app, user, session, name) with integer revisions (see the module docstring)."""

    async def save(self, app_name: str, user_id: str, session_id: str, name: str, data: bytes | str, *,
                   mime_type: str | None = None) -> ArtifactInfo:
        """Store ``data`` as the next revision of ``name``; its info (with the new revision)."""
        ...

    async def load(self, app_name: str, user_id: str, session_id: str, name: str,
                   revision: int | None = None) -> Artifact | None:
        """A revision (the latest when ``revision`` is ``None``); ``None`` when the name has none."""
        ...

    async def list(self, app_name: str, user_id: str, session_id: str) -> builtins.list[ArtifactInfo]:
        """The latest revision of every name the session sees, sorted by name."""
        ...

    async def versions(self, app_name: str, user_id: str, session_id: str, name: str) -> builtins.list[int]:
        """The revisions of ``name``, ascending (empty when there is none)."""
        ...

    async def delete(self, app_name: str, user_id: str, session_id: str, name: str) -> bool:
        """Remove every revision of ``name``; whether there was any."""
        ...


def scope_of(session_id: str, name: str) -> str:
    """The session column a name is stored under: :data:`USER_SCOPE` for a user-scoped name."""
    return USER_SCOPE if is_user_scoped(name) else session_id


def as_bytes(data: bytes | str) -> tuple[bytes, bool]:
    """(the bytes, whether they came from text)."""
    if isinstance(data, str):
        return data.encode("utf-8"), True
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), False
    raise TypeError(f"artifact data must be bytes or str, got {type(data).__name__}")


def resolve_mime(name: str, mime_type: str | None, text: bool) -> str:
    """The caller's MIME type, else the name's extension's, else text or binary (module docstring)."""
    if mime_type:
        return mime_type
    guessed, _ = mimetypes.guess_type(name.rsplit("/", 1)[-1], strict=False)
    if guessed:
        return f"{guessed}; charset=utf-8" if text and guessed.startswith("text/") else guessed
    return TEXT_MIME if text else BINARY_MIME


def checked_key(app_name: str, user_id: str, session_id: str, name: str) -> tuple[str, str, str, str]:
    """(app, user, scope, name) after every check: the key a revision is stored under."""
    check_id("app name", app_name)
    check_id("user id", user_id)
    check_id("session id", session_id)
    check_name(name)
    return app_name, user_id, scope_of(session_id, name), name


def checked_data(name: str, data: bytes | str, mime_type: str | None, max_bytes: int) -> tuple[bytes, str, str]:
    """(bytes, MIME type, sha256) of ``data``, refused over ``max_bytes``."""
    raw, text = as_bytes(data)
    if len(raw) > max_bytes:
        raise ArtifactTooLarge(f"artifact {name!r} is {len(raw):,} bytes, over this service's limit of "
                               f"{max_bytes:,} (max_bytes); save a smaller file or raise max_bytes")
    return raw, resolve_mime(name, mime_type, text), hashlib.sha256(raw).hexdigest()


def missing_revision(name: str, revision: int, have: builtins.list[int]) -> ArtifactNotFound:
    """The error of a revision that does not exist, naming the ones that do."""
    listed = ", ".join(map(str, have)) or "none"
    return ArtifactNotFound(f"artifact {name!r} has no revision {revision} (revisions: {listed}); "
                            "omit the revision for the latest")


class InMemoryArtifactService:
    """Artifacts in this process's memory (tests, notebooks, a Runner's lifetime).

    Every call takes one threading lock, so a save's revision is never handed out twice.
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        #: Size limit of one revision, in bytes.
        self.max_bytes = max_bytes
        self._store: dict[tuple[str, str, str, str], builtins.list[Artifact]] = {}
        self._lock = threading.Lock()

    async def save(self, app_name: str, user_id: str, session_id: str, name: str, data: bytes | str, *,
                   mime_type: str | None = None) -> ArtifactInfo:
        """See :meth:`ArtifactService.save`."""
        key = checked_key(app_name, user_id, session_id, name)
        raw, mime, digest = checked_data(name, data, mime_type, self.max_bytes)
        with self._lock:
            revisions = self._store.setdefault(key, [])
            info = ArtifactInfo(app_name, user_id, session_id, name, len(revisions), mime, len(raw), digest,
                                time.time())
            revisions.append(Artifact(info, raw))
        return info

    async def load(self, app_name: str, user_id: str, session_id: str, name: str,
                   revision: int | None = None) -> Artifact | None:
        """See :meth:`ArtifactService.load`."""
        key = checked_key(app_name, user_id, session_id, name)
        with self._lock:
            revisions = list(self._store.get(key, ()))
        if not revisions:
            return None
        if revision is None:
            return revisions[-1]
        if not 0 <= revision < len(revisions):
            raise missing_revision(name, revision, list(range(len(revisions))))
        return revisions[revision]

    async def list(self, app_name: str, user_id: str, session_id: str) -> builtins.list[ArtifactInfo]:
        """See :meth:`ArtifactService.list`."""
        check_id("app name", app_name)
        check_id("user id", user_id)
        check_id("session id", session_id)
        with self._lock:
            latest = [revisions[-1].info for (app, user, scope, _), revisions in self._store.items()
                      if app == app_name and user == user_id and scope in (session_id, USER_SCOPE) and revisions]
        return sorted(latest, key=lambda i: i.name)

    async def versions(self, app_name: str, user_id: str, session_id: str, name: str) -> builtins.list[int]:
        """See :meth:`ArtifactService.versions`."""
        key = checked_key(app_name, user_id, session_id, name)
        with self._lock:
            return list(range(len(self._store.get(key, ()))))

    async def delete(self, app_name: str, user_id: str, session_id: str, name: str) -> bool:
        """See :meth:`ArtifactService.delete`."""
        key = checked_key(app_name, user_id, session_id, name)
        with self._lock:
            return bool(self._store.pop(key, None))

    async def close(self) -> None:
        """Nothing to release (kept for the services' common lifecycle)."""


@dataclass(frozen=True)
class ArtifactScope:
    """An artifact store bound to one (app, user, session): what a tool or the executor saves into."""

    service: ArtifactService
    app_name: str
    user_id: str
    session_id: str

    async def save(self, name: str, data: bytes | str, *, mime_type: str | None = None) -> ArtifactInfo:
        """Save the next revision of ``name`` in this scope."""
        return await self.service.save(self.app_name, self.user_id, self.session_id, name, data, mime_type=mime_type)

    async def load(self, name: str, revision: int | None = None) -> Artifact | None:
        """A revision of ``name`` in this scope (the latest by default), or ``None``."""
        return await self.service.load(self.app_name, self.user_id, self.session_id, name, revision)

    async def require(self, name: str, revision: int | None = None) -> Artifact:
        """:meth:`load`, with a missing name an :class:`~agentlab.artifacts.names.ArtifactNotFound`."""
        found = await self.load(name, revision)
        if found is None:
            names = [i.name for i in await self.list()]
            raise ArtifactNotFound(f"no artifact named {name!r} in this session (artifacts: "
                                   f"{', '.join(names) or 'none'}); check the name with artifact_list")
        return found

    async def list(self) -> builtins.list[ArtifactInfo]:
        """The latest revision of every name this scope sees."""
        return await self.service.list(self.app_name, self.user_id, self.session_id)


__all__ = [
    "BINARY_MIME",
    "DEFAULT_MAX_BYTES",
    "TEXT_MIME",
    "USER_SCOPE",
    "Artifact",
    "ArtifactInfo",
    "ArtifactScope",
    "ArtifactService",
    "InMemoryArtifactService",
    "as_bytes",
    "checked_data",
    "checked_key",
    "missing_revision",
    "resolve_mime",
    "scope_of",
]
