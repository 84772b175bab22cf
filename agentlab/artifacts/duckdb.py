"""The durable artifact backend: bytes in files under a root folder, metadata in one DuckDB file.

Layout (``root`` is the constructor's folder)::

    <root>/artifacts.duckdb                                  the metadata (default; ``db`` moves it)
    <root>/<app>/<user>/sessions/<session>/<h>/<revision>    a session's artifact
    <root>/<app>/<user>/user/<h>/<revision>                  a user-scoped artifact

``<h>`` is the first 32 hex digits of the name's sha256, so a name of any allowed shape (folders,
``user:``) is one safe folder name; the table maps names to files::

    artifacts (app_name, user_id, scope, name, revision) PK, session_id, mime_type, size, sha256,
              path (relative to root), created_at

``scope`` is the session id, or ``''`` for a user-scoped name. A save holds the service's lock
from choosing the revision to inserting its row: the file is written to a temporary name, renamed
into place, then recorded; if recording fails the file is removed, so a row never points at a
missing file and no half-written file is ever read. Before writing, the folder's real path (links
resolved) must lie inside ``<root>/<app>/<user>``: a folder linked into another user's tree is
refused (:class:`~agentlab.artifacts.names.ArtifactOwnershipError`) instead of overwriting that
user's artifact. One process writes a file at a time (DuckDB's own rule).
"""

from __future__ import annotations

import builtins
import hashlib
import os
import time
from pathlib import Path
from typing import Any

import duckdb

from agentlab.artifacts.names import ArtifactOwnershipError, check_id
from agentlab.artifacts.service import (
    DEFAULT_MAX_BYTES,
    USER_SCOPE,
    Artifact,
    ArtifactInfo,
    checked_data,
    checked_key,
    missing_revision,
)
from agentlab.duckdb_files import DuckDBService

_SCHEMA = """
CREATE TABLE IF NOT EXISTS artifacts (
    app_name   VARCHAR NOT NULL,
    user_id    VARCHAR NOT NULL,
    scope      VARCHAR NOT NULL,
    name       VARCHAR NOT NULL,
    revision   INTEGER NOT NULL,
    session_id VARCHAR NOT NULL,
    mime_type  VARCHAR NOT NULL,
    size       BIGINT  NOT NULL,
    sha256     VARCHAR NOT NULL,
    path       VARCHAR NOT NULL,
    created_at DOUBLE  NOT NULL,
    PRIMARY KEY (app_name, user_id, scope, name, revision)
)
"""
_COLUMNS = "app_name, user_id, session_id, name, revision, mime_type, size, sha256, created_at"
_KEY = "app_name = ? AND user_id = ? AND scope = ? AND name = ?"
#: The metadata file's name under the root when no ``db`` is given.
DB_FILE = "artifacts.duckdb"


def _info(row: tuple[Any, ...]) -> ArtifactInfo:
    return ArtifactInfo(row[0], row[1], row[2], row[3], int(row[4]), row[5], int(row[6]), row[7], float(row[8]))


