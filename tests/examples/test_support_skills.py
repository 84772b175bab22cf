"""The support desk learns "check certificate expiry first" from two scripted runs and uses it in the third."""

from __future__ import annotations

import io
from pathlib import Path

from agentlab.examples.support_skills import SKILL, main, run_story
from agentlab.skills import SkillRepository


async def test_two_runs_teach_the_skill_and_the_third_run_follows_it(tmp_path: Path) -> None:
    out = io.StringIO()
    calls = await run_story(tmp_path / "skills", out)
    assert calls[0] == ["check_network", "read_certificate"]  # the habit, before any skill exists
    assert calls[1] == []  # the correction
    assert calls[2] == ["skill_load", "read_certificate"]  # the learned order: no network test
    text = out.getvalue()
    assert "evidence [recovery_after_failure], published: create of 'tls-handshake-triage' published as revision 1" in text
    assert "evidence [user_correction], published: update of 'tls-handshake-triage' published as revision 2" in text
    assert "became update of 'tls-handshake-triage'" in text
    assert "after the checks spec, safety" in text
    skill = SkillRepository(tmp_path / "skills").require(SKILL)
    assert skill.instructions.startswith("1. Check the certificate expiry first")
    history = sorted(p.name for p in (tmp_path / "skills" / ".history" / SKILL).iterdir())
    assert history == ["0001.json", "0001.md", "0002.json", "0002.md"]


def test_the_command_refuses_a_folder_that_already_holds_the_skill(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / SKILL).mkdir()
    assert main(["--skills-dir", str(tmp_path)]) == 2
    assert "exists already" in capsys.readouterr().err
