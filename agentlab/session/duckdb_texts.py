"""Long texts of the DuckDB ledger, kept in files beside the database.

At every checkpoint DuckDB rewrites each column of every row group an insert has touched, and a
row group holds up to 122,880 rows: a ledger with a few hundred multi-megabyte events has them all
in its last row group, so each checkpoint reads and writes every one of them again, and its CPU
and memory grow with the ledger (``benchmarks/perf/duckdb_checkpoint_growth.py``; DuckDB's issue
https://github.com/duckdb/duckdb/issues/7709). With :class:`LongTexts`, a string of an event
longer than ``over`` characters goes to a file of its own, written (and, with ``fsync``, made
durable) before the commit of the event's row, and the row keeps the event's JSON with a short
marker in the string's place and a ``"$texts"`` list saying where each string went. The keys are
sorted, so such a row starts with ``{"$texts"``, and a reader tells the two kinds apart without
parsing.

Layout: ``<database>.texts/<session>/<random>.txt``, UTF-8 (lone surrogates kept, as
``surrogatepass``); ``<session>`` is a hash of the session key, so deleting a session removes one
folder. A file whose commit never happened (a refused append) is removed; one written just before
a crash is left behind, unreferenced (one half written, ``*.partial``, is removed when the file is
next opened for writing). Copy the folder along with the database file: a read of an
event whose file is missing fails and names the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any

from agentlab.events import (
    JSON_PIECE,
    Event,
    JSONPath,
    dumps_in_pieces,
    has_string_over,
    put_at,
    take_long_strings,
)
from agentlab.session.base import SessionKey

#: Characters beyond which a string of an event is kept in a file (the serve proxy's ledger).
TEXT_FILE_OVER = 64 * 1024

_TEXTS_KEY = "$texts"
_ROW_PREFIX = '{"' + _TEXTS_KEY + '"'
_FILE_NAME = re.compile(r"[0-9a-f]{32}/[0-9a-f]{32}\.txt")


class LedgerTextMissing(RuntimeError):
    """An event's text file is missing or cut short (the ``.texts`` folder was not copied with the database)."""


def texts_folder(database: Path) -> Path:
    """The folder that holds the long texts of the ledger in ``database``."""
    return database.with_name(database.name + ".texts")


class LongTexts:
    """The long texts of one ledger file: written before their rows are committed, read back with them."""

    def __init__(self, database: Path, over: int = TEXT_FILE_OVER, *, fsync: bool = True) -> None:
        if over < 1:
            raise ValueError(f"the length beyond which texts go to files must be >= 1 character, got {over}")
        self.root = texts_folder(database)
        self.over = over
        self.fsync = fsync

    # -- writing (the ledger writer's thread) ----------------------------------------------------

    def stored_json(self, key: SessionKey, event: Event, written: list[Path]) -> str:
        """The event's row text: its JSON, with each string over :attr:`over` characters written to a
        file first (their paths appended to ``written``) and a marker in its place.
        """
        data = event.to_dict()
        if not has_string_over(data, self.over):
            if self.over <= JSON_PIECE:  # no string long enough to be encoded in pieces: one call
                return json.dumps(data, ensure_ascii=False, sort_keys=True)
            return dumps_in_pieces(data, sort_keys=True)
        taken: list[tuple[JSONPath, str]] = []
        data = take_long_strings(data, self.over, taken)  # new containers where a string was: the event's stay
        refs: list[dict[str, Any]] = []
        for path, text in taken:
            file, size = self._write(key, text)
            written.append(self.root / file)
            refs.append({"path": _json_path(data, path), "file": file, "bytes": size})
            put_at(data, path, f"[{len(text)} characters kept in the ledger's text file {file}]")
        data[_TEXTS_KEY] = refs
        return dumps_in_pieces(data, sort_keys=True)

    def _write(self, key: SessionKey, text: str) -> tuple[str, int]:
        folder = self.root / session_folder(key)
        new_folder = not folder.is_dir()
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{folder.name}/{uuid.uuid4().hex}.txt"
        target = self.root / name
        partial = target.with_suffix(".partial")
        size = 0
        try:
            with open(partial, "wb") as out:
                for start in range(0, len(text), JSON_PIECE):  # in pieces: the interpreter lock is given back
                    size += out.write(text[start:start + JSON_PIECE].encode("utf-8", "surrogatepass"))
                if self.fsync:
                    out.flush()
                    os.fsync(out.fileno())
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if self.fsync:
            _fsync_folder(folder)
            if new_folder:
                _fsync_folder(self.root)
                _fsync_folder(self.root.parent)
        return name, size

    def remove_partial_files(self) -> None:
        """Remove the files a killed process left half written (never referenced by a row)."""
        for partial in self.root.glob("*/*.partial"):
            self.discard([partial])

    def discard(self, files: list[Path]) -> None:
        """Remove the files of events that were never committed."""
        for file in files:
            try:
                file.unlink(missing_ok=True)
            except OSError as exc:
                warnings.warn(f"could not remove the uncommitted ledger text {file}: {exc}", stacklevel=2)


def event_from_row(row_text: str, root: Path | None) -> Event:
    """The event of a ledger row; one with long texts in files needs their folder, ``root``."""
    if not row_text.startswith(_ROW_PREFIX):
        return Event.from_json(row_text)
    data = json.loads(row_text)
    refs = data.pop(_TEXTS_KEY)
    if root is None:
        raise LedgerTextMissing("this ledger row keeps long texts in files beside its database file,"
                                " and this session store has no database file (in memory)")
    for ref in refs:
        file = str(ref["file"])
        if not _FILE_NAME.fullmatch(file):  # a row names a file of its own folder, never another path
            raise LedgerTextMissing(f"a ledger row names the text file {file!r}, which is not a ledger text's name")
        try:
            raw = (root / file).read_bytes()
        except FileNotFoundError:
            raise LedgerTextMissing(
                f"the ledger text {root / file} is missing: the ledger keeps texts over its length limit in"
                f" {root}, beside the database file; copy that folder along with the file") from None
        if len(raw) != ref["bytes"]:
            raise LedgerTextMissing(f"the ledger text {root / file} holds {len(raw)} bytes, its row says"
                                    f" {ref['bytes']}: the file was cut short or replaced")
        try:
            put_at(data, tuple(ref["path"]), raw.decode("utf-8", "surrogatepass"))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise LedgerTextMissing(f"a ledger row's reference to {root / file} does not fit its event"
                                    f" ({type(exc).__name__}: {exc}): the row was changed by hand") from None
    return Event.from_dict(data)


def _json_path(root: Any, path: JSONPath) -> list[Any]:
    """``path`` in ``root`` as the JSON row's value has it: a list index as it is, a dict key as JSON
    writes it (``3`` -> ``"3"``, ``True`` -> ``"true"``), so the path finds its place again.
    """
    steps: list[Any] = []
    node = root
    for step in path:
        if isinstance(node, dict) and not isinstance(step, str):
            steps.append(str(json.loads(json.dumps({step: 0})).popitem()[0]))
        else:
            steps.append(step)
        node = node[step]
    return steps


def remove_session_texts(root: Path, key: SessionKey) -> None:
    """Remove a deleted session's texts (after its rows were deleted)."""
    folder = root / session_folder(key)
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        pass
    except OSError as exc:
        warnings.warn(f"could not remove the deleted session's ledger texts {folder}: {exc}", stacklevel=2)


def session_folder(key: SessionKey) -> str:
    """The folder name of a session's texts: a hash of its key (no name from a client reaches the path)."""
    digest = hashlib.sha256(json.dumps([key.app_name, key.user_id, key.session_id]).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
