"""The version, the changelog and the pre-commit hooks agree with the project files they mirror."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

import agentlab

ROOT = Path(__file__).resolve().parents[1]
VERSION_HEADING = re.compile(r"^## (\d+)\.(\d+)\.(\d+)\b", re.MULTILINE)


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def changelog_versions(text: str) -> list[tuple[int, int, int]]:
    return [(int(a), int(b), int(c)) for a, b, c in VERSION_HEADING.findall(text)]


def test_the_package_states_the_version_of_pyproject() -> None:
    assert agentlab.__version__ == project()["version"]


def test_the_changelog_starts_with_the_current_version_and_lists_versions_newest_first() -> None:
    versions = changelog_versions((ROOT / "CHANGELOG.md").read_text())
    current = tuple(int(p) for p in project()["version"].split("."))
    assert versions and versions[0] == current
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)


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
