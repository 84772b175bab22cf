"""The version, the changelog and the pre-commit hooks agree with the project files they mirror."""

from __future__ import annotations

import re
import shlex
import sys
from datetime import date
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

import agentlab

ROOT = Path(__file__).resolve().parents[1]
#: Keep a Changelog 1.1.0's group headings, plus ``Upgrading`` (what a user must do), which comes first.
GROUPS = ("Upgrading", "Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
UNRELEASED = "## [Unreleased]"
RELEASE_HEADING = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})$")


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def releases(text: str) -> list[tuple[tuple[int, int, int], str, list[str]]]:
    """``(version, date, [group, ...])`` of each ``## [x.y.z] - YYYY-MM-DD`` heading, in file order.

    Raises ``AssertionError`` naming the line for a ``##`` heading that is neither ``## [Unreleased]``
    (allowed once, first) nor a dated release, and for a ``###`` heading that is not a group.
    """
    found: list[tuple[tuple[int, int, int], str, list[str]]] = []
    seen_unreleased = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            if line == UNRELEASED:
                assert not found and not seen_unreleased, f"line {n}: {UNRELEASED} must come once, first"
                seen_unreleased = True
                continue
            match = RELEASE_HEADING.match(line)
            assert match, f"line {n}: {line!r} is not '## [x.y.z] - YYYY-MM-DD' nor {UNRELEASED!r}"
            a, b, c, day = match.groups()
            date.fromisoformat(day)  # a real date: ValueError otherwise
            found.append(((int(a), int(b), int(c)), day, []))
        elif line.startswith("### "):
            group = line[4:].strip()
            assert group in GROUPS, f"line {n}: {line!r} is not a group heading {GROUPS}"
            if found:
                found[-1][2].append(group)
    return found


def test_the_package_states_the_version_of_pyproject() -> None:
    assert agentlab.__version__ == project()["version"]


def test_the_changelog_starts_with_the_current_version_and_lists_versions_newest_first() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    found = releases(text)
    versions = [version for version, _, _ in found]
    current = tuple(int(p) for p in project()["version"].split("."))
    assert versions and versions[0] == current
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    dates = [day for _, day, _ in found]
    assert dates == sorted(dates, reverse=True)
    for version, _, groups in found:
        # each group once, in Keep a Changelog's order (Upgrading first)
        assert groups == sorted(set(groups), key=GROUPS.index), (version, groups)
    assert text.splitlines().count(UNRELEASED) == 1, f"the changelog opens with {UNRELEASED!r} for new bullets"


def test_the_changelog_check_refuses_the_old_dated_topic_form() -> None:
    bad = "# Changelog\n\n## 0.2.0 — unreleased\n\n### Skills (2026-12-04, `8ea66b7..`)\n"
    with pytest.raises(AssertionError, match="is not"):
        releases(bad)
    bad = "## [0.2.0] - 2026-12-04\n\n### Skills and their evolution\n"
    with pytest.raises(AssertionError, match="not a group heading"):
        releases(bad)
    with pytest.raises(AssertionError, match="once, first"):
        releases("## [0.2.0] - 2026-12-04\n\n## [Unreleased]\n")
    with pytest.raises(ValueError):
        releases("## [0.2.0] - 2026-13-04\n")
    assert releases("## [Unreleased]\n\n### Added\n\n## [0.2.0] - 2026-12-04\n\n### Upgrading\n"
                    "### Fixed\n") == [((0, 2, 0), "2026-12-04", ["Upgrading", "Fixed"])]


def _make_ruff_commands() -> dict[str, list[str]]:
    """``{target: ruff arguments}`` of the Makefile's lint and doclint recipes."""
    commands = {}
    target = None
    for line in (ROOT / "Makefile").read_text().splitlines():
        if match := re.match(r"^([\w-]+):", line):
            target = match.group(1)
        elif line.startswith("\t") and "/bin/ruff " in line and target:
            commands[target] = shlex.split(line.split("/bin/ruff ", 1)[1])
    return commands


def _hooks() -> dict[str, dict[str, str]]:
    """``{hook id: {entry, additional_dependencies, files}}`` of .pre-commit-config.yaml (flat YAML)."""
    hooks: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in (ROOT / ".pre-commit-config.yaml").read_text().splitlines():
        if match := re.match(r"^\s*- id:\s*(\S+)", line):
            current = hooks.setdefault(match.group(1), {})
        elif current is not None and (
                match := re.match(r"^\s+(entry|additional_dependencies|files|language):\s*(.+)$", line)):
            current[match.group(1)] = match.group(2).strip()
    return hooks


def test_pre_commit_runs_the_lint_and_docstring_checks_of_make_test() -> None:
    make, hooks = _make_ruff_commands(), _hooks()
    lint, doclint = make["lint"], make["doclint"]
    # The Makefile names the folders; a hook gets the files of those folders from pre-commit.
    assert lint[-3:] == ["agentlab", "tests", "benchmarks"]
    assert shlex.split(hooks["ruff-lint"]["entry"]) == ["ruff", *lint[:-3]]
    assert hooks["ruff-lint"]["files"] == "^(agentlab|tests|benchmarks)/"
    assert shlex.split(hooks["ruff-docstrings"]["entry"]) == ["ruff", *doclint[:-1]] and doclint[-1] == "agentlab"
    assert hooks["ruff-docstrings"]["files"] == "^agentlab/"
    for hook in hooks.values():
        assert hook["language"] == "python"  # installed from the registry: nothing cloned


def test_pre_commit_pins_the_ruff_of_the_dev_extra() -> None:
    dev_ruff = [r for r in project()["optional-dependencies"]["dev"] if re.match(r"ruff\b", r)]
    assert len(dev_ruff) == 1 and "==" in dev_ruff[0], dev_ruff
    pins = {hook["additional_dependencies"] for hook in _hooks().values()}
    assert pins == {f'["{dev_ruff[0]}"]'}
    assert any(re.match(r"pre-commit\b", r) for r in project()["optional-dependencies"]["dev"])
