"""Smaller copies of the benchmark data for smoke runs on a small, slow model.

Each writes a manifest in the shape of ``data/manifest.toml``; pointing ``$AGENTLAB_MANIFEST`` (and
for a rewritten file ``$AGENTLAB_DATA_DIR``) at it lets the unchanged CLI run on the subset.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _load_manifest() -> dict[str, Any]:
    from agentlab.bench.datasets.base import DEFAULT_MANIFEST

    with DEFAULT_MANIFEST.open("rb") as fh:
        return tomllib.load(fh)


def _write_manifest(manifest: Mapping[str, Any], target: str | os.PathLike[str], note: str) -> Path:
    """A manifest in the shape of ``data/manifest.toml`` (dataset tables with ``[[files]]``)."""
    lines = [f"# {note}"]
    for name, spec in manifest.items():
        lines.append(f"\n[{name}]")
        lines.extend(f"{key} = {json.dumps(value)}" for key, value in spec.items() if key != "files")
        for entry in spec.get("files", ()):
            lines.append(f"\n[[{name}.files]]")
            lines.extend(f"{key} = {json.dumps(value)}" for key, value in entry.items())
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def qmsum_subset_manifest(meeting_ids: Sequence[str], target: str | os.PathLike[str]) -> Path:
    """Write a copy of ``data/manifest.toml`` whose QMSum part lists only ``meeting_ids``.

    Point ``$AGENTLAB_MANIFEST`` at it and the unchanged CLI loads just those meetings (the
    genuine files, still sha256-checked), e.g. the shortest meeting for a smoke run on a small,
    slow model.
    """
    from agentlab.bench.datasets.base import DEFAULT_MANIFEST

    manifest = _load_manifest()
    wanted = {f"test/{m}.json" for m in meeting_ids}
    files = [f for f in manifest["qmsum"]["files"] if f["path"] in wanted]
    missing = wanted - {f["path"] for f in files}
    if missing:
        raise ValueError(f"QMSum meetings not in {DEFAULT_MANIFEST}: {', '.join(sorted(missing))}")
    manifest["qmsum"] = {**manifest["qmsum"], "files": files}
    return _write_manifest(manifest, target, f"data/manifest.toml with QMSum limited to {', '.join(meeting_ids)}")


def locomo_trimmed(sample_id: str, max_sessions: int, target_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """A trimmed LoCoMo file for smoke runs: one conversation, its first ``max_sessions`` sessions,
    and only the questions whose evidence lies entirely in them.

    Reads the genuine ``locomo10.json`` (sha256-checked), writes ``<target_dir>/locomo/locomo10.json``
    and a manifest pinning the trimmed file's own sha256. Point ``$AGENTLAB_DATA_DIR`` at
    ``target_dir`` and ``$AGENTLAB_MANIFEST`` at the returned manifest: the unchanged CLI then runs
    on it, and its runs get their own ids (the data hash differs). Returns (data file, manifest).
    """
    import hashlib

    from agentlab.bench.datasets.base import read_json, resolve_file
    from agentlab.bench.tasks.locomo_history import evidence_dia_ids

    source = resolve_file("locomo", "locomo10.json")
    raw = read_json(source.local_path, "LoCoMo")
    chosen = next((c for c in raw if c.get("sample_id") == sample_id), None)
    if chosen is None:
        raise ValueError(f"no LoCoMo conversation {sample_id!r} in {source.local_path}")
    conversation = {}
    for key, value in chosen["conversation"].items():
        found = re.match(r"session_(\d+)", key)
        if found is None or int(found.group(1)) <= max_sessions:
            conversation[key] = value

    def inside(qa: Mapping[str, Any]) -> bool:
        sessions = [int(d[1:].split(":")[0]) for d in evidence_dia_ids(qa.get("evidence") or ())]
        return bool(sessions) and max(sessions) <= max_sessions

    trimmed = [{"sample_id": sample_id, "conversation": conversation, "qa": [q for q in chosen["qa"] if inside(q)]}]
    data_file = Path(target_dir) / "locomo" / "locomo10.json"
    data_file.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps(trimmed, ensure_ascii=False).encode("utf-8")
    data_file.write_bytes(body)
    manifest = _load_manifest()
    entry = {**manifest["locomo"]["files"][0], "sha256": hashlib.sha256(body).hexdigest(), "size": len(body),
             "url": f"file://{data_file}"}
    manifest["locomo"] = {**manifest["locomo"], "files": [entry]}
    note = f"LoCoMo trimmed to {sample_id}, sessions 1-{max_sessions} and their {len(trimmed[0]['qa'])} questions"
    return data_file, _write_manifest(manifest, Path(target_dir) / "manifest.toml", note)
