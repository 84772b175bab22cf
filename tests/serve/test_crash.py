"""``kill -9`` of ``python -m agentlab.serve`` at each step of a turn, then a restart on the same file:
the conversation goes on in the same ledger, with every message once (nothing lost, nothing doubled).

Steps: while the request is upstream (the client's turn committed, no answer); right after the
answer reached the client with the ledger commit still lingering (nothing committed); after the
ledger commit but before the call log and conversation index were (``--flush-interval`` long);
after everything was committed; and with ``--wait-for-ledger``, right after the answer, when the
answer must already be on disk.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from agentlab.session.duckdb_texts import event_from_row, texts_folder
from agentlab.testing.openai_server import OpenAITestServer


class Served:
    """One run of the proxy as a child process (killed with SIGKILL or stopped with SIGTERM)."""

    def __init__(self, upstream: str, db: Path, *args: str) -> None:
        command = [sys.executable, "-m", "agentlab.serve", "--upstream", upstream, "--arm", "passthrough",
                   "--port", "0", "--db", str(db), *args]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("serving http://"):
            self.process.kill()
            raise AssertionError(f"the proxy did not start: {line!r} {self.process.communicate()[1]}")
        self.base_url = line.split()[1]

    def chat(self, messages: list[dict[str, Any]], conversation: str | None) -> httpx.Response:
        headers = {"x-agentlab-conversation-id": conversation} if conversation else {}
        return httpx.post(f"{self.base_url}/chat/completions", json={"model": "test-model", "messages": messages},
                          headers={"authorization": "Bearer sk-client", **headers}, timeout=30)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.communicate(timeout=30)


@pytest.fixture
def upstream() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(record_requests=True) as server:
        yield server


def _ledger(db: Path) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """Every serve conversation row (tenant, conversation, session) and every ledger message (role, text)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT tenant, conversation_id, session_id FROM serve_conversations").fetchall()
        events = con.execute("SELECT event_json FROM events WHERE app_name = 'agentlab-serve' "
                             "ORDER BY session_id, seq").fetchall()
    finally:
        con.close()
    messages = []
    for (raw,) in events:  # a long text is a file beside the ledger: read the event back whole
        choice = event_from_row(raw, texts_folder(db)).choices[0]
        messages.append((choice.role, choice.content or ""))
    return [tuple(r) for r in rows], messages


U1 = {"role": "user", "content": "Where is the Lisbon office?"}
U2 = {"role": "user", "content": "And how many people work there?"}
#: A first message over the ledger's 64 Ki characters: its text is a file, written before its commit.
U1_LONG = {"role": "user", "content": "Where is the Lisbon office? " + "Lisbon " * 10_000}

STEPS = {
    # step: (proxy options, what happens to turn 1 before the kill)
    "upstream": (("--no-fsync",), "in_flight"),
    "answered-ledger-lingering": (("--no-fsync", "--ledger-linger", "1"), "answered"),
    "ledger-committed-index-not": (("--no-fsync", "--ledger-linger", "0", "--flush-interval", "30"), "settled"),
    "all-committed": (("--no-fsync",), "flushed"),
    "wait-for-ledger-answered": (("--no-fsync", "--wait-for-ledger"), "answered"),
}


@pytest.mark.parametrize(("explicit", "long"), [(True, False), (False, False), (True, True)],
                         ids=["explicit-id", "found-by-prefix", "explicit-id-long-text"])
@pytest.mark.parametrize("step", list(STEPS))
def test_a_kill_9_at_any_step_of_a_turn_loses_and_doubles_nothing(upstream, tmp_path, step, explicit,
                                                                  long) -> None:
    if step == "upstream" and not explicit:
        pytest.skip("a first turn without an id cannot be found by prefix: its retry starts a new conversation")
    options, before_kill = STEPS[step]
    u1 = U1_LONG if long else U1
    db = tmp_path / "serve.duckdb"
    sent_id = "conv-crash" if explicit else None  # what the client names its conversation (if it does)
    conversation = sent_id
    served = Served(upstream.base_url, db, *options)
    answer1 = None
    try:
        if before_kill == "in_flight":
            upstream.latency = 5.0
            threading.Thread(target=lambda: _swallow(served.chat, [u1], sent_id), daemon=True).start()
            time.sleep(1.5)  # the client's turn is committed, the upstream has not answered
        else:
            first = served.chat([u1], sent_id)
            assert first.status_code == 200, first.text
            answer1 = first.json()["choices"][0]["message"]["content"]
            conversation = conversation or first.headers["x-agentlab-conversation-id"]
            if before_kill == "settled":
                time.sleep(1.0)  # the ledger commits; the index waits for its 30 s flush
            elif before_kill == "flushed":
                time.sleep(1.5)
    finally:
        served.kill()
    if step == "wait-for-ledger-answered":
        assert ("assistant", answer1) in _ledger(db)[1]  # on disk before the client had the answer
    upstream.latency = 0.0

    served = Served(upstream.base_url, db, *options)
    try:
        if answer1 is None:  # the client never had its answer: it retries the same request
            retried = served.chat([u1], sent_id)
            assert retried.status_code == 200, retried.text
            answer1 = retried.json()["choices"][0]["message"]["content"]
        second = served.chat([u1, {"role": "assistant", "content": answer1}, U2], sent_id)
        assert second.status_code == 200, second.text
        # Without an id, the conversation is found by its prefix, unless nothing of it reached the disk.
        nothing_stored = step == "answered-ledger-lingering"
        wanted = "header" if explicit else "new" if nothing_stored else "prefix"
        assert second.headers["x-agentlab-key-source"] == wanted
        answer2 = second.json()["choices"][0]["message"]["content"]
        if not nothing_stored or explicit:
            assert second.headers["x-agentlab-conversation-id"] == conversation
    finally:
        served.stop()
    rows, messages = _ledger(db)
    assert len(rows) == 1, rows  # one conversation
    assert messages == [("user", u1["content"]), ("assistant", answer1), ("user", U2["content"]),
                        ("assistant", answer2)]
    if long:  # the long text is a file beside the ledger (read back above); none is left half written
        assert len(list(texts_folder(db).glob("*/*.txt"))) >= 1
        assert not list(texts_folder(db).glob("*/*.partial"))


def _swallow(chat: Any, *args: Any) -> None:
    try:
        chat(*args)
    except httpx.HTTPError:
        pass  # the proxy was killed under it
