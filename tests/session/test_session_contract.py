"""One contract suite for every SessionService backend (in-memory and DuckDB)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agentlab.events import OBJ_STATE, OBJ_TOOL_RESPONSE, Event, Message, ToolCall, Usage, user_event
from agentlab.session import (
    FULL_SESSION_KEY,
    DuckDBSessionService,
    InMemorySessionService,
    Session,
    SessionService,
    Summary,
    SummaryBoundary,
)

APP = "app"
USER = "alice"


class CountingCounter:
    """A token counter that records every event it was asked to count."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, event: Event) -> int:
        self.calls.append(event.id)
        return 7 + len(event.text)


Factory = Callable[[CountingCounter], SessionService]


@pytest.fixture(params=["inmemory", "duckdb"])
def make_service(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    def make(counter: CountingCounter) -> SessionService:
        if request.param == "inmemory":
            return InMemorySessionService(token_counter=counter)
        return DuckDBSessionService(tmp_path / "sessions.duckdb", token_counter=counter)

    return make


@pytest.fixture
def counter() -> CountingCounter:
    return CountingCounter()


@pytest.fixture
async def service(make_service: Factory, counter: CountingCounter) -> AsyncIterator[SessionService]:
    svc = make_service(counter)
    yield svc
    await svc.close()


def assistant_event(text: str) -> Event:
    return Event(author="agent", choices=[Message.assistant(text)])


def tool_call_event(call_id: str, name: str, arguments: str) -> Event:
    return Event(author="agent", choices=[Message.assistant("", [ToolCall(call_id, name, arguments)])],
                 usage=Usage(prompt_tokens=120, completion_tokens=9, cached_tokens=64))


def tool_result_event(call_id: str, name: str, content: str) -> Event:
    return Event(author="agent", object=OBJ_TOOL_RESPONSE, choices=[Message.tool(call_id, name, content)])


# -- sessions -------------------------------------------------------------------------------------


async def test_backend_satisfies_protocol(service: SessionService) -> None:
    assert isinstance(service, SessionService)


async def test_create_with_explicit_and_generated_ids(service: SessionService) -> None:
    explicit = await service.create_session(APP, USER, "s1", state={"lang": "en"})
    generated = await service.create_session(APP, USER)
    assert explicit.id == "s1" and explicit.state == {"lang": "en"} and explicit.events == []
    assert generated.id and generated.id != "s1"
    fetched = await service.get_session(APP, USER, "s1")
    assert fetched is not None
    assert (fetched.app_name, fetched.user_id, fetched.id, fetched.state) == (APP, USER, "s1", {"lang": "en"})
    assert await service.get_session(APP, USER, generated.id) is not None


async def test_create_existing_id_raises_value_error(service: SessionService) -> None:
    await service.create_session(APP, USER, "dup")
    with pytest.raises(ValueError, match="already exists"):
        await service.create_session(APP, USER, "dup")
    # The same id under another user or app is a different session.
    await service.create_session(APP, "bob", "dup")
    await service.create_session("other-app", USER, "dup")


async def test_get_missing_session_returns_none(service: SessionService) -> None:
    assert await service.get_session(APP, USER, "nope") is None


async def test_append_to_missing_session_raises_key_error(service: SessionService) -> None:
    ghost = Session(app_name=APP, user_id=USER, id="ghost")
    with pytest.raises(KeyError, match="ghost"):
        await service.append_event(ghost, user_event("hi"))
    assert ghost.events == []


# -- ledger ---------------------------------------------------------------------------------------


async def test_events_round_trip_in_append_order(service: SessionService) -> None:
    session = await service.create_session(APP, USER, "s1")
    events = [
        user_event("What is the weather in Paris?"),
        tool_call_event("call-1", "get_weather", '{"city": "Paris", "units": "metric"}'),
        tool_result_event("call-1", "get_weather", '{"temp_c": 21, "sky": "clear ☀"}'),
        Event(author="agent", object=OBJ_STATE, state_delta={"last_city": "Paris", "visits": [1, 2]},
              metadata={"note": "state only"}),
        Event(author="agent", choices=[Message.assistant("It is 21 °C and clear.")],
              usage=Usage(prompt_tokens=300, completion_tokens=12), invocation_id="inv-1",
              request_id="req-1", filter_key="weather", metadata={"model": "scripted", "n": 1}),
        Event(author="agent", choices=[Message.assistant("partial")], error="boom", error_code="E1",
              done=False),
    ]
    for event in events:
        returned = await service.append_event(session, event)
        assert returned is event
    assert session.events == events

    fetched = await service.get_session(APP, USER, "s1")
    assert fetched is not None
    assert fetched.events == events  # dataclass equality: every field survived the round trip
    assert [e.id for e in fetched.events] == [e.id for e in events]
    assert fetched.events[1].message is not None
    assert fetched.events[1].message.tool_calls[0].parsed_arguments() == {"city": "Paris", "units": "metric"}
    assert fetched.events[1].usage == Usage(prompt_tokens=120, completion_tokens=9, cached_tokens=64)


async def test_ledger_is_not_changed_by_later_mutation_of_the_appended_event(service: SessionService) -> None:
    session = await service.create_session(APP, USER, "s1")
    event = user_event("original")
    await service.append_event(session, event)
    event.metadata["tampered"] = True
    fetched = await service.get_session(APP, USER, "s1")
    assert fetched is not None
    assert fetched.events[0].metadata == {}


async def test_token_count_is_computed_once_at_append(service: SessionService,
                                                      counter: CountingCounter) -> None:
    session = await service.create_session(APP, USER, "s1")
    first = await service.append_event(session, user_event("hello"))
    second = await service.append_event(session, assistant_event("hi there"))
    precounted = user_event("already counted")
    precounted.token_count = 99
    await service.append_event(session, precounted)

    assert counter.calls == [first.id, second.id]
    assert (first.token_count, second.token_count, precounted.token_count) == (12, 15, 99)

    fetched = await service.get_session(APP, USER, "s1")
    listed = await service.list_sessions(APP, USER)
    window = await service.get_event_window(APP, USER, "s1", second.id, before=1, after=1)
    assert counter.calls == [first.id, second.id], "reads must not recount tokens"
    assert fetched is not None
    assert [e.token_count for e in fetched.events] == [12, 15, 99]
    assert [e.token_count for e in listed[0].events] == [12, 15, 99]
    assert [e.token_count for e in window] == [12, 15, 99]


async def test_concurrent_appends_are_all_persisted_in_one_consistent_order(service: SessionService) -> None:
    session = await service.create_session(APP, USER, "busy")
    other = await service.create_session(APP, USER, "other")
    batch = [user_event(f"message {i}") for i in range(100)]
    side = [assistant_event(f"side {i}") for i in range(20)]

    await asyncio.gather(
        *(service.append_event(session, e) for e in batch),
        *(service.append_event(other, e) for e in side),
    )

    fetched = await service.get_session(APP, USER, "busy")
    assert fetched is not None
    stored_ids = [e.id for e in fetched.events]
    assert len(stored_ids) == 100 and set(stored_ids) == {e.id for e in batch}
    # The caller's Session object saw the appends in exactly the stored order.
    assert stored_ids == [e.id for e in session.events]
    fetched_other = await service.get_session(APP, USER, "other")
    assert fetched_other is not None
    assert [e.id for e in fetched_other.events] == [e.id for e in other.events]
    assert len(fetched_other.events) == 20


# -- state ----------------------------------------------------------------------------------------


async def test_state_delta_of_appended_events_and_update_state_are_merged(service: SessionService) -> None:
    session = await service.create_session(APP, USER, "s1", state={"a": 1, "b": 1})
    await service.append_event(session, Event(author="agent", object=OBJ_STATE, state_delta={"b": 2, "c": [3]}))
    assert session.state == {"a": 1, "b": 2, "c": [3]}
    await service.update_state(session, {"a": "x", "d": {"nested": True}})
    assert session.state == {"a": "x", "b": 2, "c": [3], "d": {"nested": True}}

    fetched = await service.get_session(APP, USER, "s1")
    assert fetched is not None
    assert fetched.state == {"a": "x", "b": 2, "c": [3], "d": {"nested": True}}
    assert fetched.events[0].state_delta == {"b": 2, "c": [3]}


async def test_update_state_of_missing_session_raises_key_error(service: SessionService) -> None:
    with pytest.raises(KeyError, match="ghost"):
        await service.update_state(Session(app_name=APP, user_id=USER, id="ghost"), {"a": 1})


# -- listing and deletion -------------------------------------------------------------------------


async def test_list_sessions_returns_only_that_users_sessions_with_events(service: SessionService) -> None:
    s1 = await service.create_session(APP, USER, "s1")
    s2 = await service.create_session(APP, USER, "s2", state={"k": "v"})
    await service.create_session(APP, USER, "empty")
    bob = await service.create_session(APP, "bob", "b1")
    elsewhere = await service.create_session("other-app", USER, "x1")
    for i in range(3):
        await service.append_event(s1, user_event(f"s1 turn {i}"))
    await service.append_event(s2, user_event("s2 turn"))
    await service.append_event(bob, user_event("bob says"))
    await service.append_event(elsewhere, user_event("elsewhere"))
    await service.write_summary(s2, FULL_SESSION_KEY, Summary(text="s2 summary", updated_at=1.0))

    listed = {s.id: s for s in await service.list_sessions(APP, USER)}
    assert set(listed) == {"s1", "s2", "empty"}
    assert [e.text for e in listed["s1"].events] == ["s1 turn 0", "s1 turn 1", "s1 turn 2"]
    assert [e.text for e in listed["s2"].events] == ["s2 turn"]
    assert listed["empty"].events == []
    assert listed["s2"].state == {"k": "v"}
    assert listed["s2"].summaries[FULL_SESSION_KEY].text == "s2 summary"
    assert await service.list_sessions(APP, "nobody") == []


async def test_delete_removes_session_events_and_summaries(service: SessionService) -> None:
    session = await service.create_session(APP, USER, "s1", state={"a": 1})
    keep = await service.create_session(APP, USER, "keep")
    anchor = await service.append_event(session, user_event("to be deleted"))
    await service.append_event(keep, user_event("stays"))
    await service.write_summary(session, FULL_SESSION_KEY, Summary(text="gone soon"))

    await service.delete_session(APP, USER, "s1")
    assert await service.get_session(APP, USER, "s1") is None
    assert await service.get_summary(session, FULL_SESSION_KEY) is None
    assert [s.id for s in await service.list_sessions(APP, USER)] == ["keep"]
    with pytest.raises(KeyError):
        await service.get_event_window(APP, USER, "s1", anchor.id)

    # The id can be reused and starts empty; deleting twice is harmless.
    reborn = await service.create_session(APP, USER, "s1")
    assert reborn.events == [] and reborn.state == {}
    fetched = await service.get_session(APP, USER, "s1")
    assert fetched is not None and fetched.events == [] and fetched.summaries == {}
    await service.delete_session(APP, USER, "never-existed")
    kept = await service.get_session(APP, USER, "keep")
    assert kept is not None and [e.text for e in kept.events] == ["stays"]


# -- event window ---------------------------------------------------------------------------------


async def _conversation(service: SessionService) -> list[Event]:
    """user, assistant(tool call), tool, assistant, user, assistant, user, assistant."""
    session = await service.create_session(APP, USER, "w")
    events = [
        user_event("u0"),
        tool_call_event("c1", "search", '{"q": "x"}'),
        tool_result_event("c1", "search", "r2"),
        assistant_event("a3"),
        user_event("u4"),
        assistant_event("a5"),
        user_event("u6"),
        assistant_event("a7"),
    ]
    for event in events:
        await service.append_event(session, event)
    return events


async def test_event_window_counts_events_around_the_anchor(service: SessionService) -> None:
    events = await _conversation(service)
    ids = [e.id for e in events]

    async def window(i: int, before: int, after: int, roles: list[str] | None = None) -> list[str]:
        got = await service.get_event_window(APP, USER, "w", ids[i], before=before, after=after, roles=roles)
        return [ids.index(e.id) for e in got]

    assert await window(3, 1, 1) == [2, 3, 4]
    assert await window(3, 2, 3) == [1, 2, 3, 4, 5, 6]
    assert await window(0, 2, 1) == [0, 1]  # clipped at the start
    assert await window(7, 1, 5) == [6, 7]  # clipped at the end
    assert await window(4, 0, 0) == [4]
    got = await service.get_event_window(APP, USER, "w", ids[2], before=1, after=1)
    assert got == events[1:4]  # full events come back, not just ids


async def test_event_window_role_filter_counts_only_matching_roles(service: SessionService) -> None:
    events = await _conversation(service)
    ids = [e.id for e in events]

    async def window(i: int, before: int, after: int, roles: list[str]) -> list[str]:
        got = await service.get_event_window(APP, USER, "w", ids[i], before=before, after=after, roles=roles)
        return [ids.index(e.id) for e in got]

    # Around a.3 counting only user/assistant: the tool result r2 is skipped, not counted.
    assert await window(3, 2, 2, ["user", "assistant"]) == [0, 1, 3, 4, 5]
    assert await window(5, 1, 1, ["user"]) == [4, 5, 6]
    assert await window(0, 3, 2, ["assistant"]) == [0, 1, 3]
    # The anchor is always part of the window, even when its role is filtered out.
    assert await window(2, 1, 1, ["user"]) == [0, 2, 4]
    assert await window(3, 5, 5, ["system"]) == [3]


async def test_event_window_missing_session_or_anchor_raises_key_error(service: SessionService) -> None:
    events = await _conversation(service)
    with pytest.raises(KeyError, match="no-such-event"):
        await service.get_event_window(APP, USER, "w", "no-such-event")
    with pytest.raises(KeyError, match="no such session"):
        await service.get_event_window(APP, USER, "missing", events[0].id)
    with pytest.raises(ValueError, match="before=-1"):
        await service.get_event_window(APP, USER, "w", events[0].id, before=-1)


# -- summaries ------------------------------------------------------------------------------------


async def test_summary_text_and_boundary_are_written_and_read_together(service: SessionService) -> None:
    session = await service.create_session(APP, USER, "s1")
    events = [await service.append_event(session, user_event(f"turn {i}")) for i in range(4)]
    assert await service.get_summary(session) is None

    first = Summary(
        text="Alice asked about turns 0-1.",
        updated_at=1000.5,
        boundary=SummaryBoundary(filter_key=FULL_SESSION_KEY, cutoff_at=events[1].timestamp,
                                 last_event_id=events[1].id),
        topics=("turns", "alice"),
    )
    await service.write_summary(session, FULL_SESSION_KEY, first)
    assert session.summaries[FULL_SESSION_KEY] == first
    assert await service.get_summary(session) == first
    # The store, not the caller's object, answers get_summary.
    stale = Session(app_name=APP, user_id=USER, id="s1")
    assert await service.get_summary(stale, FULL_SESSION_KEY) == first

    second = Summary(text="Turns 0-3.", updated_at=2000.0,
                     boundary=SummaryBoundary(cutoff_at=events[3].timestamp, last_event_id=events[3].id))
    await service.write_summary(session, FULL_SESSION_KEY, second)
    read_back = await service.get_summary(session)
    assert read_back == second
    assert read_back is not None and read_back.boundary is not None
    assert read_back.boundary.last_event_id == events[3].id and read_back.topics == ()

    fetched = await service.get_session(APP, USER, "s1")
    assert fetched is not None and fetched.summaries == {FULL_SESSION_KEY: second}
    assert fetched.events_after_boundary(read_back.boundary) == []


async def test_summaries_are_kept_per_filter_key(service: SessionService) -> None:
    session = await service.create_session(APP, USER, "s1")
    full = Summary(text="everything", updated_at=1.0)
    branch = Summary(text="weather branch", updated_at=2.0,
                     boundary=SummaryBoundary(filter_key="weather", last_event_id="ev-x", version=2))
    await service.write_summary(session, FULL_SESSION_KEY, full)
    await service.write_summary(session, "weather", branch)
    assert await service.get_summary(session, FULL_SESSION_KEY) == full
    assert await service.get_summary(session, "weather") == branch
    assert await service.get_summary(session, "missing") is None


async def test_write_summary_to_missing_session_raises_key_error(service: SessionService) -> None:
    ghost = Session(app_name=APP, user_id=USER, id="ghost")
    with pytest.raises(KeyError, match="ghost"):
        await service.write_summary(ghost, FULL_SESSION_KEY, Summary(text="x"))
    assert ghost.summaries == {}


async def test_cancelled_appends_leave_store_and_session_object_in_agreement(service: SessionService) -> None:
    session = await service.create_session(APP, USER, "s1")
    events = [user_event(f"m{i}") for i in range(60)]
    tasks = [asyncio.create_task(service.append_event(session, e)) for e in events]
    await asyncio.sleep(0)
    # Cancel some tasks while they write (task 0 leads the first batch) and some while they wait.
    for task in tasks[0:30:3]:
        task.cancel()
    await asyncio.sleep(0.002)
    for task in tasks[30::3]:
        task.cancel()
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)
    finished = {e.id for e, r in zip(events, results, strict=True) if r is e}
    assert len(finished) >= 40  # every task that was not cancelled completed

    fetched = await service.get_session(APP, USER, "s1")
    assert fetched is not None
    # A cancelled append is either fully in (store and object) or fully out; never half.
    assert [e.id for e in fetched.events] == [e.id for e in session.events]
    assert finished <= {e.id for e in fetched.events}
    # And the service still works afterwards.
    await service.append_event(session, user_event("after"))
    again = await service.get_session(APP, USER, "s1")
    assert again is not None and again.events[-1].text == "after"


