"""Fixtures: the project's test server as the upstream, the proxy in front of it, a scripted upstream."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_helpers import RecordingUpstream, ScriptedUpstream

from agentlab.serve import ServeHandle, start_server
from agentlab.testing.openai_server import OpenAITestServer


@pytest.fixture
def upstream() -> Iterator[OpenAITestServer]:
    """The project's OpenAI-compatible test server, recording every body it receives."""
    with OpenAITestServer(record_requests=True, prefix_cache=True) as server:
        yield server


@pytest.fixture
def proxy(upstream: OpenAITestServer, tmp_path: Path) -> Iterator[Callable[..., ServeHandle]]:
    """Start a proxy in front of ``upstream``: ``proxy(arm="compaction", **config)``."""
    handles: list[ServeHandle] = []

    def start(arm: str = "passthrough", **config: Any) -> ServeHandle:
        config.setdefault("db", str(tmp_path / f"serve-{len(handles)}.duckdb"))
        handle = start_server(upstream=config.pop("upstream", upstream.base_url), arm=arm, **config)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()


@pytest.fixture
def scripted() -> Iterator[Callable[[list[list[Any]]], ScriptedUpstream]]:
    """Make a :class:`ScriptedUpstream` (closed after the test)."""
    made: list[ScriptedUpstream] = []

    def make(scripts: list[list[Any]]) -> ScriptedUpstream:
        made.append(ScriptedUpstream(scripts))
        return made[-1]

    yield make
    for server in made:
        server.close()


@pytest.fixture
def recording() -> Iterator[RecordingUpstream]:
    """A :class:`RecordingUpstream`."""
    server = RecordingUpstream()
    yield server
    server.close()
