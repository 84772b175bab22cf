"""Tool-heavy delivery (agentlab/bench/retention/delivery.py): scripted reading trajectories and their evidence maps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentlab.bench.datasets.longmemeval import parse_file, write_longmemeval_fixture
from agentlab.bench.datasets.qmsum import Meeting, TranscriptTurn
from agentlab.bench.retention.delivery import Delivery
from agentlab.bench.tasks.qmsum_delivery import qmsum_tool_delivery, qmsum_tool_evidence


def real_data(name: str) -> bool:
    root = os.environ.get("AGENTLAB_DATA_DIR")
    return bool(root) and (Path(root) / name).is_dir()


def test_delivery_setting_checks_its_values() -> None:
    assert Delivery() == Delivery("turns", 40)
    assert Delivery.from_dict({"delivery": "tool_results", "chunk_turns": 7}) == Delivery("tool_results", 7)
    with pytest.raises(ValueError, match="delivery must be one of turns, tool_results"):
        Delivery("files")
    with pytest.raises(ValueError, match="chunk_turns must be >= 1"):
        Delivery("tool_results", 0)


def test_reading_trajectory_is_deterministic_and_paired() -> None:
    meeting = Meeting("M1", "Product", tuple(TranscriptTurn("A", f"line {i}") for i in range(7)), (), (), ())
    first, again = qmsum_tool_delivery(meeting, "s", 3), qmsum_tool_delivery(meeting, "s", 3)
    assert [e.to_json() for e in first.events] == [e.to_json() for e in again.events]
    events = first.events
    assert events[0].role == "user" and len(events) == 1 + 2 * 3  # reads of 3, 3 and 1 turns
    for call, result in zip(events[1::2], events[2::2], strict=True):
        assert call.is_tool_call() and result.is_tool_result()
        assert result.message.tool_call_id == call.message.tool_calls[0].id  # type: ignore[union-attr]
        assert result.request_id == call.request_id == events[0].request_id == first.reading_unit
    assert [e.timestamp for e in events] == sorted(e.timestamp for e in events)
    assert events[-1].metadata["turns"] == [6] and "[Turn 007] A: line 6" in events[-1].text


# ----------------------------------------------------------------- evidence maps cover every gold unit


@pytest.mark.skipif(not real_data("qmsum"), reason="AGENTLAB_DATA_DIR with qmsum/ not available")
def test_qmsum_tool_evidence_covers_every_span_turn() -> None:
    from agentlab.bench.datasets.qmsum import load_qmsum, select_cases

    for case in select_cases(load_qmsum(), limit=5):
        td = qmsum_tool_delivery(case.meeting, "s", chunk_turns=40)
        evidence = qmsum_tool_evidence(case, td.events)
        by_id = {e.id: e.text for e in td.events}
        assert len(evidence.units) == len(case.spans) and not evidence.missing
        turns = sum(len(u.pieces) for u in evidence.units)
        last = len(case.meeting.turns) - 1
        assert turns == sum(min(s.end, last) - s.start + 1 for s in case.spans)
        for unit in evidence.units:
            for piece in unit.pieces:
                assert piece.text in by_id[piece.event_id]
        # the scripted result is what the declared tool returns
        call = td.events[1].message.tool_calls[0]  # type: ignore[union-attr]
        assert td.tools[0].fn(**call.parsed_arguments()) == td.events[2].text  # type: ignore[attr-defined]


@pytest.mark.skipif(not real_data("locomo"), reason="AGENTLAB_DATA_DIR with locomo/ not available")
def test_locomo_tool_evidence_covers_every_resolvable_dia_id() -> None:
    from agentlab.bench.datasets.locomo import load_locomo
    from agentlab.bench.tasks.locomo_delivery import locomo_tool_delivery, locomo_tool_evidence

    for conversation in load_locomo().conversations[:3]:
        td = locomo_tool_delivery(conversation, "s")
        by_id = {e.id: e.text for e in td.events}
        turns = conversation.turn_by_dia_id()
        assert len(td.events) == 1 + 2 * len(conversation.sessions)
        for qa in conversation.qa:
            evidence = locomo_tool_evidence(qa, conversation, td.events)
            assert [u.unit_id for u in evidence.units] + list(evidence.missing) == list(dict.fromkeys(qa.evidence))
            for dia_id in evidence.missing:
                assert dia_id not in turns or not turns[dia_id].text.strip()
            for unit in evidence.units:
                assert unit.pieces[0].text.startswith(f"[{unit.unit_id}] ")
                assert unit.pieces[0].text in by_id[unit.pieces[0].event_id]


def test_longmemeval_evidence_covers_every_has_answer_turn_in_both_deliveries(tmp_path: Path) -> None:
    from agentlab.bench.tasks.longmemeval import haystack_events
    from agentlab.bench.tasks.longmemeval_delivery import (
        longmemeval_tool_delivery,
        longmemeval_tool_evidence,
        longmemeval_turn_evidence,
    )

    data = parse_file(write_longmemeval_fixture(tmp_path / "lme.json", 5))
    for item in data.questions:
        td = longmemeval_tool_delivery(item, "s")
        tool_map = longmemeval_tool_evidence(item, td.events)
        turn_map = longmemeval_turn_evidence(item, haystack_events(item))
        expected = [f"s{si}/t{ti}" for si, ti in item.evidence_turns()]
        assert [u.unit_id for u in tool_map.units] == [u.unit_id for u in turn_map.units] == expected
        assert not tool_map.missing and not turn_map.missing
        assert bool(expected) != item.is_abstention
        by_id = {e.id: e.text for e in td.events}
        for unit in tool_map.units:
            assert unit.pieces[0].text in by_id[unit.pieces[0].event_id]


