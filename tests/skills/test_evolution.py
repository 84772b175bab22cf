"""The evolution service: weak runs skipped without a model call, direct publication, the next run loads it,
reconciliation, review errors, the cursor, and evolution never writing memory.
"""

from __future__ import annotations

import ast
from pathlib import Path

from agentlab.memory import InMemoryMemoryService
from agentlab.model.scripted import ScriptedModel
from agentlab.skills import CURSOR_KEY, PENDING_KEY, EvolutionPolicy, Proposal, reconcile
from agentlab.skills.repository import Skill
from tests.skills.desk import TLS_DESCRIPTION, TLS_STEPS, Desk, make_desk, proposal, recovering_run


async def test_a_weak_run_is_skipped_without_a_model_call_and_the_cursor_moves(desk: Desk) -> None:
    await desk.run("What is TLS?", ["A protocol for encrypted connections."])
    result = desk.service.results[-1]
    assert result.status == "skipped" and "weak evidence" in result.reason and result.model_calls == 0
    assert desk.reviewer.calls == 0
    session = await desk.sessions.get_session("desk", "alice", "t1")
    assert session is not None and session.state[CURSOR_KEY] == session.events[-1].id
    assert desk.repository.names() == []


async def test_a_strong_run_is_published_directly_when_no_gate_is_configured(desk: Desk) -> None:
    desk.reviewer.add(proposal())
    await desk.run("TLS handshakes to pay.example.com fail.", recovering_run())
    result = desk.service.results[-1]
    assert result.status == "published", result.reason
    assert "directly (no gate is configured)" in result.reason
    assert result.evidence.kinds() == ["recovery_after_failure"] and desk.reviewer.calls == 1
    assert result.revision is not None and result.revision.number == 1
    skill = desk.repository.require("tls-triage")
    assert skill.description == TLS_DESCRIPTION and skill.instructions == TLS_STEPS
    review_prompt = desk.reviewer.requests[0].messages[1].content
    assert "check_network returned: error: RuntimeError: connection timed out" in review_prompt
    assert "recovery_after_failure" in review_prompt
    session = await desk.sessions.get_session("desk", "alice", "t1")
    assert session is not None and session.state[PENDING_KEY] is None
    assert session.state[CURSOR_KEY] == session.events[-1].id


async def test_a_published_skill_is_listed_and_loaded_by_the_next_run(desk: Desk) -> None:
    desk.reviewer.add(proposal())
    await desk.run("TLS handshakes to pay.example.com fail.", recovering_run())
    await desk.run("TLS fails on shop.example.org.", [ScriptedModel.tool_call("skill_load", {"name": "tls-triage"}),
                                                      "Following tls-triage."], user="bob", session="t2")
    first, second = desk.agent_model.requests[-2:]
    assert "- tls-triage: " + TLS_DESCRIPTION in first.messages[0].content
    assert TLS_STEPS.splitlines()[0] not in first.messages[0].content
    assert any(TLS_STEPS.splitlines()[0] in m.content for m in second.messages if m.role == "tool")


async def test_the_cursor_limits_the_next_review_to_the_new_events(desk: Desk) -> None:
    desk.reviewer.add(proposal())
    await desk.run("TLS handshakes to pay.example.com fail.", recovering_run())
    await desk.run("Thanks!", ["You are welcome."])
    result = desk.service.results[-1]
    assert result.status == "skipped" and result.events_read == 2 and desk.reviewer.calls == 1


async def test_an_update_writes_a_new_revision_and_keeps_the_history(desk: Desk) -> None:
    desk.reviewer.add(proposal(), proposal(action="update", instructions="1. Certificate expiry first.\n2. Then DNS."))
    await desk.run("TLS handshakes to pay.example.com fail.", recovering_run())
    await desk.run("Again: TLS fails.", recovering_run())
    history = desk.service.publisher.history("tls-triage")
    assert [r.number for r in history] == [1, 2] and [r.action for r in history] == ["create", "update"]
    assert TLS_STEPS in desk.service.publisher.revision_text("tls-triage", 1)
    assert desk.repository.require("tls-triage").instructions == "1. Certificate expiry first.\n2. Then DNS."