async def test_a_failing_append_does_not_fail_concurrent_appends(service: SessionService) -> None:
    session = await service.create_session(APP, USER, "s1")
    ghost = Session(app_name=APP, user_id=USER, id="ghost")
    good = [user_event(f"ok {i}") for i in range(10)]
    results = await asyncio.gather(
        *(service.append_event(session, e) for e in good[:5]),
        service.append_event(ghost, user_event("lost")),
        *(service.append_event(session, e) for e in good[5:]),
        return_exceptions=True,
    )
    assert isinstance(results[5], KeyError)
    assert [r for i, r in enumerate(results) if i != 5] == good
    fetched = await service.get_session(APP, USER, "s1")
    assert fetched is not None and [e.id for e in fetched.events] == [e.id for e in session.events]
    assert len(fetched.events) == 10 and ghost.events == []


async def test_concurrent_state_deltas_are_all_applied_in_ledger_order(service: SessionService) -> None:
    session = await service.create_session(APP, USER, "s1", state={"start": True})
    deltas = [Event(author="agent", object=OBJ_STATE, state_delta={f"k{i}": i, "last": i}) for i in range(30)]
    chatter = [assistant_event(f"a{i}") for i in range(30)]
    await asyncio.gather(*(service.append_event(session, e) for pair in zip(deltas, chatter, strict=True)
                           for e in pair))

    fetched = await service.get_session(APP, USER, "s1")
    assert fetched is not None
    assert [e.id for e in fetched.events] == [e.id for e in session.events]
    last_writer = [e for e in session.events if e.state_delta][-1].state_delta["last"]
    expected = {"start": True, "last": last_writer, **{f"k{i}": i for i in range(30)}}
    assert session.state == expected
    assert fetched.state == expected
    assert [e.role for e in fetched.events if e.state_delta] == [None] * 30
