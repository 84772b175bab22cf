"""Progressive disclosure: the listing, skill_load / skill_read, the no-reload rule and the profiles."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentlab.model.scripted import ScriptedModel
from agentlab.runtime import LLMAgent, Runner
from agentlab.session import InMemorySessionService
from agentlab.skills import LOADED_KEY, SkillRepository, SkillsMechanism, SkillsPolicy
from agentlab.skills.mechanism import DOCS_READ_KEY
from agentlab.skills.repository import write_skill
from agentlab.skills.scripts import run_script

INSTRUCTIONS = "1. Read the certificate.\n2. Compare not_after with today.\n3. UNIQUE-MARKER-7781"


def _repo(root: Path) -> SkillRepository:
    write_skill(root, "tls-triage", "Diagnose TLS handshake failures.", INSTRUCTIONS,
                docs={"report.txt": "REPORT-FORMAT-DOC"},
                scripts={"check.py": "import os, sys\nprint('args', sys.argv[1:], 'skill', os.path.basename(os.environ['SKILL_DIR']))\n"
                                     "print('secret', os.environ.get('AGENTLAB_TEST_SECRET'))\n"})
    write_skill(root, "dns-lookup", "Resolve a host name step by step.", "1. Query the resolver. DNS-BODY")
    return SkillRepository(root)


def _system(request: object) -> str:
    messages = request.messages  # type: ignore[attr-defined]
    return messages[0].content if messages and messages[0].role == "system" else ""


def _all_text(request: object) -> str:
    return "\n".join(m.content for m in request.messages)  # type: ignore[attr-defined]


async def _run(repo: SkillRepository, replies: list, policy: SkillsPolicy | None = None,
               messages: tuple[str, ...] = ("Our TLS handshakes fail.",)) -> tuple[ScriptedModel, Runner, str]:
    model = ScriptedModel(replies)
    agent = LLMAgent("support", model, instruction="You are a support engineer.",
                     mechanisms=[SkillsMechanism(repo, policy)])
    runner = Runner("app", agent, InMemorySessionService())
    for message in messages:
        await runner.ask("u", "s", message)
    return model, runner, "s"


async def test_the_listing_shows_names_and_descriptions_only(tmp_path: Path) -> None:
    model, _, _ = await _run(_repo(tmp_path), ["Hello."])
    system = _system(model.requests[0])
    assert "- tls-triage: Diagnose TLS handshake failures." in system
    assert "- dns-lookup: Resolve a host name step by step." in system
    assert "UNIQUE-MARKER-7781" not in _all_text(model.requests[0])
    assert "DNS-BODY" not in _all_text(model.requests[0])
    assert [t["function"]["name"] for t in model.requests[0].tools] == ["skill_load", "skill_read"]


async def test_skill_load_returns_the_instructions_and_records_a_state_delta(tmp_path: Path) -> None:
    model, runner, sid = await _run(_repo(tmp_path), [
        ScriptedModel.tool_call("skill_load", {"name": "tls-triage"}),
        ScriptedModel.tool_call("skill_read", {"name": "tls-triage", "doc": "docs/report.txt"}),
        "Done."])
    session = await runner.session_service.get_session("app", "u", sid)
    assert session is not None
    assert session.state[LOADED_KEY] == ["tls-triage"]
    assert session.state[DOCS_READ_KEY] == ["tls-triage/docs/report.txt"]
    second = _all_text(model.requests[1])
    assert "UNIQUE-MARKER-7781" in second and "Documents (read one with skill_read): docs/report.txt" in second
    assert "scripts/check.py" not in second  # the read-only profile does not advertise scripts
    assert "REPORT-FORMAT-DOC" in _all_text(model.requests[2])
    assert "Already loaded in this conversation" in _system(model.requests[1])
    assert "tls-triage" in _system(model.requests[1]).split("Already loaded")[1]


async def test_a_loaded_skill_is_not_loaded_again_in_the_same_session(tmp_path: Path) -> None:
    """Second turn loads the same skill: a short note, and the instructions appear once in the request."""
    model, runner, sid = await _run(_repo(tmp_path), [
        ScriptedModel.tool_call("skill_load", {"name": "tls-triage"}), "First answer.",
        ScriptedModel.tool_call("skill_load", {"name": "tls-triage"}), "Second answer."],
        messages=("First question.", "Second question."))
    last = _all_text(model.requests[-1])
    assert last.count("UNIQUE-MARKER-7781") == 1
    assert "already loaded" in last
    session = await runner.session_service.get_session("app", "u", sid)
    assert session is not None and session.state[LOADED_KEY] == ["tls-triage"]


async def test_reload_true_fetches_the_instructions_again(tmp_path: Path) -> None:
    model, _, _ = await _run(_repo(tmp_path), [
        ScriptedModel.tool_call("skill_load", {"name": "tls-triage"}),
        ScriptedModel.tool_call("skill_load", {"name": "tls-triage", "reload": True}), "ok"])
    assert _all_text(model.requests[-1]).count("UNIQUE-MARKER-7781") == 2


async def test_read_only_profile_cannot_run_scripts(tmp_path: Path) -> None:
    model, _, _ = await _run(_repo(tmp_path), [
        ScriptedModel.tool_call("skill_run", {"name": "tls-triage", "script": "scripts/check.py"}), "ok"])
    assert "no tool named 'skill_run'" in _all_text(model.requests[1])


async def test_workspace_profile_runs_a_script_with_a_scrubbed_environment(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLAB_TEST_SECRET", "do-not-leak")
    model, _, _ = await _run(_repo(tmp_path), [
        ScriptedModel.tool_call("skill_load", {"name": "tls-triage"}),
        ScriptedModel.tool_call("skill_run", {"name": "tls-triage", "script": "scripts/check.py", "args": ["pay"]}),
        "ok"], SkillsPolicy(profile="workspace"))
    assert [t["function"]["name"] for t in model.requests[0].tools] == ["skill_load", "skill_read", "skill_run"]
    assert "Scripts (run one with skill_run): scripts/check.py" in _all_text(model.requests[1])
    result = _all_text(model.requests[2])
    assert "exit code 0" in result and "args ['pay'] skill tls-triage" in result
    assert "secret None" in result and "do-not-leak" not in result


async def test_a_script_that_runs_too_long_is_killed_with_its_children(tmp_path: Path) -> None:
    script = tmp_path / "slow.sh"
    marker = tmp_path / "child-survived"
    script.write_text(f"(sleep 1; touch {marker}) &\nsleep 30\n")
    started = time.monotonic()
    result = await run_script(script, timeout_seconds=0.3)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 5
    time.sleep(1.5)
    assert not marker.exists()  # the background child died with the process group


async def test_output_is_capped(tmp_path: Path) -> None:
    script = tmp_path / "loud.py"
    script.write_text("print('x' * 50000)\n")
    result = await run_script(script, output_cap_bytes=100)
    assert result.truncated and len(result.output) == 100 and result.exit_code == 0
    assert "[output truncated]" in result.render()


def test_unknown_profile_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="use one of read_only, workspace"):
        SkillsPolicy(profile="shell")  # type: ignore[arg-type]


async def test_an_empty_repository_adds_no_listing_and_no_tools(tmp_path: Path) -> None:
    model, _, _ = await _run(SkillRepository(tmp_path), ["Hello."])
    assert model.requests[0].tools == []
    assert "Skills you can use" not in _system(model.requests[0])


async def test_the_loaded_state_survives_a_new_process_on_duckdb(tmp_path: Path) -> None:
    """The state delta is durable: a Runner on the reopened file knows the skill was loaded."""
    from agentlab.session.duckdb import DuckDBSessionService

    repo = _repo(tmp_path / "skills")
    db = tmp_path / "sessions.duckdb"
    for replies in ([ScriptedModel.tool_call("skill_load", {"name": "tls-triage"}), "one"],
                    [ScriptedModel.tool_call("skill_load", {"name": "tls-triage"}), "two"]):
        svc = DuckDBSessionService(db)
        model = ScriptedModel(replies)
        agent = LLMAgent("support", model, mechanisms=[SkillsMechanism(repo)])
        await Runner("app", agent, svc).ask("u", "s", "TLS fails.")
        await svc.close()
    assert "Already loaded in this conversation" in _system(model.requests[0])
    assert "already loaded" in model.requests[1].messages[-1].content