async def test_reconciliation_turns_a_near_duplicate_into_an_update_of_the_library_skill(desk: Desk) -> None:
    desk.reviewer.add(proposal(), proposal(name="tls-handshake-triage",
                                           description="Diagnose TLS handshake failures of a host."))
    await desk.run("TLS handshakes to pay.example.com fail.", recovering_run())
    await desk.run("Again: TLS fails.", recovering_run())
    result = desk.service.results[-1]
    assert result.status == "published" and result.proposal is not None
    assert result.proposal.name == "tls-triage" and result.proposal.action == "update"
    assert "near-duplicate of 'tls-triage'" in result.proposal.notes[0]
    assert desk.repository.names() == ["tls-triage"]


def test_reconcile_same_name_unknown_update_and_a_distinct_skill(tmp_path: Path) -> None:
    library = [Skill("tls-triage", TLS_DESCRIPTION, "x", tmp_path)]
    same = reconcile(Proposal("create", "tls-triage", "Something else entirely.", "y"), library, 0.5)
    assert same.action == "update" and "create became update" in same.notes[0]
    unknown = reconcile(Proposal("update", "dns-fix", "Repair broken DNS records.", "y"), library, 0.5)
    assert unknown.action == "create" and "update became create" in unknown.notes[0]
    distinct = reconcile(Proposal("create", "disk-full", "Free disk space on a full volume.", "y"), library, 0.5)
    assert distinct.action == "create" and distinct.notes == ()


async def test_a_none_proposal_is_a_skip_that_moves_the_cursor(desk: Desk) -> None:
    desk.reviewer.add(proposal(action="none", reason="one-off"))
    await desk.run("TLS handshakes to pay.example.com fail.", recovering_run())
    result = desk.service.results[-1]
    assert result.status == "skipped" and "one-off" in result.reason and desk.repository.names() == []
    session = await desk.sessions.get_session("desk", "alice", "t1")
    assert session is not None and session.state[CURSOR_KEY] == session.events[-1].id


async def test_a_failed_review_keeps_the_cursor_so_the_delta_is_reviewed_again(desk: Desk) -> None:
    desk.reviewer.add("I think this is a good skill!", proposal())
    await desk.run("TLS handshakes to pay.example.com fail.", recovering_run())
    failed = desk.service.results[-1]
    assert failed.status == "error" and "cursor stays" in failed.reason
    session = await desk.sessions.get_session("desk", "alice", "t1")
    assert session is not None and CURSOR_KEY not in session.state
    retried = await desk.service.review_session("desk", "alice", "t1")
    assert retried.status == "published" and retried.events_read == failed.events_read
    assert desk.reviewer.calls == 2


async def test_evolution_never_writes_memory(tmp_path: Path) -> None:
    memory = InMemoryMemoryService()
    desk = make_desk(tmp_path / "skills", memory_service=memory)
    desk.reviewer.add(proposal())
    await desk.run("My name is Alice and TLS to pay.example.com fails.", recovering_run())
    assert desk.service.results[-1].status == "published"
    assert await memory.list("desk", "alice") == []
    package = Path(__file__).resolve().parents[2] / "agentlab" / "skills"
    imported: set[str] = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    assert imported and not any(m.startswith("agentlab.memory") for m in imported)


async def test_a_disabled_policy_reviews_nothing(tmp_path: Path) -> None:
    desk = make_desk(tmp_path / "skills", EvolutionPolicy(enabled=False))
    desk.reviewer.add(proposal())
    await desk.run("TLS handshakes to pay.example.com fail.", recovering_run())
    assert list(desk.service.results) == [] and desk.reviewer.calls == 0
