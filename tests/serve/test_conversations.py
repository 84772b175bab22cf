"""Which conversation a request lands in, and what retries and edits do to its ledger."""

from __future__ import annotations

from typing import Any

import openai

SYSTEM = {"role": "system", "content": "You answer questions about the company's offices."}
FIRST = {"role": "user", "content": "The Lisbon office is by the river. Where is the Lisbon office?"}


def _ask(client: openai.OpenAI, messages: list[dict[str, Any]], **kwargs: Any) -> tuple[str, Any]:
    raw = client.chat.completions.with_raw_response.create(model="test-model", messages=messages, **kwargs)
    return raw.parse().choices[0].message.content, raw.headers


def _count_batches(server: Any) -> list[int]:
    """Patch ``server``'s ledger to record the size of every batch it commits."""
    sessions = server.app.sessions
    batches: list[int] = []
    insert = sessions._insert_events

    def counted(con: Any, batch: Any, reload_seq: bool = False) -> None:
        batches.append(len(batch))
        insert(con, batch, reload_seq)

    sessions._insert_events = counted
    return batches


def _client(server: Any, key: str, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=kwargs.pop("max_retries", 0), **kwargs)


def test_two_callers_with_identical_first_messages_stay_apart(proxy) -> None:
    server = proxy("compaction")
    histories: dict[str, list[dict[str, Any]]] = {}
    ids: dict[str, set[str]] = {}
    for turn in range(3):
        for key in ("alice", "bob"):
            messages = histories.setdefault(key, [SYSTEM, FIRST])
            if turn:
                messages.append({"role": "user", "content": f"Question {turn}: is Lisbon by the river?"})
            answer, headers = _ask(_client(server, key), messages)
            messages.append({"role": "assistant", "content": answer})
            ids.setdefault(key, set()).add(headers["x-agentlab-conversation-id"])
            assert headers["x-agentlab-key-source"] == ("new" if turn == 0 else "prefix")
    assert len(ids["alice"]) == len(ids["bob"]) == 1 and ids["alice"] != ids["bob"]
    for key in ("alice", "bob"):
        ledger = server.ledger(next(iter(ids[key])))
        assert [e.role for e in ledger] == ["system", "user", "assistant"] * 1 + ["user", "assistant"] * 2
    # Bob naming Alice's conversation gets a conversation of that name in his own namespace.
    alice_id = next(iter(ids["alice"]))
    _ask(_client(server, "bob"), [SYSTEM, {"role": "user", "content": "Hello?"}],
         extra_headers={"X-Agentlab-Conversation-Id": alice_id})
    tenants = {t for (t, c) in server.app.store.conversations if c == alice_id}
    assert len(tenants) == 2
    calls = server.calls()
    alice_rows = calls[calls["conversation_id"] == alice_id]
    assert alice_rows["tenant"].nunique() == 2 and len(alice_rows) == 4


def test_header_keyed_and_prefix_keyed_turns_resolve_to_one_conversation(proxy) -> None:
    server = proxy("passthrough")
    client = _client(server, "caller")
    messages: list[dict[str, Any]] = [SYSTEM, FIRST]
    sources = []
    for turn, header in enumerate(({"X-Agentlab-Conversation-Id": "run-7"}, {}, {"X-Session-ID": "run-7"}, {})):
        if turn:
            messages.append({"role": "user", "content": f"Follow-up {turn} about Lisbon."})
        answer, headers = _ask(client, messages, extra_headers=header)
        assert headers["x-agentlab-conversation-id"] == "run-7"
        sources.append(headers["x-agentlab-key-source"])
        messages.append({"role": "assistant", "content": answer})
    assert sources == ["header", "prefix", "header", "prefix"]
    assert [e.role for e in server.ledger("run-7")] == ["system", "user", "assistant"] + ["user", "assistant"] * 3
    # The other way round: a run found by its prefix, then named by the id the server handed out.
    other = [SYSTEM, {"role": "user", "content": "A different question about Porto."}]
    answer, headers = _ask(client, other)
    assert headers["x-agentlab-key-source"] == "new"
    conversation = headers["x-agentlab-conversation-id"]
    other += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And Porto's size?"}]
    _, again = _ask(client, other, extra_headers={"X-Agentlab-Conversation-Id": conversation})
    assert again["x-agentlab-conversation-id"] == conversation
    assert [e.role for e in server.ledger(conversation)] == ["system", "user", "assistant", "user", "assistant"]
    # The body field names a conversation too.
    other += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "Thanks."}]
    _, by_body = _ask(client, other, metadata={"agentlab_conversation_id": conversation})
    assert (by_body["x-agentlab-conversation-id"], by_body["x-agentlab-key-source"]) == (conversation, "body")


