"""One contract for every ArtifactService backend: revisions, listing, user scope, refusals, size."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentlab.artifacts import (
    ArtifactNotFound,
    ArtifactOwnershipError,
    ArtifactService,
    ArtifactTooLarge,
    DuckDBArtifactService,
    InMemoryArtifactService,
    InvalidArtifactName,
)

APP, USER, OTHER = "desk", "alice", "bob"


@pytest.fixture(params=["memory", "duckdb"])
async def service(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ArtifactService]:
    if request.param == "memory":
        yield InMemoryArtifactService(max_bytes=1000)
        return
    async with DuckDBArtifactService(tmp_path / "store", max_bytes=1000) as svc:
        yield svc


async def test_revisions_count_from_zero_and_load_any_of_them(service: ArtifactService) -> None:
    first = await service.save(APP, USER, "s1", "report.md", "v0")
    second = await service.save(APP, USER, "s1", "report.md", b"v1")
    assert (first.revision, second.revision) == (0, 1)
    assert second.size == 2 and second.mime_type == "text/markdown"
    latest = await service.load(APP, USER, "s1", "report.md")
    assert latest is not None and latest.data == b"v1" and latest.info.revision == 1
    old = await service.load(APP, USER, "s1", "report.md", 0)
    assert old is not None and old.text == "v0"
    assert await service.versions(APP, USER, "s1", "report.md") == [0, 1]
    with pytest.raises(ArtifactNotFound, match="no revision 5 .*revisions: 0, 1"):
        await service.load(APP, USER, "s1", "report.md", 5)
    assert await service.load(APP, USER, "s1", "absent.txt") is None


async def test_mime_type_is_the_callers_else_guessed_else_text_or_binary(service: ArtifactService) -> None:
    assert (await service.save(APP, USER, "s1", "a", "x")).mime_type == "text/plain; charset=utf-8"
    assert (await service.save(APP, USER, "s1", "b", b"\x00")).mime_type == "application/octet-stream"
    assert (await service.save(APP, USER, "s1", "c.json", "{}")).mime_type == "application/json"
    assert (await service.save(APP, USER, "s1", "d", "x", mime_type="text/csv")).mime_type == "text/csv"


async def test_list_shows_the_latest_revision_of_the_sessions_and_the_users_names(service: ArtifactService) -> None:
    await service.save(APP, USER, "s1", "b.txt", "one")
    await service.save(APP, USER, "s1", "b.txt", "three")
    await service.save(APP, USER, "s1", "a/c.txt", "x")
    await service.save(APP, USER, "s2", "other-session.txt", "x")
    await service.save(APP, USER, "s2", "user:profile.json", "{}")
    await service.save(APP, OTHER, "s1", "bobs.txt", "x")
    listed = await service.list(APP, USER, "s1")
    assert [(i.name, i.revision, i.size) for i in listed] == [("a/c.txt", 0, 1), ("b.txt", 1, 5),
                                                             ("user:profile.json", 0, 2)]
    assert listed[2].user_scoped and not listed[0].user_scoped
    assert [i.name for i in await service.list(APP, OTHER, "s1")] == ["bobs.txt"]


async def test_a_user_scoped_name_is_shared_by_the_users_sessions_and_no_one_elses(service: ArtifactService) -> None:
    await service.save(APP, USER, "monday", "user:report.md", "day 1")
    await service.save(APP, USER, "tuesday", "user:report.md", "day 2")
    await service.save(APP, OTHER, "monday", "user:report.md", "bob's")
    mine = await service.load(APP, USER, "wednesday", "user:report.md")
    assert mine is not None and mine.text == "day 2" and mine.info.revision == 1
    first = await service.load(APP, USER, "wednesday", "user:report.md", 0)
    assert first is not None and first.info.session_id == "monday"
    bobs = await service.load(APP, OTHER, "tuesday", "user:report.md")
    assert bobs is not None and bobs.text == "bob's" and bobs.info.revision == 0
    # A session-scoped name is not seen from another session.
    await service.save(APP, USER, "monday", "notes.txt", "private")
    assert await service.load(APP, USER, "tuesday", "notes.txt") is None


async def test_delete_removes_every_revision_and_a_new_save_starts_at_zero(service: ArtifactService) -> None:
    await service.save(APP, USER, "s1", "x.txt", "a")
    await service.save(APP, USER, "s1", "x.txt", "b")
    assert await service.delete(APP, USER, "s1", "x.txt") is True
    assert await service.delete(APP, USER, "s1", "x.txt") is False
    assert await service.load(APP, USER, "s1", "x.txt") is None
    assert await service.versions(APP, USER, "s1", "x.txt") == []
    assert (await service.save(APP, USER, "s1", "x.txt", "c")).revision == 0


@pytest.mark.parametrize(("name", "message"), [
    ("", "non-empty"),
    ("../secrets.txt", "'..' segment"),
    ("reports/../../etc/passwd", "'..' segment"),
    ("user:../bob/report.md", "'..' segment"),
    ("./report.md", "'.' segment"),
    ("a//b", "empty segment"),
    ("reports/", "empty segment"),
    ("/etc/passwd", "absolute path"),
    ("user:/etc/passwd", "absolute path"),
    ("C:/Windows/x", "absolute path"),
    ("a\\b", "backslash"),
    ("bad\x00name", "NUL"),
    ("line\nbreak", "control character"),
    ("x" * 256, "256 characters, over the limit of 255"),
    ("user:", "nothing after"),
])
async def test_every_refused_name_is_a_clear_error(service: ArtifactService, name: str, message: str) -> None:
    with pytest.raises(InvalidArtifactName, match=message):
        await service.save(APP, USER, "s1", name, "x")
    with pytest.raises(InvalidArtifactName):
        await service.load(APP, USER, "s1", name)
    assert await service.list(APP, USER, "s1") == []


@pytest.mark.parametrize(("user", "session"), [("a/b", "s1"), ("..", "s1"), ("alice", "x/../y"), ("", "s1"),
                                               ("alice", "")])
async def test_ids_that_could_name_another_folder_are_refused(service: ArtifactService, user: str,
                                                              session: str) -> None:
    with pytest.raises(InvalidArtifactName):
        await service.save(APP, user, session, "report.md", "x")


async def test_the_size_limit_refuses_the_save_and_keeps_what_was_stored(service: ArtifactService) -> None:
    await service.save(APP, USER, "s1", "big.bin", b"x" * 1000)
    with pytest.raises(ArtifactTooLarge, match="1,001 bytes, over this service's limit of 1,000"):
        await service.save(APP, USER, "s1", "big.bin", b"x" * 1001)
    assert await service.versions(APP, USER, "s1", "big.bin") == [0]
    with pytest.raises(ArtifactTooLarge):
        await service.save(APP, USER, "s1", "text.txt", "é" * 501)  # 1002 bytes in UTF-8


async def test_the_durable_store_survives_a_reopen_and_keeps_bytes_out_of_duckdb(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with DuckDBArtifactService(root) as svc:
        await svc.save(APP, USER, "s1", "user:report.md", "# Report\n")
        await svc.save(APP, USER, "s1", "data.bin", bytes(range(256)))
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files[0] == "artifacts.duckdb"
    assert any(f.startswith("desk/alice/user/") for f in files)
    assert any(f.startswith("desk/alice/sessions/s1/") for f in files)
    async with DuckDBArtifactService(root) as again:
        report = await again.load(APP, USER, "s2", "user:report.md")
        data = await again.load(APP, USER, "s1", "data.bin")
        assert report is not None and report.text == "# Report\n"
        assert data is not None and data.data == bytes(range(256))
        assert (await again.save(APP, USER, "s3", "user:report.md", "v2")).revision == 1


async def test_a_folder_linked_into_another_users_tree_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with DuckDBArtifactService(root) as svc:
        await svc.save(APP, OTHER, "s1", "user:report.md", "bob's report")
        (root / APP / USER).parent.mkdir(parents=True, exist_ok=True)
        (root / APP / USER).symlink_to(root / APP / OTHER)  # alice's folder is bob's
        with pytest.raises(ArtifactOwnershipError, match="outside that user's folder"):
            await svc.save(APP, USER, "s1", "user:report.md", "overwritten")
        bobs = await svc.load(APP, OTHER, "s1", "user:report.md")
        assert bobs is not None and bobs.text == "bob's report"
        assert await svc.versions(APP, OTHER, "s1", "user:report.md") == [0]
