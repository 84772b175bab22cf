from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from agentlab.bench.datasets import base
from agentlab.bench.datasets.base import DatasetError

PAYLOAD = b'{"hello": "world"}\n'
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


def write_manifest(path: Path, url: str, sha: str | None, size: int | None = None) -> Path:
    lines = ['[demo]', 'title = "demo"', "", "[[demo.files]]", 'path = "sub/file.json"', f'url = "{url}"']
    if sha:
        lines.append(f'sha256 = "{sha}"')
    if size is not None:
        lines.append(f"size = {size}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_download_from_local_server_then_cached(isolated_data: Path, http_root, tmp_path: Path) -> None:
    root, url = http_root
    (root / "file.json").write_bytes(PAYLOAD)
    manifest = write_manifest(tmp_path / "m.toml", f"{url}/file.json", PAYLOAD_SHA, len(PAYLOAD))

    first = base.resolve_file("demo", "sub/file.json", manifest=manifest)
    assert first.source == "download"
    assert first.local_path == isolated_data / "demo" / "sub" / "file.json"
    assert first.local_path.read_bytes() == PAYLOAD
    assert first.sha256 == PAYLOAD_SHA

    # The server is no longer needed: the second resolution finds the cached copy.
    (root / "file.json").unlink()
    second = base.resolve_file("demo", "sub/file.json", manifest=manifest)
    assert second.source == "cache"
    assert second.sha256 == PAYLOAD_SHA


def test_download_sha_mismatch_saves_nothing(isolated_data: Path, http_root, tmp_path: Path) -> None:
    root, url = http_root
    (root / "file.json").write_bytes(b"tampered\n")
    manifest = write_manifest(tmp_path / "m.toml", f"{url}/file.json", PAYLOAD_SHA)
    with pytest.raises(DatasetError, match=r"sha256 .* does not match the manifest"):
        base.resolve_file("demo", "sub/file.json", manifest=manifest)
    target_dir = isolated_data / "demo" / "sub"
    assert not any(target_dir.iterdir()) if target_dir.exists() else True


def test_missing_file_offline_names_places_and_url(isolated_data: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLAB_OFFLINE", "1")
    monkeypatch.setenv("AGENTLAB_DATA_DIR", str(tmp_path / "shared"))
    manifest = write_manifest(tmp_path / "m.toml", "https://example.org/file.json", PAYLOAD_SHA)
    with pytest.raises(DatasetError) as err:
        base.resolve_file("demo", "sub/file.json", manifest=manifest)
    msg = str(err.value)
    assert str(tmp_path / "shared" / "demo" / "sub" / "file.json") in msg
    assert str(isolated_data / "demo" / "sub" / "file.json") in msg
    assert "https://example.org/file.json" in msg


def test_unreachable_url_is_a_clear_error(isolated_data: Path, tmp_path: Path) -> None:
    # Port 9 on 127.0.0.1 (discard) is closed here: the connection is refused at once.
    manifest = write_manifest(tmp_path / "m.toml", "http://127.0.0.1:9/file.json", PAYLOAD_SHA)
    with pytest.raises(DatasetError, match="download failed"):
        base.resolve_file("demo", "sub/file.json", manifest=manifest)


def test_data_dir_takes_precedence_and_is_verified(isolated_data: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    (shared / "demo" / "sub").mkdir(parents=True)
    (shared / "demo" / "sub" / "file.json").write_bytes(b"wrong bytes\n")
    (isolated_data / "demo" / "sub").mkdir(parents=True)
    (isolated_data / "demo" / "sub" / "file.json").write_bytes(PAYLOAD)
    monkeypatch.setenv("AGENTLAB_DATA_DIR", str(shared))
    manifest = write_manifest(tmp_path / "m.toml", "http://127.0.0.1:9/x", PAYLOAD_SHA)
    # The data dir copy is found first, and it is corrupt: that is an error, not a silent fallback.
    with pytest.raises(DatasetError, match=str(shared / "demo" / "sub" / "file.json")):
        base.resolve_file("demo", "sub/file.json", manifest=manifest)
    (shared / "demo" / "sub" / "file.json").write_bytes(PAYLOAD)
    assert base.resolve_file("demo", "sub/file.json", manifest=manifest).source == "data_dir"


def test_size_mismatch_is_reported(isolated_data: Path, tmp_path: Path) -> None:
    (isolated_data / "demo" / "sub").mkdir(parents=True)
    (isolated_data / "demo" / "sub" / "file.json").write_bytes(PAYLOAD)
    manifest = write_manifest(tmp_path / "m.toml", "http://127.0.0.1:9/x", None, size=3)
    with pytest.raises(DatasetError, match="size 19 bytes does not match the manifest"):
        base.resolve_file("demo", "sub/file.json", manifest=manifest)


def test_verification_is_cached_per_path_mtime_size(isolated_data: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (isolated_data / "demo" / "sub").mkdir(parents=True)
    target = isolated_data / "demo" / "sub" / "file.json"
    target.write_bytes(PAYLOAD)
    manifest = write_manifest(tmp_path / "m.toml", "http://127.0.0.1:9/x", PAYLOAD_SHA)
    calls: list[Path] = []
    real = base.sha256_of

    def counting(path: Path) -> str:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(base, "sha256_of", counting)
    base.resolve_file("demo", "sub/file.json", manifest=manifest)
    base.resolve_file("demo", "sub/file.json", manifest=manifest)
    base.clear_verification_memory()  # a new process: the on-disk record is used
    base.resolve_file("demo", "sub/file.json", manifest=manifest)
    assert len(calls) == 1
    # Rewriting the file (new mtime) forces a rehash, which catches the corruption.
    target.write_bytes(b"changed!!!!!!!!!!!\n")
    os.utime(target, ns=(1, 1))
    with pytest.raises(DatasetError, match="sha256"):
        base.resolve_file("demo", "sub/file.json", manifest=manifest)
    assert len(calls) == 2


def test_project_manifest_lists_every_dataset() -> None:
    specs = base.load_manifest()
    assert {"qmsum", "locomo", "mt_bench_101", "longmemeval"} <= set(specs)
    assert len(specs["qmsum"].files_under("test/")) == 35
    for name in ("qmsum", "locomo", "mt_bench_101"):
        assert all(f.sha256 and len(f.sha256) == 64 for f in specs[name].files)
    assert specs["longmemeval"].file("longmemeval_s_cleaned.json").url.startswith(
        "https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned/"
    )


def test_jsonl_rows_name_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n{"a": \n')
    rows = base.iter_jsonl(path)
    assert next(rows) == (1, {"a": 1})
    with pytest.raises(DatasetError, match=r"x.jsonl: line 3: not valid JSON"):
        next(rows)
