"""``<arm>+recall`` of a clearing arm: recall searches what the arm cleared, not only what it left out.

A tool-clearing arm keeps a cleared result under its id with a placeholder (or a truncation) in
place of its content; :func:`agentlab.policies.arms.hidden_history` counts such an event as hidden, so
``HiddenRecall`` preloads its original text. Before, only events absent from the request counted,
and the ``+recall`` of every clearing arm sent exactly what the arm sent.
"""

from __future__ import annotations

from typing import Any

import pytest

import agentlab.policies.arms as arms
from agentlab.bench.config import Settings
from agentlab.bench.datasets.qmsum import Meeting, QMSumCase, TextSpan, TranscriptTurn
from agentlab.bench.retention.delivery import question_event
from agentlab.bench.retention.questions import Question, measure_retention
from agentlab.bench.tasks.qmsum_delivery import qmsum_tool_delivery, qmsum_tool_evidence
from agentlab.compaction import CompactionPolicy
from agentlab.core import project
from agentlab.core.project import replaced_in_request
from agentlab.events import Event, Message
from agentlab.model.base import ModelInfo
from agentlab.policies import POLICIES, mechanism
from agentlab.session.base import Session

ZEBRA = "Turn 0 is about the zebra budget: Alice wants forty-two thousand for the zebra enclosure"
QUESTION = "What did Alice want for the zebra budget?"


def meeting(turns: list[str]) -> Meeting:
    return Meeting("Toy001", "Product", tuple(TranscriptTurn(f"Speaker {i % 3}", t) for i, t in enumerate(turns)),
                   (), (), ())


def small_meeting() -> Meeting:
    """12 turns, read 3 per call: the zebra turn is in the first (oldest) read."""
    topics = ["remote control colour", "penguin marketing", "battery life"]
    rest = [f"Turn {i} is about the {topics[i % 3]} and nothing else " + "filler words " * 20 for i in range(1, 12)]
    return meeting([ZEBRA + " " + "filler words " * 20, *rest])


def big_meeting() -> Meeting:
    """One huge turn (over Codex's 10,000-token output limit) with the zebra sentence in its middle."""
    pad = "the remote control needs a colour and a battery " * 900
    return meeting([pad + ZEBRA + ". " + pad, "Turn 1 closes the meeting."])


def section(name: str, **values: Any) -> Any:
    return POLICIES[name].policy_class(**values)


#: Each clearing arm with the settings that make it fire on a short reading (its source's defaults
#: fire at 100,000 tokens or 0.9 of the window) and the meeting it clears a read of.
CLEARING: dict[str, tuple[dict[str, Any], Any]] = {
    "compaction": ({"compaction": CompactionPolicy(tool_result_max_tokens=50)}, small_meeting),
    "langchain_clear_tool_uses": ({"langchain_clear_tool_uses": section("langchain_clear_tool_uses", trigger=100,
                                                                        keep=1)}, small_meeting),
    "anthropic_clear_tool_uses": ({"anthropic_clear_tool_uses": section("anthropic_clear_tool_uses",
                                                                        trigger_value=100, keep=1)}, small_meeting),
    "inspect_edit": ({"inspect_edit": section("inspect_edit", threshold=100, keep_tool_uses=1)}, small_meeting),
    "codex_truncation": ({}, big_meeting),
}


def texts(request: Any) -> list[str]:
    return [m.content for m in request.messages]


async def projected(arm: arms.Arm, settings: Settings, events: list[Event], tools: Any) -> Any:
    session = Session("a", "u", "s", events=list(events))
    return await project(session, arm.mechanisms(settings, None), question_event("s", QUESTION, events),
                         ModelInfo("m", 0), tools=tools, context_window=8192)


@pytest.mark.parametrize("name", sorted(CLEARING))
async def test_a_clearing_arms_recall_preloads_the_cleared_results_original(name: str) -> None:
    values, make = CLEARING[name]
    settings = Settings(values)
    td = qmsum_tool_delivery(make(), "s", chunk_turns=3)
    events = list(td.events)
    zebra_read = next(e for e in events if e.is_tool_result() and "zebra enclosure" in e.text)
    lossy, recalled = arms.get_arm(name), arms.get_arm(name + arms.RECALL_SUFFIX)

    cleared = await projected(lossy, settings, events, td.tools)
    # The arm keeps the read under its id but not its content: the fact is nowhere in its request.
    shown = {e.id: e for e in cleared.draft.events}
    assert zebra_read.id in shown and replaced_in_request(shown[zebra_read.id], zebra_read)
    assert not any("forty-two thousand" in t for t in texts(cleared.request))

    result = await projected(recalled, settings, events, td.tools)
    [block] = [t for t in texts(result.request) if arms.HIDDEN_RECALL_HEADER in t]
    assert "forty-two thousand for the zebra enclosure" in block.split(arms.HIDDEN_RECALL_HEADER)[1]
    [stat] = [s["hidden_recall"] for s in result.draft.stats if "hidden_recall" in s]
    assert zebra_read.id in stat["hits"]
    # Recall adds text only: the history the model is shown, tool calls and results paired, is the arm's.
    assert [(e.id, e.message) for e in result.draft.events] == [(e.id, e.message) for e in cleared.draft.events]


def test_hidden_history_counts_left_out_and_replaced_events_only() -> None:
    a, b, c = (Event(author="user", choices=[Message.user(t)], id=i, invocation_id="old")
               for i, t in (("a", "alpha"), ("b", "beta"), ("c", "gamma")))
    session = Session("a", "u", "s", events=[a, b, c])
    inv = type("Inv", (), {"session": session, "filter_key": "", "id": "now"})()
    draft = type("Draft", (), {"events": [b.copy_with(choices=[Message.user("[cleared]")]),
                                          c.copy_with(metadata={"note": "same message"})]})()
    assert [e.id for e in arms.hidden_history(inv, draft)] == ["a", "b"]  # type: ignore[arg-type]


