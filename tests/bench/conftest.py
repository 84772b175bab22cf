from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def isolated_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No shared data dir, an empty private cache, downloads allowed (to 127.0.0.1 only)."""
    from agentlab.bench.datasets import base

    cache = tmp_path / "cache"
    monkeypatch.delenv("AGENTLAB_DATA_DIR", raising=False)
    monkeypatch.delenv("AGENTLAB_OFFLINE", raising=False)
    monkeypatch.setenv("AGENTLAB_CACHE_DIR", str(cache))
    base.clear_verification_memory()
    return cache


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A static file server on 127.0.0.1 serving a temporary folder: (folder, base URL)."""
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
            pass

    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def real_model_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No model or key from the environment, a private call cache, a fresh demo task."""
    import bench_demo_task as demo

    for name in ("AGENTLAB_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTLAB_CACHE_DB", str(tmp_path / "cache.duckdb"))
    demo.reset()
    yield
    demo.reset()
