"""The skill repository: discovery from a folder, malformed skills, refresh, documents and scripts."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlab.skills.repository import SkillRepository, parse_front_matter, write_skill


def _catalog(root: Path) -> None:
    write_skill(root, "tls-triage", "Diagnose TLS handshake failures.", "1. Check the certificate expiry first.",
                docs={"report.txt": "# Report format\nHost, expiry, fix."}, scripts={"check.py": "print('ok')"})
    write_skill(root, "dns-lookup", "Resolve a host name step by step.", "1. Query the resolver.")


def test_discovers_each_skill_with_its_documents_and_scripts(tmp_path: Path) -> None:
    _catalog(tmp_path)
    repo = SkillRepository(tmp_path)
    assert repo.names() == ["dns-lookup", "tls-triage"]
    skill = repo.require("tls-triage")
    assert skill.description == "Diagnose TLS handshake failures."
    assert skill.instructions == "1. Check the certificate expiry first."
    assert skill.docs == ("docs/report.txt",) and skill.scripts == ("scripts/check.py",)
    assert repo.read_doc("tls-triage", "docs/report.txt").startswith("# Report format")
    assert repo.read_doc("tls-triage", "report.txt").startswith("# Report format")  # folder may be left out
    assert repo.errors == []


def test_a_malformed_skill_is_one_error_naming_its_file_and_the_rest_still_load(tmp_path: Path) -> None:
    _catalog(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "SKILL.md").write_text("---\nname: broken\n---\nno description here\n")
    nofront = tmp_path / "nofront"
    nofront.mkdir()
    (nofront / "SKILL.md").write_text("just text\n")
    (tmp_path / "empty-folder").mkdir()
    repo = SkillRepository(tmp_path)
    assert repo.names() == ["dns-lookup", "tls-triage"]
    messages = {e.path.parent.name: str(e) for e in repo.errors}
    assert set(messages) == {"broken", "nofront", "empty-folder"}
    assert str(broken / "SKILL.md") in messages["broken"] and "description" in messages["broken"]
    assert "front matter" in messages["nofront"]
    assert "no SKILL.md" in messages["empty-folder"]


def test_two_folders_with_one_name_keep_the_first_and_report_the_second(tmp_path: Path) -> None:
    write_skill(tmp_path, "a-skill", "First.", "Do A.")
    (tmp_path / "b-folder").mkdir()
    (tmp_path / "b-folder" / "SKILL.md").write_text("---\nname: a-skill\ndescription: Second.\n---\nDo B.\n")
    repo = SkillRepository(tmp_path)
    assert repo.require("a-skill").description == "First."
    assert len(repo.errors) == 1 and "already used" in repo.errors[0].message


def test_refresh_on_demand_sees_new_and_changed_skills(tmp_path: Path) -> None:
    repo = SkillRepository(tmp_path / "missing-yet")
    assert repo.names() == [] and repo.errors == []
    write_skill(tmp_path / "missing-yet", "new-skill", "Something new.", "Step one.")
    assert repo.names() == []  # not read until refreshed
    repo.refresh()
    assert repo.names() == ["new-skill"]


def test_front_matter_quotes_continuations_and_bad_lines() -> None:
    meta, body = parse_front_matter('---\nname: "x-y"\ndescription: >\n  spans\n  two lines\n---\nBody\n')
    assert meta == {"name": "x-y", "description": "spans two lines"} and body == "Body"
    with pytest.raises(ValueError, match="not 'key: value'"):
        parse_front_matter("---\nname x\n---\nbody")
    with pytest.raises(ValueError, match="not closed"):
        parse_front_matter("---\nname: x\n")


def test_unknown_skill_document_or_script_names_what_exists(tmp_path: Path) -> None:
    _catalog(tmp_path)
    repo = SkillRepository(tmp_path)
    with pytest.raises(KeyError, match="known: dns-lookup, tls-triage"):
        repo.require("nope")
    with pytest.raises(KeyError, match="it has: docs/report.txt"):
        repo.read_doc("tls-triage", "docs/other.txt")
    with pytest.raises(KeyError, match="it has: scripts/check.py"):
        repo.script_path("tls-triage", "../SKILL.md")