def test_retries_add_no_events(upstream, proxy) -> None:
    server = proxy("compaction")
    client = _client(server, "caller", max_retries=2)
    upstream.queue_faults("429")  # the first attempt fails; openai retries the identical body
    messages = [SYSTEM, FIRST]
    answer, headers = _ask(client, messages)
    conversation = headers["x-agentlab-conversation-id"]
    assert answer and len(upstream.received) == 2
    assert [e.role for e in server.ledger(conversation)] == ["system", "user", "assistant"]
    assert server.calls()["conversation_id"].nunique() == 1  # the retry of a first turn found it
    # A retry after an attempt that succeeded (the client timed out, say): nothing new in the ledger.
    again, headers = _ask(_client(server, "caller"), messages, extra_headers={"x-stainless-retry-count": "1"})
    assert again == answer and headers["x-agentlab-key-source"] == "retry"
    assert [e.role for e in server.ledger(conversation)] == ["system", "user", "assistant"]
    calls = server.calls()
    assert list(calls["status"]) == [429, 200, 200]
    assert list(calls["retry"]) == [False, True, True]
    assert list(calls["ledger_mode"]) == ["append", "repeat", "replay"]
    assert list(calls["events_appended"]) == [2, 1, 0]


def test_an_edited_history_branches_the_conversation(proxy) -> None:
    server = proxy("passthrough")
    client = _client(server, "caller")
    messages = [SYSTEM, FIRST]
    answer, headers = _ask(client, messages, extra_headers={"X-Agentlab-Conversation-Id": "edit-1"})
    old_session = server.app.store.conversations[(server.calls().iloc[0]["tenant"], "edit-1")]
    edited = [SYSTEM, {"role": "user", "content": "Where is the Porto office?"}]
    _ask(client, edited, extra_headers={"X-Agentlab-Conversation-Id": "edit-1"})
    calls = server.calls()
    assert list(calls["ledger_mode"]) == ["append", "branch"]
    assert calls.iloc[1]["session_id"] != old_session
    assert [e.text for e in server.ledger("edit-1")][:2] == [SYSTEM["content"], edited[1]["content"]]
    old = server.run(server.app.sessions.get_session("agentlab-serve", calls.iloc[0]["tenant"], old_session))
    assert [e.text for e in old.events] == [SYSTEM["content"], FIRST["content"], answer]  # untouched


def test_two_same_key_conversations_with_equal_histories_are_not_merged(proxy) -> None:
    server = proxy("passthrough")
    client = _client(server, "caller")
    ids = set()
    for _ in range(2):
        answer, headers = _ask(client, [SYSTEM, FIRST])
        ids.add(headers["x-agentlab-conversation-id"])
    assert len(ids) == 2
    _, headers = _ask(client, [SYSTEM, FIRST, {"role": "assistant", "content": answer},
                               {"role": "user", "content": "And then?"}])
    # Both conversations have this prefix: guessing would merge them, so it starts a new one.
    assert headers["x-agentlab-key-source"] == "new-ambiguous"
    assert headers["x-agentlab-conversation-id"] not in ids


def test_a_restarted_server_continues_the_conversation_from_its_database(upstream, tmp_path) -> None:
    from agentlab.serve import start_server

    db = str(tmp_path / "durable.duckdb")
    messages: list[dict[str, Any]] = [SYSTEM, FIRST]
    with start_server(upstream=upstream.base_url, arm="compaction", db=db) as server:
        answer, headers = _ask(_client(server, "caller"), messages)
        conversation = headers["x-agentlab-conversation-id"]
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Is Lisbon by the river?"}]
    with start_server(upstream=upstream.base_url, arm="compaction", db=db) as server:
        _, headers = _ask(_client(server, "caller"), messages)
        assert (headers["x-agentlab-conversation-id"], headers["x-agentlab-key-source"]) == (conversation, "prefix")
        assert [e.role for e in server.ledger(conversation)] == ["system", "user", "assistant", "user", "assistant"]
        assert list(server.calls()["ledger_mode"]) == ["append", "append"]


def test_memory_stays_flat_as_conversations_come_and_go(proxy) -> None:
    server = proxy("compaction", max_conversations=3)
    backend, store = server.app.backend, server.app.store
    client = _client(server, "caller")
    histories: list[tuple[list[dict[str, Any]], str]] = []
    for i in range(12):
        messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": f"Conversation {i}: where is office {i}?"}]
        if i == 5:
            extra = {"X-Agentlab-Conversation-Id": "named-5"}
        else:
            extra = {}
        answer, headers = _ask(client, messages, extra_headers=extra)
        messages.append({"role": "assistant", "content": answer})
        histories.append((messages, headers["x-agentlab-conversation-id"]))
        server.settle()  # the answer committed: the conversation is idle, so evictable
        live = {c for _, c in backend.table.live}
        # Only the three most recent conversations are in memory, and the index holds nothing else.
        assert len(live) == min(i + 1, 3) and live == {c for _, c in histories[-3:]}
        assert {c for _, c in store.conversations} == live
        assert set().union(*store.prefixes.values()) == live
        assert len(store.prefixes) <= 3 * 3  # three messages a conversation
    assert backend.evictions == 9
    # An evicted conversation comes back by its history (prefix) and by its name (header), and its
    # ledger continues where it was.
    for index, extra in ((0, {}), (5, {"X-Agentlab-Conversation-Id": "named-5"})):
        messages, conversation_id = histories[index]
        messages.append({"role": "user", "content": "And is it open today?"})
        answer, headers = _ask(client, messages, extra_headers=extra)
        assert headers["x-agentlab-conversation-id"] == conversation_id
        assert headers["x-agentlab-key-source"] == ("prefix" if not extra else "header")
        ledger = server.ledger(conversation_id)
        assert [e.role for e in ledger] == ["system", "user", "assistant", "user", "assistant"]
        assert ledger[-1].message.content == answer
    calls = server.calls()
    assert list(calls["ledger_mode"].tail(2)) == ["append", "append"]
    assert calls["session_id"].nunique() == 12  # no conversation was split into a second session