async def test_retention_of_langchain_clearing_with_recall_exceeds_the_arms() -> None:
    settings = Settings({"langchain_clear_tool_uses": section("langchain_clear_tool_uses", trigger=100, keep=1)})
    m = small_meeting()
    td = qmsum_tool_delivery(m, "s", chunk_turns=3)
    case = QMSumCase("Toy001_specific_01", m, "specific", QUESTION, "forty-two thousand", (TextSpan(0, 0),))
    question = Question(case.case_id, QUESTION, qmsum_tool_evidence(case, td.events))

    async def retained(name: str) -> float | None:
        [row] = await measure_retention(list(td.events), [question], arms.get_arm(name), session_id="s",
                                        delivery="tool_results", tools=td.tools, settings=settings)
        return row.retained

    lossy = await retained("langchain_clear_tool_uses")
    recalled = await retained("langchain_clear_tool_uses+recall")
    assert lossy == 0.0 and recalled == 1.0


def test_only_recall_arms_carry_the_hidden_scope_in_their_run_config() -> None:
    assert arms.get_arm("compaction+recall").identity == arms.RECALL_IDENTITY
    assert all(not arm.identity for arm in arms.ARMS.values())  # every registered arm's id stays as it was


#: Run ids main's code (ccd5ea4, before the hidden scope) gave ``demo --arm compaction+recall --limit 2
#: --model openai:gpt-4o-mini`` (scripted window 32,768, no cases run).
MAIN_IDS = {"long_context": "803516e41d2eff79", "compaction": "07135cb0adb77ca4", "compaction+recall": "ab6a04562f53055d"}


def test_a_recall_arms_run_id_moves_and_its_partners_do_not(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from run_id_commands import MODEL, SCRIPTED_WINDOW, scripted_and_no_cases

    from agentlab.bench.spec import load_selection, resolve_run

    monkeypatch.setenv("AGENTLAB_CACHE_DB", str(tmp_path / "cache.duckdb"))
    with scripted_and_no_cases():
        spec = resolve_run("demo", mode="compaction+recall", limit=2, model=MODEL)
        assert spec.task is not None
        bound = spec.bind(ModelInfo(spec.model_spec, SCRIPTED_WINDOW, "scripted"),
                          load_selection(spec.task, spec.settings).dataset_sha256)
        ids = bound.run_ids()
        configs = {mode: bound.run_config(mode) for mode in bound.modes}
    assert {m: c.get("arm") for m, c in configs.items()} == {
        "long_context": None, "compaction": None, "compaction+recall": {"hidden_scope": "absent_or_replaced", "excerpt": "query_window"}}
    assert ids["long_context"] == MAIN_IDS["long_context"] and ids["compaction"] == MAIN_IDS["compaction"]
    assert ids["compaction+recall"] != MAIN_IDS["compaction+recall"]


def test_the_recalled_excerpt_is_the_querys_window_of_a_long_text() -> None:
    assert arms.recalled_excerpt("short\ntext", "zebra", 100) == "short\ntext"  # fits: as it is
    text = "colour " * 400 + ZEBRA + " battery " * 400
    excerpt = arms.recalled_excerpt(text, QUESTION, 300)
    assert len(excerpt) <= 300 and "forty-two thousand for the zebra enclosure" in excerpt
    assert excerpt.startswith("...") and excerpt.endswith("...")
    head = arms.recalled_excerpt(text, "nothing matches here", 300)
    assert head.startswith("colour colour") and head.endswith("...") and len(head) <= 300
    assert arms.recalled_excerpt(text, QUESTION, 0) == ""


async def test_the_projection_report_names_what_a_peer_policy_replaced() -> None:
    td = qmsum_tool_delivery(small_meeting(), "s", chunk_turns=3)
    events = list(td.events)
    result = await project(Session("a", "u", "s", events=events),
                           [mechanism("langchain_clear_tool_uses", trigger=100, keep=1)],
                           question_event("s", QUESTION, events), ModelInfo("m", 0), tools=td.tools, context_window=8192)
    [report] = result.reports
    reads = [e.id for e in events if e.is_tool_result()]
    assert report.replaced == {i: "policy:langchain_clear_tool_uses" for i in reads[:-1]}  # all but the kept last read


def test_the_excerpt_window_holds_the_most_keywords_any_candidate_window_does() -> None:
    import random
    import re

    rng = random.Random(7)
    words = ["zebra", "budget", "penguin", "colour", "filler", "battery", "remote"]
    query = "zebra budget penguin"
    for _ in range(200):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 200)))
        runes = rng.randint(30, 120)
        excerpt = arms.recalled_excerpt(text, query, runes)
        assert len(excerpt) <= runes

        def distinct(window: str) -> int:
            return len({m.group() for m in re.finditer("zebra|budget|penguin", window)})

        if len(text) <= runes:
            assert excerpt == text
            continue
        candidates = [max(0, min(m.start() - runes // 4, len(text) - runes))
                      for m in re.finditer("zebra|budget|penguin", text)] or [0]
        best = max(distinct(text[s:s + runes]) for s in candidates)
        start = min(s for s in candidates if distinct(text[s:s + runes]) == best)
        assert excerpt.strip(".") in text[start:start + runes] and excerpt.strip(".")
