from pathlib import Path

import pytest

from agentlab.events import Message, Usage
from agentlab.model import (
    CachedModel,
    CallCache,
    CallRecord,
    GenerationConfig,
    ModelError,
    ModelRequest,
    ScriptedModel,
    observe_calls,
)


def _request(text: str = "hi", **kwargs: object) -> ModelRequest:
    return ModelRequest(messages=[Message.system("be brief"), Message.user(text)], **kwargs)  # type: ignore[arg-type]


async def test_same_request_twice_reaches_model_once() -> None:
    inner = ScriptedModel(["answer one", "answer two"], usage_fn=lambda r, m: Usage(40, 5, 10))
    model = CachedModel(inner, CallCache(None))
    records: list[CallRecord] = []
    with observe_calls(records.append):
        first = await model.generate(_request())
        second = await model.generate(_request())
    assert len(inner.requests) == 1
    assert first.message.content == second.message.content == "answer one"
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert second.usage == Usage(40, 5, 10)  # the original usage, so replays account the same tokens
    assert [r.cache_hit for r in records] == [False, True]  # inner's own report is suppressed
    assert records[0].cache_key == records[1].cache_key != ""
    assert all(r.usage == Usage(40, 5, 10) for r in records)


async def test_ids_and_purpose_do_not_change_the_key_but_content_and_params_do() -> None:
    inner = ScriptedModel([], default_reply="ok")
    model = CachedModel(inner, CallCache(None))
    call_a = ScriptedModel.tool_call("lookup", {"q": 1}, id="call_a")
    call_b = ScriptedModel.tool_call("lookup", {"q": 1}, id="call_b")
    await model.generate(ModelRequest([Message.user("x"), call_a, Message.tool("call_a", "lookup", "1")]))
    await model.generate(ModelRequest([Message.user("x"), call_b, Message.tool("call_b", "lookup", "1")],
                                      purpose="judge"))
    assert len(inner.requests) == 1
    await model.generate(_request(sample_index=1))
    await model.generate(_request())
    await model.generate(_request(config=GenerationConfig(temperature=0.7)))
    await model.generate(_request("different"))
    assert len(inner.requests) == 5


async def test_different_sample_index_misses() -> None:
    inner = ScriptedModel(["s0", "s1"])
    model = CachedModel(inner, CallCache(None))
    r0 = await model.generate(_request(sample_index=0))
    r1 = await model.generate(_request(sample_index=1))
    assert (r0.message.content, r1.message.content) == ("s0", "s1")
    assert not r1.cache_hit and len(inner.requests) == 2


async def test_errors_are_not_cached_and_are_reported_once() -> None:
    inner = ScriptedModel([ModelError("flaky"), "recovered"])
    model = CachedModel(inner, CallCache(None))
    records: list[CallRecord] = []
    with observe_calls(records.append):
        with pytest.raises(ModelError, match="flaky"):
            await model.generate(_request())
        response = await model.generate(_request())
    assert response.message.content == "recovered" and not response.cache_hit
    assert [(r.cache_hit, r.error is not None) for r in records] == [(False, True), (False, False)]
    assert len(model.cache) == 1


