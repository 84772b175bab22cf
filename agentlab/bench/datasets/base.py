"""Finding, verifying and downloading benchmark data files.

Every file a loader reads is named in ``data/manifest.toml`` with its public URL and, where it is
known, its sha256 and size. A file is looked for, in this order:

1. ``$AGENTLAB_DATA_DIR/<dataset>/<path>`` (CI points this at the shared read-only copies),
2. ``data/cache/<dataset>/<path>`` (or ``$AGENTLAB_CACHE_DIR/<dataset>/<path>``),
3. a download from the URL in the manifest into the cache (skipped when ``AGENTLAB_OFFLINE=1``).

Whatever the source, the file is checked against the manifest's sha256 before a loader sees it.
Hashing a 270 MB file on every load would be slow, so a successful check is remembered per
(absolute path, mtime, size) in memory and in ``<cache>/.verified.json``; touching or replacing the
file invalidates it. Files whose sha256 is not pinned (LongMemEval: no copy could be hashed here)
are checked by size when a size is pinned, and otherwise only by the loader's own parse, which
fails with a :class:`DatasetError` naming the file and the row.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

#: The repository root (the package is installed editable; ``data/`` sits beside ``agentlab/``).
REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_MANIFEST = REPO_ROOT / "data" / "manifest.toml"
DEFAULT_CACHE_DIR = REPO_ROOT / "data" / "cache"
DOWNLOAD_TIMEOUT_S = 60.0
_CHUNK = 1 << 20


class DatasetError(Exception):
    """A data file is missing, corrupt or malformed; the message names the file (and row)."""


@dataclass(frozen=True)
class ManifestFile:
    """One pinned file of a dataset."""

    #: Path inside the dataset folder, e.g. ``test/Bed003.json``.
    path: str
    #: Public URL the file is downloaded from when no local copy exists.
    url: str
    #: Expected sha256 (hex); ``None`` when no copy could be hashed (then size / parse checks).
    sha256: str | None = None
    #: Expected size in bytes, when known.
    size: int | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset as the manifest describes it."""

    name: str
    title: str
    home: str
    license: str
    files: tuple[ManifestFile, ...]

    def file(self, path: str) -> ManifestFile:
        """The manifest entry for ``path``; :class:`DatasetError` listing some known paths otherwise."""
        for f in self.files:
            if f.path == path:
                return f
        known = ", ".join(f.path for f in self.files[:8])
        raise DatasetError(f"{self.name}: {path!r} is not in the manifest (known: {known}...)")

    def files_under(self, prefix: str) -> list[ManifestFile]:
        """The files whose path starts with ``prefix`` (e.g. one split of a dataset)."""
        return [f for f in self.files if f.path.startswith(prefix)]


@dataclass(frozen=True)
class ResolvedFile:
    """A verified local copy of a manifest file."""

    spec: ManifestFile
    local_path: Path
    #: The sha256 actually computed (``None`` only if the file was accepted without hashing).
    sha256: str | None
    source: str  # "data_dir" | "cache" | "download"


# ---------------------------------------------------------------------------------- manifest