def test_an_evicted_conversation_still_makes_a_shared_prefix_ambiguous(proxy) -> None:
    server = proxy("passthrough", max_conversations=1)
    first = [SYSTEM, FIRST]
    ids = []
    for name in ("one", "two"):  # two conversations with the same first turn, named apart
        answer, headers = _ask(_client(server, "caller"), first, extra_headers={"X-Agentlab-Conversation-Id": name})
        ids.append(headers["x-agentlab-conversation-id"])
        server.settle()
    assert server.app.backend.evictions == 1  # "one" is on disk only
    # The same answer in both: a follow-up without a name matches both histories, so it is a new
    # conversation, not a guess; the evicted one counts as much as the live one.
    follow = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "Sure?"}]
    _, headers = _ask(_client(server, "caller"), follow)
    assert headers["x-agentlab-key-source"] == "new-ambiguous" and headers["x-agentlab-conversation-id"] not in ids


def test_concurrent_conversations_share_ledger_commits_and_each_reads_back_whole(proxy) -> None:
    # Eight conversations at once: their turns go into the ledger in shared commits (the linger
    # gathers them, and a new conversation's session row goes in with its first events), yet each
    # ledger reads back complete and in order, from memory and from the file.
    import threading

    server = proxy("passthrough", ledger_linger=0.05)
    sessions = server.app.sessions
    batches = _count_batches(server)
    created: list[str] = []
    create = sessions.create_session

    async def counted_create(*args: Any, **kwargs: Any) -> Any:
        created.append(args[2])
        return await create(*args, **kwargs)

    sessions.create_session = counted_create
    ids: dict[int, str] = {}

    def converse(i: int) -> None:
        client = _client(server, "caller")
        messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": f"Caller {i}: where is Lisbon?"}]
        for turn in range(3):
            answer, headers = _ask(client, messages)
            ids[i] = headers["x-agentlab-conversation-id"]
            messages += [{"role": "assistant", "content": answer},
                         {"role": "user", "content": f"Caller {i}, follow-up {turn}."}]

    threads = [threading.Thread(target=converse, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    server.settle()
    assert len(set(ids.values())) == 8 and created == []  # no session got a commit of its own
    assert sum(batches) == 8 * 7  # per caller: system + user, its answer, then a user turn and its answer twice
    assert len(batches) <= 8 * 6 // 2  # 48 writes (a turn, an answer, three times each) in at most 24 commits
    for i, conversation in ids.items():
        ledger = server.ledger(conversation)
        assert [e.role for e in ledger] == ["system", "user", "assistant"] + ["user", "assistant"] * 2
        assert ledger[1].message.content == f"Caller {i}: where is Lisbon?"


def test_one_conversations_turns_share_ledger_commits(proxy) -> None:
    # One client, turns back to back: each turn's messages and answer are written while the next
    # turn is already on its way. They go into shared commits, in order; a conversation's write
    # that waited for the commit of the one before committed one write per linger, so the ledger
    # fell further behind the client at every call (12 commits here, 12 lingers behind).
    server = proxy("passthrough", ledger_linger=1.0)
    batches = _count_batches(server)
    client = _client(server, "caller")
    messages: list[dict[str, Any]] = [SYSTEM, FIRST]
    conversation = None
    for turn in range(6):
        answer, headers = _ask(client, messages)
        conversation = headers["x-agentlab-conversation-id"]
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"Follow-up {turn}."}]
    server.settle()
    assert sum(batches) == 2 + 1 + 5 * 2  # system + user, the answer, then five turns and their answers
    assert len(batches) <= 6, batches  # 12 writes
    assert conversation is not None
    ledger = server.ledger(conversation)
    assert [e.role for e in ledger] == ["system", "user", "assistant"] + ["user", "assistant"] * 5
    assert [e.message.content for e in ledger if e.role == "user"][1:] == [f"Follow-up {t}." for t in range(5)]