async def test_cache_survives_reopening_the_file(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "cache.duckdb"
    tool_message = ScriptedModel.tool_call("lookup", {"q": "Paris"}, id="call_7")
    first_cache = CallCache(db)
    await CachedModel(ScriptedModel(["plain", tool_message]), first_cache).generate(_request("a"))
    await CachedModel(ScriptedModel([tool_message]), first_cache).generate(_request("b"))
    first_cache.close()

    reopened = CallCache(db)
    inner = ScriptedModel([])  # any call reaching it would raise "script exhausted"
    model = CachedModel(inner, reopened)
    plain = await model.generate(_request("a"))
    tool = await model.generate(_request("b"))
    assert plain.cache_hit and plain.message == Message.assistant("plain") and plain.finish_reason == "stop"
    assert tool.message == tool_message and tool.finish_reason == "tool_calls"
    assert inner.requests == [] and len(reopened) == 2
    reopened.close()


async def test_stream_miss_passes_chunks_and_hit_replays_as_one_chunk() -> None:
    inner = ScriptedModel(["streamed words here"])
    model = CachedModel(inner, CallCache(None))
    records: list[CallRecord] = []
    with observe_calls(records.append):
        miss = [c async for c in model.stream(_request())]
        hit = [c async for c in model.stream(_request())]
    assert len(miss) > 1 and miss[-1].response is not None and not miss[-1].response.cache_hit
    assert len(hit) == 1 and hit[0].delta == "streamed words here"
    assert hit[0].response is not None and hit[0].response.cache_hit
    assert [r.cache_hit for r in records] == [False, True]
    assert len(inner.requests) == 1


async def test_many_concurrent_tasks_share_one_cache() -> None:
    import asyncio

    inner = ScriptedModel([], default_reply="same")
    model = CachedModel(inner, CallCache(None))
    await asyncio.gather(*(model.generate(_request(f"q{i}")) for i in range(50)))
    responses = await asyncio.gather(*(model.generate(_request(f"q{i}")) for i in range(50)))
    assert len(inner.requests) == 50 and all(r.cache_hit for r in responses)


def test_info_reads_through() -> None:
    inner = ScriptedModel([])
    assert CachedModel(inner, CallCache(None)).info is inner.info


async def test_a_closed_cache_says_so_instead_of_an_attribute_error(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "cache.duckdb")
    model = CachedModel(ScriptedModel([], default_reply="ok"), cache)
    await model.generate(_request())
    cache.close()
    with pytest.raises(RuntimeError, match="call cache at .* is closed"):
        await model.generate(_request())
    assert CallCache(tmp_path / "cache.duckdb").get(_request().cache_key("scripted")) is not None


def _rows_in_file(path: Path) -> int:
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        return int(con.execute("SELECT count(*) FROM call_cache").fetchone()[0])  # type: ignore[index]
    finally:
        con.close()


async def test_answers_wait_in_memory_then_reach_the_file_in_one_flush(tmp_path: Path) -> None:
    # A commit per answer blocked the event loop for an fsync on every call.
    path = tmp_path / "c.duckdb"
    cache = CallCache(path)
    model = CachedModel(ScriptedModel([], default_reply="ok"), cache)
    for i in range(5):
        await model.generate(_request(f"q{i}"))
    assert cache._pending and len(cache._pending) == 5  # not yet written ...
    hit = await model.generate(_request("q3"))
    assert hit.cache_hit  # ... but answered from memory meanwhile
    assert cache.flush() == 5 and not cache._pending
    assert len(cache) == 5
    cache.close()
    assert _rows_in_file(path) == 5


async def test_close_and_a_full_buffer_write_what_is_pending(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agentlab.model.cache as cache_module

    monkeypatch.setattr(cache_module, "FLUSH_ROWS", 3)
    cache = CallCache(tmp_path / "c.duckdb")
    model = CachedModel(ScriptedModel([], default_reply="ok"), cache)
    for i in range(4):
        await model.generate(_request(f"q{i}"))
    assert len(cache._pending) == 1  # the third answer flushed three
    cache.close()
    reopened = CallCache(tmp_path / "c.duckdb")
    assert len(reopened) == 4 and reopened.get(_request("q3").cache_key("scripted")) is not None
    reopened.close()


def test_pending_answers_are_written_at_interpreter_exit(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "c.duckdb"
    script = (
        "import asyncio, sys\n"
        "from agentlab.events import Message\n"
        "from agentlab.model import CachedModel, CallCache, ModelRequest, ScriptedModel\n"
        f"cache = CallCache({str(path)!r})\n"
        "model = CachedModel(ScriptedModel([], default_reply='ok'), cache)\n"
        "asyncio.run(model.generate(ModelRequest([Message.user('q')])))\n"
        "assert len(cache._pending) == 1\n"  # never flushed nor closed by the script
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert _rows_in_file(path) == 1


async def test_merge_entries_and_clear_see_pending_answers(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "c.duckdb")
    model = CachedModel(ScriptedModel([], default_reply="ok"), cache)
    await model.generate(_request("a"))
    rows = cache.entries()
    assert len(rows) == 1 and not cache._pending
    other = CallCache(None)
    await CachedModel(ScriptedModel([], default_reply="other"), other).generate(_request("a"))
    await CachedModel(ScriptedModel([], default_reply="new"), other).generate(_request("b"))
    assert cache.merge(other.entries()) == 2
    assert len(cache) == 2
    stored = cache.get(_request("a").cache_key("scripted"))
    assert stored is not None and stored.message.content == "ok"  # a stored key keeps its answer
    await model.generate(_request("c"))
    cache.clear()
    assert len(cache) == 0 and not cache._pending
    cache.close()


async def test_a_miss_is_answered_from_the_key_set_without_a_query(tmp_path: Path) -> None:
    path = tmp_path / "c.duckdb"
    cache = CallCache(path)
    model = CachedModel(ScriptedModel([], default_reply="ok"), cache)
    await model.generate(_request("stored"))
    cache.flush()
    assert cache.get("no-such-key") is None  # loads the key set once
    opened = cache._open
    cache._open = lambda: pytest.fail("a miss queried the file")  # type: ignore[method-assign]
    assert cache.get("another-missing-key") is None
    cache._open = opened  # type: ignore[method-assign]
    assert cache.get(_request("stored").cache_key("scripted")) is not None
    # A second cache object on the same file shares the key set: what one stores, the other finds.
    second = CallCache(path)
    await model.generate(_request("later"))
    cache.flush()
    assert second.get(_request("later").cache_key("scripted")) is not None
    second.close()
    cache.close()


async def test_past_the_key_set_limit_every_lookup_asks_the_file(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import agentlab.model.cache as cache_module

    monkeypatch.setattr(cache_module, "KEY_SET_LIMIT", 2)
    cache = CallCache(tmp_path / "c.duckdb")
    model = CachedModel(ScriptedModel([], default_reply="ok"), cache)
    for i in range(3):
        await model.generate(_request(f"q{i}"))
    cache.close()
    reopened = CallCache(tmp_path / "c.duckdb")
    assert reopened.get("missing") is None and reopened._key_set() is None  # 3 > 2: not held
    assert all(reopened.get(_request(f"q{i}").cache_key("scripted")) is not None for i in range(3))
    reopened.close()
