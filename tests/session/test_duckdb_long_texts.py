"""Long texts of the DuckDB ledger in files beside the database (``text_file_over``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from agentlab.events import Event, Message, user_event
from agentlab.session import DuckDBSessionService, Session
from agentlab.session.duckdb_texts import LedgerTextMissing, texts_folder

APP = "app"


def _files(path: Path) -> list[Path]:
    return sorted(texts_folder(path).glob("*/*"))


async def _one_long_text(path: Path, text: str) -> Path:
    """A ledger at ``path`` whose one event holds ``text`` (over 40 characters): its text file."""
    async with DuckDBSessionService(path, token_counter=lambda e: 1, text_file_over=40) as service:
        session = await service.create_session(APP, "u", "s")
        await service.append_event(session, user_event(text))
    (file,) = _files(path)
    return file


def _rows(path: Path) -> list[str]:
    with duckdb.connect(str(path), read_only=True) as con:
        return [text for (text,) in con.execute("SELECT event_json FROM events ORDER BY session_id, seq").fetchall()]


async def test_long_strings_go_to_files_and_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    long_text = "héllo \ud800 wörld " * 20  # a lone surrogate and multi-byte characters: kept as they were
    event = Event(author="user", choices=[Message(role="user", content=long_text)],
                  metadata={"chain": "c1", "nested": {"deep": ["short", "y" * 150]}, "numbered": {3: "z" * 120}})
    async with DuckDBSessionService(path, token_counter=lambda e: 1, text_file_over=100) as service:
        session = await service.create_session(APP, "u", "s")
        await service.append_events(session, [event, user_event("short")])
        assert event.choices[0].content == long_text  # the caller's event is not touched
        assert event.metadata["nested"]["deep"][1] == "y" * 150
        expected = json.loads(event.to_json())  # as appended (its token count set)
    rows = _rows(path)
    assert len(_files(path)) == 3  # the message, the nested string and the one under a non-string key
    assert rows[0].startswith('{"$texts"') and len(rows[0]) < 1500
    assert long_text not in rows[0]
    assert json.loads(rows[1])["choices"][0]["content"] == "short"  # short events stay as they were
    # The row stays queryable: its metadata and a marker where the text was.
    with duckdb.connect(str(path), read_only=True) as con:
        chain, content = con.execute("SELECT json_extract_string(event_json, '$.metadata.chain'),"
                                     " json_extract_string(event_json, '$.choices[0].content') FROM events"
                                     " WHERE seq = 0").fetchone()
    assert chain == "c1" and "characters kept in the ledger's text file" in content
    # Read back by a service that does not write text files itself: every read path.
    async with DuckDBSessionService(path) as service:
        back = await service.get_session(APP, "u", "s")
        assert back is not None and json.loads(back.events[0].to_json()) == expected
        listed = await service.list_sessions(APP, "u")
        assert json.loads(listed[0].events[0].to_json()) == expected
        window = await service.get_event_window(APP, "u", "s", back.events[1].id, before=1, after=0)
        assert window[0].choices[0].content == long_text


async def test_a_missing_or_cut_text_file_is_an_error_that_names_the_folder(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    file = await _one_long_text(path, "x" * 60)
    file.write_bytes(b"x" * 59)
    async with DuckDBSessionService(path) as service:
        with pytest.raises(LedgerTextMissing, match="holds 59 bytes, its row says 60"):
            await service.get_session(APP, "u", "s")
    file.unlink()
    async with DuckDBSessionService(path) as service:
        with pytest.raises(LedgerTextMissing, match=r"is missing.*s\.duckdb\.texts.*copy that folder"):
            await service.get_session(APP, "u", "s")


async def test_a_row_cannot_name_a_file_outside_its_folder(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    (tmp_path / "secret.txt").write_text("do not read")
    async with DuckDBSessionService(path, token_counter=lambda e: 1) as service:
        await service.create_session(APP, "u", "s")
    row = json.dumps({"$texts": [{"path": ["choices", 0, "content"], "file": "../secret.txt", "bytes": 11}],
                      **json.loads(user_event("marker").to_json())}, sort_keys=True)
    with duckdb.connect(str(path)) as con:
        con.execute("INSERT INTO events VALUES ('app', 'u', 's', 0, 'e', '', 'user', '', 'user', '', 0, 1, 0, ?)",
                    [row])
    async with DuckDBSessionService(path) as service:
        with pytest.raises(LedgerTextMissing, match="not a ledger text's name"):
            await service.get_session(APP, "u", "s")


async def test_a_reference_that_does_not_fit_its_event_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    file = await _one_long_text(path, "q" * 60)
    with duckdb.connect(str(path)) as con:
        (row,) = con.execute("SELECT event_json FROM events").fetchone()
        data = json.loads(row)
        data["$texts"][0]["path"] = ["choices", 7, "content"]
        con.execute("UPDATE events SET event_json = ?", [json.dumps(data, sort_keys=True)])
    async with DuckDBSessionService(path) as service:
        with pytest.raises(LedgerTextMissing, match=f"reference to {file}.*does not fit its event"):
            await service.get_session(APP, "u", "s")


async def test_a_refused_append_leaves_no_text_file(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 1, text_file_over=40) as service:
        await service.create_session(APP, "u", "taken")
        other = await service.create_session(APP, "u", "other")
        twin = Session(app_name=APP, user_id="u", id="taken")  # its create is refused: it exists
        outcomes = await asyncio.gather(
            service.append_events(twin, [user_event("a" * 60), user_event("b" * 60)], create=True),
            service.append_events(other, [user_event("c" * 60)]),
            return_exceptions=True)
        assert isinstance(outcomes[0], ValueError) and outcomes[1] is None
    (kept,) = _files(path)
    assert kept.read_text() == "c" * 60


async def test_deleting_a_session_removes_its_texts_and_only_its_own(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    async with DuckDBSessionService(path, token_counter=lambda e: 1, text_file_over=40) as service:
        for name in ("gone", "kept"):
            session = await service.create_session(APP, "u", name)
            await service.append_event(session, user_event(name * 20))
        assert len(_files(path)) == 2
        await service.delete_session(APP, "u", "gone")
        (left,) = _files(path)
        assert left.read_text() == "kept" * 20
        back = await service.get_session(APP, "u", "kept")
        assert back is not None and back.events[0].choices[0].content == "kept" * 20


def test_an_in_memory_store_cannot_keep_text_files() -> None:
    with pytest.raises(ValueError, match="in-memory session store has none"):
        DuckDBSessionService(":memory:", text_file_over=10)


async def test_a_failed_file_write_fails_the_append_alone(tmp_path: Path, monkeypatch: Any) -> None:
    from agentlab.session import duckdb_texts

    path = tmp_path / "s.duckdb"
    real_write = duckdb_texts.LongTexts._write

    def full_disk(self: Any, key: Any, text: str) -> Any:
        if text.startswith("boom"):
            raise OSError(28, "No space left on device")
        return real_write(self, key, text)

    monkeypatch.setattr(duckdb_texts.LongTexts, "_write", full_disk)
    async with DuckDBSessionService(path, token_counter=lambda e: 1, text_file_over=40) as service:
        bad = await service.create_session(APP, "u", "bad")
        good = await service.create_session(APP, "u", "good")
        outcomes = await asyncio.gather(service.append_event(bad, user_event("boom" * 15)),
                                        service.append_event(good, user_event("fine" * 15)),
                                        return_exceptions=True)
        assert isinstance(outcomes[0], OSError) and isinstance(outcomes[1], Event)
    assert [p.read_text() for p in _files(path)] == ["fine" * 15]
    assert not list(texts_folder(path).glob("*/*.partial"))


async def test_a_half_written_text_file_of_a_killed_writer_is_removed_at_open(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    kept = await _one_long_text(path, "k" * 60)
    partial = kept.with_name("0" * 32 + ".partial")
    partial.write_bytes(b"cut sh")
    async with DuckDBSessionService(path) as service:  # a reader leaves it alone
        await service.get_session(APP, "u", "s")
    assert partial.exists()
    async with DuckDBSessionService(path, text_file_over=40) as service:
        back = await service.get_session(APP, "u", "s")
        assert back is not None and back.events[0].choices[0].content == "k" * 60
    assert _files(path) == [kept]
