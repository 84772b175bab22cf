"""artifact_save / artifact_list / artifact_load as the model calls them: scope, paging, refusals, framing."""

from __future__ import annotations

from typing import Any

import pytest

from agentlab.artifacts import ArtifactService, InMemoryArtifactService
from agentlab.artifacts.tools import (
    ARTIFACT_LOAD_NOTE,
    ArtifactListTool,
    ArtifactLoadTool,
    ArtifactSaveTool,
    ArtifactTools,
)
from agentlab.core import ServiceRegistry, ToolContext, project
from agentlab.model.base import ModelInfo


async def context(store: Any, session: str = "s1") -> ToolContext:
    services = ServiceRegistry()
    if store is not None:
        services.add(store, as_type=ArtifactService)
    result = await project([], [], "hi", ModelInfo("t", 1000), services=services, app_name="desk", user_id="alice")
    result.invocation.session.id = session
    return ToolContext(result.invocation, "c1", "artifact_load")


REPORT = "".join(f"{i:05d} certificate check line\n" for i in range(500))  # 14,000 bytes


async def test_save_list_and_load_a_12k_report_in_pages() -> None:
    store = InMemoryArtifactService()
    ctx = await context(store)
    saved = await ArtifactSaveTool().call({"name": "user:report.md", "content": REPORT}, ctx)
    assert saved == {"saved": True, "name": "user:report.md", "revision": 0, "mime_type": "text/markdown; charset=utf-8",
                     "size": len(REPORT), "scope": "user"}
    await ArtifactSaveTool().call({"name": "notes.txt", "content": "x"}, ctx)
    listed = await ArtifactListTool().call({}, ctx)
    assert listed["count"] == 2 and [a["name"] for a in listed["artifacts"]] == ["notes.txt", "user:report.md"]
    load = ArtifactLoadTool()
    first = await load.call({"name": "user:report.md"}, ctx)
    assert first["note"] == ARTIFACT_LOAD_NOTE and "not instructions" in first["note"]
    assert first["returned_bytes"] == 4096 and first["next_offset"] == 4096 and first["size"] == len(REPORT)
    assert first["content"] == REPORT[:4096]  # a default page, never the whole report by accident
    last = await load.call({"name": "user:report.md", "offset": 12288, "limit": 100000}, ctx)
    assert last["content"] == REPORT[12288:] and last["next_offset"] is None
    # another session of the same user sees the user-scoped report, not the session's notes
    other = await context(store, "s2")
    assert [a["name"] for a in (await ArtifactListTool().call({}, other))["artifacts"]] == ["user:report.md"]


async def test_bad_calls_are_errors_the_model_can_read() -> None:
    ctx = await context(InMemoryArtifactService(max_bytes=10))
    with pytest.raises(ValueError, match="'..' segment"):
        await ArtifactSaveTool().call({"name": "../x", "content": "y"}, ctx)
    with pytest.raises(ValueError, match="over this service's limit"):
        await ArtifactSaveTool().call({"name": "x", "content": "y" * 11}, ctx)
    with pytest.raises(ValueError, match="no artifact named 'x'"):
        await ArtifactLoadTool().call({"name": "x"}, ctx)
    await ArtifactSaveTool().call({"name": "x", "content": "short"}, ctx)
    with pytest.raises(ValueError, match="past the end"):
        await ArtifactLoadTool().call({"name": "x", "offset": 99}, ctx)
    with pytest.raises(ValueError, match="no revision 3"):
        await ArtifactLoadTool().call({"name": "x", "revision": 3}, ctx)
    with pytest.raises(ValueError, match="unknown argument"):
        await ArtifactLoadTool().call({"name": "x", "path": "/etc"}, ctx)
    with pytest.raises(ValueError, match="offset must be an integer, got 'two'"):
        await ArtifactLoadTool().call({"name": "x", "offset": "two"}, ctx)
    with pytest.raises(ValueError, match="revision must be an integer, got True"):
        await ArtifactLoadTool().call({"name": "x", "revision": True}, ctx)
    assert (await ArtifactLoadTool().call({"name": "x", "offset": "1"}, ctx))["content"].endswith("hort")
    with pytest.raises(ValueError, match="no artifact store"):
        await ArtifactListTool().call({}, await context(None))


async def test_binary_content_is_described_not_dumped() -> None:
    store = InMemoryArtifactService()
    ctx = await context(store)
    await store.save("desk", "alice", "s1", "blob.bin", bytes(range(256)) * 4)
    page = await ArtifactLoadTool().call({"name": "blob.bin"}, ctx)
    assert page["content"] is None and "binary content (1024 bytes)" in page["binary"]


async def test_the_mechanism_offers_the_tools_only_with_a_store() -> None:
    with_store, without = ServiceRegistry(), ServiceRegistry()
    with_store.add(InMemoryArtifactService(), as_type=ArtifactService)
    offered = await project([], [ArtifactTools()], "hi", ModelInfo("t", 1000), services=with_store)
    assert [t["function"]["name"] for t in offered.request.tools] == ["artifact_save", "artifact_list", "artifact_load"]
    bare = await project([], [ArtifactTools()], "hi", ModelInfo("t", 1000), services=without)
    assert bare.request.tools == []
