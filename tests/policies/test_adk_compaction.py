"""Google ADK token-threshold compaction: our core against ``google-adk``'s own functions.

The same seeded conversations become ADK events (the mapping in ``agentlab/policies/adk_compaction.py``),
some with one or two earlier compaction events in the stream; then ADK's selection
(``_events_to_compact_for_token_threshold``), its worth check, its request view
(``_process_compaction_events``), its token estimate and its summariser's formatting are compared
with ours.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentlab.events import Message
from agentlab.policies.adk_compaction import (
    AdkEvent,
    Compaction,
    content_of,
    estimate_prompt_tokens,
    events_to_compact,
    format_events,
    process_compaction_events,
    serialized_size,
    worth_compacting,
)
from tests.policies.conversations import conversation
from tests.policies.peers import require

adk_compaction = require("google.adk.apps.compaction", "google-adk")
adk_flow = require("google.adk.flows.llm_flows.context._compaction", "google-adk")
adk_summarizer = require("google.adk.apps.llm_event_summarizer", "google-adk")
adk_events = require("google.adk.events", "google-adk")
adk_actions = require("google.adk.events.event_actions", "google-adk")
genai_types = require("google.genai.types", "google-adk")

pytestmark = pytest.mark.peers
SEEDS = range(250)
AGENT = "agent"


def to_adk(events: list[AdkEvent]) -> list[Any]:
    out = []
    for i, e in enumerate(events):
        content = content_of(e)
        if e.compaction is not None:
            summary = genai_types.Content(role="model", parts=[genai_types.Part(text=e.compaction.summary)])
            out.append(adk_events.Event(author="user", invocation_id=f"compaction-{i}", actions=adk_events.EventActions(
                compaction=adk_actions.EventCompaction(start_timestamp=e.compaction.start,
                                                      end_timestamp=e.compaction.end, compacted_content=summary)),
                timestamp=e.timestamp))
            continue
        assert content is not None
        parts = []
        for part in content["parts"]:
            if "text" in part:
                parts.append(genai_types.Part(text=part["text"]))
            elif "function_call" in part:
                parts.append(genai_types.Part(function_call=genai_types.FunctionCall(**part["function_call"])))
            else:
                parts.append(genai_types.Part(function_response=genai_types.FunctionResponse(**part["function_response"])))
        out.append(adk_events.Event(author=e.author, invocation_id=f"inv-{i}", timestamp=e.timestamp,
                                    content=genai_types.Content(role=content["role"], parts=parts)))
    return out


def stream(seed: int) -> list[AdkEvent]:
    """A conversation as ADK events, with up to two compaction events inserted where ADK would append them."""
    rng = random.Random(seed * 101 + 9)
    messages: list[Message] = conversation(seed, max_rounds=7) + conversation(seed + 7_000, max_rounds=4)
    events = [AdkEvent(float(i + 1), m, author="user" if m.role == "user" else AGENT, source=i)
              for i, m in enumerate(messages)]
    for k in range(rng.choice((0, 0, 1, 1, 2))):
        # Ranges as ADK's own selection makes them: from a user turn (or the start) to a point with
        # no open call, so that no call is compacted away from its response.
        at = rng.randrange(1, len(events) + 1)
        raw = [e for e in events[:at] if e.compaction is None]
        open_ids: set[str | None] = set()
        ends = []
        for e in raw:
            assert e.message is not None
            open_ids -= {e.message.tool_call_id} if e.message.role == "tool" else set()
            open_ids |= {c.id for c in e.message.tool_calls}
            if not open_ids:
                ends.append(e.timestamp)
        starts = [raw[0].timestamp] + [e.timestamp for e in raw if e.message is not None and e.message.role == "user"]
        if not ends:
            continue
        end = rng.choice(ends)
        start = rng.choice([t for t in starts if t <= end] or [end]) if k else raw[0].timestamp
        events.insert(at, AdkEvent(end, compaction=Compaction(start, end, f"summary {k} " * rng.choice((rng.randint(1, 40), 1500))),
                                   author="user"))
    return events


def kind(e: Any) -> tuple[Any, ...]:
    """An ADK event, or ours, as (timestamp, author-or-summary, content dict)."""
    if isinstance(e, AdkEvent):
        if e.compaction is not None:
            return (e.timestamp, "summary", e.compaction.summary)
        return (e.timestamp, e.author, content_of(e))
    if e.actions and e.actions.compaction:  # a summary ADK materialized (its content is the summary)
        return (e.timestamp, "summary", e.content.parts[0].text if e.content else None)
    return (e.timestamp, e.author, e.content.model_dump(exclude_none=True))


@pytest.mark.parametrize("seed", SEEDS)
def test_selection_and_worth_check_match_adk(seed: int) -> None:
    ours_events = stream(seed)
    theirs_events = to_adk(ours_events)
    retention = random.Random(seed).choice((0, 1, 2, 3, 5, 10))
    ours = events_to_compact(ours_events, retention)
    theirs = adk_compaction._events_to_compact_for_token_threshold(events=theirs_events, event_retention_size=retention)
    assert [(e.timestamp, e.author, content_of(e)) for e in ours] == [
        (e.timestamp, e.author, e.content.model_dump(exclude_none=True)) for e in theirs]
    if ours:
        assert worth_compacting(ours_events, ours) == adk_compaction._is_range_worth_compacting(
            events=theirs_events, events_to_compact=theirs)


@pytest.mark.parametrize("seed", SEEDS)
def test_request_view_sizes_and_estimate_match_adk(seed: int) -> None:
    ours_events = stream(seed)
    theirs_events = to_adk(ours_events)
    ours = process_compaction_events(ours_events)
    theirs = adk_flow._process_compaction_events(theirs_events, AGENT)
    assert [kind(e) for e in ours] == [kind(e) for e in theirs]
    assert serialized_size(ours_events) == adk_compaction._serialized_size(theirs_events)
    assert estimate_prompt_tokens(ours_events) == adk_compaction._latest_prompt_token_count(
        theirs_events, agent_name=AGENT)


@pytest.mark.parametrize("seed", SEEDS)
def test_summariser_formatting_matches_adk(seed: int) -> None:
    ours_events = stream(seed)
    picked = events_to_compact(ours_events, 2)
    summarizer = adk_summarizer.LlmEventSummarizer(llm=None, prompt_template="{conversation_history}")
    assert format_events(picked) == summarizer._format_events_for_prompt(to_adk(picked))


def test_the_seeds_reach_every_branch() -> None:
    seeded = worth = empty = 0
    for seed in SEEDS:
        events = stream(seed)
        picked = events_to_compact(events, random.Random(seed).choice((0, 1, 2, 3, 5, 10)))
        empty += not picked
        seeded += bool(picked) and picked[0].author == "model"
        worth += bool(picked) and worth_compacting(events, picked)
    # A range ADK selects always removes more than the last summary when that summary is its seed
    # (the new range then contains the old one), so the "not worth it" side is not reached here.
    assert seeded > 30 and worth > 50 and empty > 1
