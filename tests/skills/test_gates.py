"""The optional gates (each passing and refusing), the human approval queue, and a crash between review and publish."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlab.events import user_event
from agentlab.model.scripted import ScriptedModel
from agentlab.skills import CURSOR_KEY, PENDING_KEY, EvolutionPolicy
from agentlab.skills.gates import effectiveness_check, safety_check, spec_check
from agentlab.skills.publish import SkillPublisher
from agentlab.skills.review import Proposal
from tests.skills.desk import TLS_STEPS, Desk, make_desk, proposal, recovering_run

ALL_CHECKS = EvolutionPolicy(spec_check=True, safety_check=True, effectiveness_check=True)


async def _review(tmp_path: Path, policy: EvolutionPolicy, reply: str, replies: list[Any] | None = None) -> Desk:
    desk = make_desk(tmp_path / "skills", policy)
    desk.reviewer.add(reply)
    await desk.run("TLS handshakes to pay.example.com fail (ticket 48213, ops@acme.example).",
                   replies or recovering_run())
    return desk


async def test_every_configured_check_runs_and_a_passing_proposal_is_published(tmp_path: Path) -> None:
    desk = await _review(tmp_path, ALL_CHECKS, proposal())
    result = desk.service.results[-1]
    assert result.status == "published", result.reason
    assert [g.gate for g in result.gates] == ["spec", "safety", "effectiveness"] and all(g.passed for g in result.gates)
    assert "after the checks spec, safety, effectiveness" in result.reason


@pytest.mark.parametrize(("reply", "gate", "words"), [
    (proposal(name="TLS Triage"), "spec", "not lower-case words"),
    (proposal(description=""), "spec", "no 'description:'"),
    (proposal(instructions="1. Read the certificate of pay.example.com first."), "safety", "pay.example.com"),
    (proposal(instructions="1. Quote ticket 48213 when you escalate."), "safety", "48213"),
    (proposal(instructions="1. Mail ops@acme.example."), "safety", "ops@acme.example"),
    (proposal(instructions="1. Log in with api_key=sk-abcdefghijklmnopqrstuv."), "safety", "API key"),
    (proposal(instructions="1. Use password: hunter22."), "safety", "password or token value"),
])
async def test_a_failing_check_rejects_the_proposal_and_the_cursor_moves(tmp_path: Path, reply: str, gate: str,
                                                                        words: str) -> None:
    desk = await _review(tmp_path, ALL_CHECKS, reply)
    result = desk.service.results[-1]
    assert result.status == "rejected" and f"the {gate} gate refused" in result.reason and words in result.reason
    assert desk.repository.names() == []
    session = await desk.sessions.get_session("desk", "alice", "t1")
    assert session is not None and session.state[CURSOR_KEY] == session.events[-1].id


async def test_the_effectiveness_check_refuses_a_run_whose_last_call_failed(tmp_path: Path) -> None:
    failing = [ScriptedModel.tool_call("read_certificate", {"host": "a"}),
               ScriptedModel.tool_call("check_network", {"host": "a"}),
               ScriptedModel.tool_call("read_certificate", {"host": "a"}),
               ScriptedModel.tool_call("check_network", {"host": "a"}), "I could not reach the host."]
    desk = await _review(tmp_path, EvolutionPolicy(effectiveness_check=True), proposal(), failing)
    result = desk.service.results[-1]
    assert result.evidence.kinds() == ["repeated_tool_coordination"]
    assert result.status == "rejected" and "last tool call failed" in result.reason


def test_gate_functions_directly() -> None:
    good = Proposal("create", "tls-triage", "Diagnose TLS.", TLS_STEPS)
    assert spec_check(good, 4000).passed and not spec_check(good, 10).passed
    assert safety_check(good, [], "alice").passed
    assert not safety_check(Proposal("create", "x", "For alice only.", "steps"), [], "alice").passed
    assert not effectiveness_check([]).passed  # no final answer
    said = [user_event("Hi, my name is Carla Diaz and TLS fails.")]
    refused = safety_check(Proposal("create", "x", "TLS.", "1. Greet Carla Diaz first."), said, "u1")
    assert not refused.passed and "carla diaz" in refused.reason
    assert safety_check(Proposal("create", "x", "TLS.", "1. Greet the user."), said, "u1").passed


def test_the_policies_round_trip_through_json() -> None:
    from agentlab.skills import SkillsPolicy

    for policy in (EvolutionPolicy(spec_check=True, correction_cues=("nope",)), SkillsPolicy(profile="workspace")):
        assert type(policy).from_json(policy.to_json()) == policy
    with pytest.raises(ValueError, match="coordination_repeats must be at least 2"):
        EvolutionPolicy(coordination_repeats=1)


async def test_an_unconfigured_check_does_not_run(tmp_path: Path) -> None:
    desk = await _review(tmp_path, EvolutionPolicy(spec_check=True),
                         proposal(instructions="1. Read the certificate of pay.example.com first."))
    result = desk.service.results[-1]
    assert result.status == "published" and [g.gate for g in result.gates] == ["spec"]


async def test_human_approval_parks_the_candidate_then_approval_publishes_it(tmp_path: Path) -> None:
    desk = await _review(tmp_path, EvolutionPolicy(spec_check=True, human_approval=True), proposal())
    result = desk.service.results[-1]
    assert result.status == "awaiting_approval" and "checks passed: spec" in result.reason
    assert desk.repository.names() == [] and result.candidate is not None
    pending = desk.service.approvals.pending()
    assert [c.id for c in pending] == [result.candidate.id]
    revision = desk.service.approve(result.candidate.id)
    assert revision.number == 1 and desk.repository.names() == ["tls-triage"]
    assert desk.service.approvals.pending() == []
    assert desk.service.approvals.get(result.candidate.id).status == "approved"
    with pytest.raises(ValueError, match="already approved"):
        desk.service.approve(result.candidate.id)


async def test_human_rejection_publishes_nothing_and_keeps_the_reason(tmp_path: Path) -> None:
    desk = await _review(tmp_path, EvolutionPolicy(human_approval=True), proposal())
    candidate = desk.service.results[-1].candidate
    assert candidate is not None
    rejected = desk.service.reject(candidate.id, "too specific")
    assert rejected.status == "rejected" and rejected.reason == "too specific"
    assert desk.repository.names() == [] and desk.service.approvals.pending() == []
    with pytest.raises(KeyError, match="pending: none"):
        desk.service.approve("prop-unknown")


async def test_a_crash_before_the_revision_is_written_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    desk = make_desk(tmp_path / "skills")
    desk.reviewer.add(proposal())
    real = SkillPublisher.publish

    def crash(self: SkillPublisher, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("power cut")

    monkeypatch.setattr(SkillPublisher, "publish", crash)
    await desk.run("TLS handshakes to pay.example.com fail.", recovering_run())
    assert list(desk.service.results) == []  # the pass died
    session = await desk.sessions.get_session("desk", "alice", "t1")
    assert session is not None and isinstance(session.state[PENDING_KEY], dict) and CURSOR_KEY not in session.state
    monkeypatch.setattr(SkillPublisher, "publish", real)
    resumed = await desk.service.review_session("desk", "alice", "t1")
    assert resumed.status == "published" and "resumed a pending publication" in resumed.reason
    assert desk.reviewer.calls == 1  # the proposal was kept, not asked for again
    assert [r.number for r in desk.service.publisher.history("tls-triage")] == [1]
    session = await desk.sessions.get_session("desk", "alice", "t1")
    assert session is not None and session.state[PENDING_KEY] is None
    assert session.state[CURSOR_KEY] == session.events[-1].id


async def test_a_crash_after_the_revision_is_written_does_not_publish_twice(tmp_path: Path) -> None:
    desk = make_desk(tmp_path / "skills")
    desk.reviewer.add(proposal())
    real_update = desk.sessions.update_state

    async def crash_on_cursor(session: Any, delta: dict[str, Any]) -> None:
        if PENDING_KEY in delta and delta[PENDING_KEY] is None:
            raise RuntimeError("power cut after the publish")
        await real_update(session, delta)

    desk.sessions.update_state = crash_on_cursor  # type: ignore[method-assign]
    await desk.run("TLS handshakes to pay.example.com fail.", recovering_run())
    assert [r.number for r in desk.service.publisher.history("tls-triage")] == [1]
    desk.sessions.update_state = real_update  # type: ignore[method-assign]
    resumed = await desk.service.review_session("desk", "alice", "t1")
    assert resumed.status == "published" and "was already published as revision 1" in resumed.reason
    assert resumed.revision is not None and resumed.revision.already_published
    assert [r.number for r in desk.service.publisher.history("tls-triage")] == [1]
    assert desk.reviewer.calls == 1
    again = await desk.service.review_session("desk", "alice", "t1")
    assert again.status == "skipped" and again.reason == "no new events since the last review"


def test_a_crash_between_the_history_and_skill_md_is_repaired(tmp_path: Path) -> None:
    from agentlab.skills import SkillRepository

    repository = SkillRepository(tmp_path)
    publisher = SkillPublisher(repository)
    publisher.publish(Proposal("create", "tls-triage", "Diagnose TLS.", TLS_STEPS), "prop-1")
    (tmp_path / "tls-triage" / "SKILL.md").unlink()  # as if the crash came before this write
    again = publisher.publish(Proposal("create", "tls-triage", "Diagnose TLS.", TLS_STEPS), "prop-1")
    assert again.already_published and repository.require("tls-triage").instructions == TLS_STEPS
    assert len(publisher.history("tls-triage")) == 1
