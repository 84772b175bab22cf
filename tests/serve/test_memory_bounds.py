"""What an accepted large request may cost the proxy: no tokenizing on the event loop, and idle
conversations held in memory within a byte budget (the rest reloaded from the durable ledger).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

import agentlab.serve.conversations as conversations_module
from agentlab.model import tokens
from agentlab.session.duckdb_texts import TEXT_FILE_OVER, texts_folder

BIG = "word " * 120_000  # 600 KB: over the 256 KiB a body is parsed and counted off the loop from


def test_a_large_request_is_tokenized_off_the_event_loop(proxy, monkeypatch) -> None:
    server = proxy()
    loop_thread = server._thread
    counted_on: list[str] = []
    count = tokens.count_message

    def spy(message: Any, *args: Any) -> int:
        if len(message.content or "") > 100_000:
            counted_on.append("loop" if threading.current_thread() is loop_thread else "worker")
        return count(message, *args)

    monkeypatch.setattr(tokens, "count_message", spy)
    response = httpx.post(server.base_url + "/chat/completions", timeout=60, json={
        "model": "test-model", "messages": [{"role": "user", "content": BIG}]})
    assert response.status_code == 200, response.text
    assert counted_on and "loop" not in counted_on, counted_on
    row = server.calls().iloc[0]
    assert row["client_prompt_tokens"] > 100_000  # counted all the same


def test_idle_conversations_are_evicted_beyond_the_byte_budget_and_come_back_whole(proxy) -> None:
    server = proxy(max_conversation_bytes=1_500_000)
    table = server.app.backend.table
    histories = {}
    for i in range(5):
        messages = [{"role": "user", "content": f"conversation {i}: " + BIG}]
        response = httpx.post(server.base_url + "/chat/completions", timeout=60,
                              headers={"x-agentlab-conversation-id": f"conv-{i}"},
                              json={"model": "test-model", "messages": messages})
        assert response.status_code == 200, response.text
        histories[i] = [*messages, response.json()["choices"][0]["message"]]
    server.settle()
    assert table.size <= 1_500_000, table.size
    assert table.size == sum(c.size for c in table.live.values())
    assert table.evictions >= 3 and ("tenant", "conv-0") not in {k for k in table.live}
    # The first conversation, evicted, goes on from its durable ledger.
    messages = [*histories[0], {"role": "user", "content": "and then?"}]
    response = httpx.post(server.base_url + "/chat/completions", timeout=60,
                          headers={"x-agentlab-conversation-id": "conv-0"},
                          json={"model": "test-model", "messages": messages})
    assert response.status_code == 200
    assert [e.role for e in server.ledger("conv-0")] == ["user", "assistant", "user", "assistant"]
    assert conversations_module.event_size(server.ledger("conv-0")[0]) > len(BIG)
    # The long texts are files beside the ledger (DuckDB's checkpoints would rewrite them as rows).
    texts = texts_folder(Path(server.app.config.db))
    assert len(list(texts.glob("*/*.txt"))) == 5
    sessions = server.app.sessions
    (longest,) = server.run(sessions._run(lambda con: con.execute(
        "SELECT max(length(event_json)) FROM events").fetchone()))
    assert longest < TEXT_FILE_OVER