class DuckDBArtifactService(DuckDBService):
    """An ``ArtifactService`` with its bytes in files under ``root`` and its metadata in DuckDB.

    ``db`` is the metadata file (default ``<root>/artifacts.duckdb``); ``max_bytes`` the size limit
    of one revision. Use ``async with`` or :meth:`close` to release the DuckDB file.
    """

    what = "artifact database"
    schema = (_SCHEMA,)

    def __init__(self, root: str | Path, *, db: str | Path | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = Path(root)
        super().__init__(db if db is not None else self.root / DB_FILE)
        #: Size limit of one revision, in bytes.
        self.max_bytes = max_bytes

    # ------------------------------------------------------------------------------- layout

    def _folder(self, app: str, user: str, scope: str, name: str) -> tuple[Path, Path]:
        """(the name's folder, the owner's folder) — both under the root, not yet resolved."""
        owner = self.root / app / user
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
        where = owner / "user" if scope == USER_SCOPE else owner / "sessions" / scope
        return where / digest, owner

    def _owned_folder(self, app: str, user: str, scope: str, name: str) -> Path:
        folder, owner = self._folder(app, user, scope, name)
        folder.mkdir(parents=True, exist_ok=True)
        real, real_owner = folder.resolve(), owner.resolve()
        if not real.is_relative_to(real_owner) or real_owner != (self.root.resolve() / app / user):
            raise ArtifactOwnershipError(
                f"artifact {name!r} of user {user!r} would be written to {real}, outside that user's folder "
                f"{self.root.resolve() / app / user} (a link into another user's artifacts?); refusing to "
                "overwrite it: remove the link")
        return folder

    # -------------------------------------------------------------------------------- calls

    async def save(self, app_name: str, user_id: str, session_id: str, name: str, data: bytes | str, *,
                   mime_type: str | None = None) -> ArtifactInfo:
        """See :meth:`agentlab.artifacts.ArtifactService.save`."""
        app, user, scope, name = checked_key(app_name, user_id, session_id, name)
        raw, mime, digest = checked_data(name, data, mime_type, self.max_bytes)

        def work(con: duckdb.DuckDBPyConnection) -> ArtifactInfo:
            row = con.execute(f"SELECT max(revision) FROM artifacts WHERE {_KEY}", [app, user, scope, name]).fetchone()
            revision = 0 if row is None or row[0] is None else int(row[0]) + 1
            folder = self._owned_folder(app, user, scope, name)
            target = folder / str(revision)
            partial = folder / f".{revision}.{os.getpid()}.partial"
            partial.write_bytes(raw)
            os.replace(partial, target)
            info = ArtifactInfo(app, user, session_id, name, revision, mime, len(raw), digest, time.time())
            try:
                con.execute("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [app, user, scope, name, revision, session_id, mime, len(raw), digest,
                             str(target.relative_to(self.root)), info.created_at])
            except BaseException:
                target.unlink(missing_ok=True)
                raise
            return info

        return await self._run(work)

    async def load(self, app_name: str, user_id: str, session_id: str, name: str,
                   revision: int | None = None) -> Artifact | None:
        """See :meth:`agentlab.artifacts.ArtifactService.load`."""
        key = list(checked_key(app_name, user_id, session_id, name))

        def work(con: duckdb.DuckDBPyConnection) -> tuple[tuple[Any, ...] | None, builtins.list[int]]:
            revisions = [int(r[0]) for r in con.execute(
                f"SELECT revision FROM artifacts WHERE {_KEY} ORDER BY revision", key).fetchall()]
            wanted = revisions[-1] if revisions and revision is None else revision
            row = con.execute(f"SELECT {_COLUMNS}, path FROM artifacts WHERE {_KEY} AND revision = ?",
                              [*key, wanted]).fetchone() if revisions else None
            return row, revisions

        row, revisions = await self._run(work)
        if not revisions:
            return None
        if row is None:
            raise missing_revision(name, int(revision or 0), revisions)
        return Artifact(_info(row), (self.root / row[9]).read_bytes())

    async def list(self, app_name: str, user_id: str, session_id: str) -> builtins.list[ArtifactInfo]:
        """See :meth:`agentlab.artifacts.ArtifactService.list`."""
        for kind, value in (("app name", app_name), ("user id", user_id), ("session id", session_id)):
            check_id(kind, value)
        rows = await self._run(lambda con: con.execute(
            f"SELECT {_COLUMNS} FROM artifacts a WHERE app_name = ? AND user_id = ? AND scope IN (?, ?) "
            "AND revision = (SELECT max(revision) FROM artifacts b WHERE b.app_name = a.app_name "
            "AND b.user_id = a.user_id AND b.scope = a.scope AND b.name = a.name) ORDER BY name",
            [app_name, user_id, session_id, USER_SCOPE]).fetchall())
        return [_info(r) for r in rows]

    async def versions(self, app_name: str, user_id: str, session_id: str, name: str) -> builtins.list[int]:
        """See :meth:`agentlab.artifacts.ArtifactService.versions`."""
        key = list(checked_key(app_name, user_id, session_id, name))
        rows = await self._run(lambda con: con.execute(
            f"SELECT revision FROM artifacts WHERE {_KEY} ORDER BY revision", key).fetchall())
        return [int(r[0]) for r in rows]

    async def delete(self, app_name: str, user_id: str, session_id: str, name: str) -> bool:
        """See :meth:`agentlab.artifacts.ArtifactService.delete` (the files go too)."""
        key = list(checked_key(app_name, user_id, session_id, name))

        def work(con: duckdb.DuckDBPyConnection) -> bool:
            paths = [r[0] for r in con.execute(f"SELECT path FROM artifacts WHERE {_KEY}", key).fetchall()]
            con.execute(f"DELETE FROM artifacts WHERE {_KEY}", key)
            for path in paths:
                (self.root / path).unlink(missing_ok=True)
            return bool(paths)

        return await self._run(work)


__all__ = ["DB_FILE", "DuckDBArtifactService"]