def load_manifest(path: str | os.PathLike[str] | None = None) -> dict[str, DatasetSpec]:
    """Read the manifest (``$AGENTLAB_MANIFEST`` or ``data/manifest.toml`` by default)."""
    manifest_path = Path(path or os.environ.get("AGENTLAB_MANIFEST") or DEFAULT_MANIFEST)
    try:
        raw = tomllib.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DatasetError(f"dataset manifest not found: {manifest_path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise DatasetError(f"{manifest_path}: not valid TOML: {exc}") from exc
    specs: dict[str, DatasetSpec] = {}
    for name, body in raw.items():
        if not isinstance(body, dict):
            raise DatasetError(f"{manifest_path}: [{name}] must be a table")
        files = []
        for i, entry in enumerate(body.get("files", [])):
            try:
                files.append(
                    ManifestFile(
                        path=str(entry["path"]),
                        url=str(entry["url"]),
                        sha256=(str(entry["sha256"]).lower() if entry.get("sha256") else None),
                        size=(int(entry["size"]) if entry.get("size") is not None else None),
                    )
                )
            except KeyError as exc:
                raise DatasetError(f"{manifest_path}: [{name}] file #{i + 1} lacks {exc.args[0]!r}") from exc
        specs[name] = DatasetSpec(
            name=name,
            title=str(body.get("title", name)),
            home=str(body.get("home", "")),
            license=str(body.get("license", "")),
            files=tuple(files),
        )
    return specs


def dataset_spec(name: str, manifest: str | os.PathLike[str] | None = None) -> DatasetSpec:
    """One dataset of the manifest; :class:`DatasetError` listing the known names otherwise."""
    specs = load_manifest(manifest)
    if name not in specs:
        raise DatasetError(f"dataset {name!r} is not in the manifest (known: {', '.join(sorted(specs))})")
    return specs[name]


# -------------------------------------------------------------------------------- locations


def cache_dir() -> Path:
    """Where downloads go and verifications are remembered: ``$AGENTLAB_CACHE_DIR`` or ``data/cache``."""
    return Path(os.environ.get("AGENTLAB_CACHE_DIR") or DEFAULT_CACHE_DIR)


def candidate_paths(dataset: str, relpath: str) -> list[tuple[str, Path]]:
    """Where a file is looked for, in resolution order, labelled by source."""
    out: list[tuple[str, Path]] = []
    data_dir = os.environ.get("AGENTLAB_DATA_DIR")
    if data_dir:
        out.append(("data_dir", Path(data_dir) / dataset / relpath))
    out.append(("cache", cache_dir() / dataset / relpath))
    return out


def downloads_allowed() -> bool:
    """``False`` when ``AGENTLAB_OFFLINE`` is set to 1/true/yes (CI and offline machines): a missing file
    is then an error naming where to put it, not a download attempt.
    """
    return os.environ.get("AGENTLAB_OFFLINE", "").strip().lower() not in {"1", "true", "yes"}


# ------------------------------------------------------------------------------ verification

_verified: dict[tuple[str, int, int], str] = {}
_verified_lock = threading.Lock()


def _verification_file() -> Path:
    return cache_dir() / ".verified.json"


def _load_verification_cache() -> dict[str, Any]:
    try:
        return json.loads(_verification_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _store_verification(key: tuple[str, int, int], digest: str) -> None:
    _verified[key] = digest
    data = _load_verification_cache()
    data[key[0]] = {"mtime_ns": key[1], "size": key[2], "sha256": digest}
    target = _verification_file()
    # A read-only cache directory only costs a rehash next time; never fail a load over it.
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, target)


def sha256_of(path: Path) -> str:
    """The sha256 (hex) of a file, read in 1 MiB chunks so a large file never sits in memory."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_file(path: Path, spec: ManifestFile, dataset: str = "") -> str:
    """Check ``path`` against the manifest entry; return its sha256. Raises :class:`DatasetError`.

    The check is cached per (path, mtime, size): a second load of an unchanged file costs a stat.
    """
    label = f"{dataset}/{spec.path}" if dataset else spec.path
    stat = path.stat()
    if spec.size is not None and stat.st_size != spec.size:
        raise DatasetError(
            f"{path}: size {stat.st_size} bytes does not match the manifest ({spec.size}) for {label}; "
            "the file is truncated or a different version — delete it and load again"
        )
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    with _verified_lock:
        digest = _verified.get(key)
        if digest is None:
            cached = _load_verification_cache().get(key[0])
            if cached and cached.get("mtime_ns") == key[1] and cached.get("size") == key[2]:
                digest = str(cached["sha256"])
                _verified[key] = digest
        if digest is None:
            digest = sha256_of(path)
            _store_verification(key, digest)
    if spec.sha256 is not None and digest != spec.sha256:
        raise DatasetError(
            f"{path}: sha256 {digest} does not match the manifest ({spec.sha256}) for {label}; "
            "the file is corrupt or a different version — delete it and load again"
        )
    return digest


def clear_verification_memory() -> None:
    """Forget in-process verifications (tests use it to prove the on-disk cache works)."""
    with _verified_lock:
        _verified.clear()


# --------------------------------------------------------------------------------- download


def download(url: str, dest: Path, *, expected_sha256: str | None = None, timeout: float = DOWNLOAD_TIMEOUT_S,
             label: str = "") -> str:
    """Stream ``url`` into ``dest`` atomically (``.part`` then rename); return the sha256.

    On a sha256 mismatch nothing is left at ``dest`` and :class:`DatasetError` is raised.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "agentlab-dataset-loader"})
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=timeout) as response:
            for chunk in iter(lambda: response.read(_CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
        got = digest.hexdigest()
        if expected_sha256 is not None and got != expected_sha256:
            raise DatasetError(
                f"downloaded {label or dest.name} from {url}: sha256 {got} does not match the manifest "
                f"({expected_sha256}); nothing was saved"
            )
        os.replace(tmp, dest)
        return got
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _missing_message(dataset: str, spec: ManifestFile, tried: list[Path], reason: str) -> str:
    places = " or ".join(str(p) for p in tried)
    return (
        f"{dataset}: data file {spec.path!r} not found. Put it at {places} "
        f"(set AGENTLAB_DATA_DIR to a folder holding {dataset}/{spec.path}), "
        f"or let agentlab download it from {spec.url} ({reason})."
    )


def resolve_file(dataset: str, relpath: str, *, manifest: str | os.PathLike[str] | None = None,
                 spec: DatasetSpec | None = None, allow_download: bool | None = None) -> ResolvedFile:
    """A verified local copy of one manifest file (looked up, else downloaded into the cache)."""
    spec = spec or dataset_spec(dataset, manifest)
    entry = spec.file(relpath)
    candidates = candidate_paths(dataset, relpath)
    for source, path in candidates:
        if path.is_file():
            return ResolvedFile(entry, path, verify_file(path, entry, dataset), source)
    tried = [p for _, p in candidates]
    if allow_download is None:
        allow_download = downloads_allowed()
    if not allow_download:
        raise DatasetError(_missing_message(dataset, entry, tried, "downloads are off: AGENTLAB_OFFLINE=1"))
    dest = cache_dir() / dataset / relpath
    try:
        download(entry.url, dest, expected_sha256=entry.sha256, label=f"{dataset}/{relpath}")
    except DatasetError:
        raise
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise DatasetError(_missing_message(dataset, entry, tried, f"download failed: {reason}")) from exc
    # Record the fresh file as verified so the next load does not hash it again.
    return ResolvedFile(entry, dest, verify_file(dest, entry, dataset), "download")


@dataclass(frozen=True)
class ResolvedDataset:
    """Verified local copies of a set of files of one dataset."""

    name: str
    files: tuple[ResolvedFile, ...]

    def path(self, relpath: str) -> Path:
        """The local path of one resolved file; ``KeyError`` when it was not among the files resolved."""
        for f in self.files:
            if f.spec.path == relpath:
                return f.local_path
        raise KeyError(relpath)

    @property
    def sha256(self) -> str:
        """One fingerprint for the files used: sha256 over ``path:sha256`` lines (sorted)."""
        lines = sorted(f"{f.spec.path}:{f.sha256 or 'unhashed'}" for f in self.files)
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def resolve_files(dataset: str, relpaths: Iterable[str], *, manifest: str | os.PathLike[str] | None = None,
                  allow_download: bool | None = None) -> ResolvedDataset:
    """Verified local copies of ``relpaths`` of one dataset (see :func:`resolve_file`), with one
    fingerprint over them for the run record.
    """
    spec = dataset_spec(dataset, manifest)
    resolved = tuple(
        resolve_file(dataset, rel, spec=spec, allow_download=allow_download) for rel in relpaths
    )
    return ResolvedDataset(dataset, resolved)


# ------------------------------------------------------------------------------- row helpers


def read_json(path: Path, label: str) -> Any:
    """The parsed JSON of a data file; :class:`DatasetError` naming the file, ``label`` and the position on
    bad JSON or non-UTF-8 bytes.
    """
    try:
        with path.open("r", encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON ({label}): line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({label}): {exc}") from exc


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, object) for each non-empty line; bad lines name the line."""
    with path.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}: line {lineno}: not valid JSON: {exc.msg}") from exc
            if not isinstance(obj, dict):
                raise DatasetError(f"{path}: line {lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def require(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``obj[key]`` checked for presence and type; a clear error names ``where`` otherwise."""
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise DatasetError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DatasetError(f"{where}: field {key!r} should be {names}, got {type(value).__name__}")
    return value


def copy_into_cache(dataset: str, relpath: str, source: Path) -> Path:
    """Place a file obtained by hand into the cache (a convenience for users without network)."""
    dest = cache_dir() / dataset / relpath
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    return dest
