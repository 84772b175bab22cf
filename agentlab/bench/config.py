"""Benchmark settings: published values in ``benchmarks/<name>.toml``, overridden by flags.

A settings file has named sections of scalar (or list) fields, e.g. ``[answer] max_tokens = 384``.
The task's own defaults come first, the TOML file overrides them, and ``--set section.field=value``
overrides both; ``--set`` may only name a section and field that already exist, and its value is
parsed as int / float / bool / str (or a list: a TOML array ``[1,4]`` or ``1,4``) and checked
against the existing type.
A ``[published]`` section, if present, holds the published numbers to compare with; it is kept
apart from the settings (not settable, not part of the run identity).

A ``[smoke]`` section holds ``"section.field" = value`` settings that the CLI applies only when the
answer model is the embedded SmolLM2-135M (a smoke test). That model does not stop on its own, so
at the published output caps (2,000 answer tokens for MT-Bench-101, open-ended summaries) most of a
run's time goes into looping text; and it cannot call tools, so a mode that answers through a tool
gets the tool's results injected instead. The values change the run's settings, so they are part
of its id and stored with it; ``--set`` still wins, and ``--published-settings`` skips them.

Mode roles: every benchmark names its baseline mode (full context), its lossy mode (summary) and
its recovered mode (summary + recall). The derived report tables read these roles from a table
(:data:`MODE_ROLES`, written into DuckDB by ``report``) instead of hard-coding mode names in SQL.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS_DIR = REPO_ROOT / "benchmarks"
PUBLISHED_SECTION = "published"
SMOKE_SECTION = "smoke"
#: Settings sections that tune how a run executes, not what it computes: left out of the run id.
EXECUTION_SECTIONS = frozenset({"run"})


class SettingsError(ValueError):
    """A settings file or ``--set`` override is wrong; the message says which and why."""


# ------------------------------------------------------------------------------------ roles


@dataclass(frozen=True)
class ModeRoles:
    """Which mode plays which part in the quality-loss and recovery tables."""

    #: Full-context mode every other mode is compared with (quality loss, token savings).
    baseline: str
    #: The mode that loses information (summary); ``None`` when the benchmark has none.
    lossy: str | None = None
    #: The mode that wins it back (summary + recall); recovery = (recovered − lossy)/(baseline − lossy).
    recovered: str | None = None


MODE_ROLES: dict[str, ModeRoles] = {
    "qmsum": ModeRoles(baseline="long_context", lossy="summary", recovered="recall"),
    "longmemeval": ModeRoles(baseline="long_context", lossy="summary", recovered="recall"),
    "mtbench101": ModeRoles(baseline="baseline", lossy="summary"),
    # LoCoMo compares session_recall and memory with the long context; no lossy/recovered pair.
    "locomo": ModeRoles(baseline="long_context"),
}

#: Which answer calls a published report counts as one case's tokens, so the columns compared
#: with it use the same rule (the store keeps both; README "Token accounting"):
#: * ``last_answer_call`` — the summary benchmark's harness takes the provider usage of the last
#:   answer call of each run (reference §5.2): a recall run's search and load rounds are not
#:   added up, only the final prompt, which already carries the tool results.
#: * ``sum_answer_calls`` — every answer call of the case. MT-Bench-101's published totals sum the
#:   turns, and each turn is one run with one answer call (no tools), so the sum over a dialogue's
#:   answer calls *is* the sum of each run's last usage; LoCoMo's Tokens/QA and Calls/QA count
#:   every call of a question (e.g. 3 calls and 17,182 tokens per question for two memory_search
#:   passes, reference §6.2).
PUBLISHED_TOKEN_RULES: dict[str, str] = {
    "qmsum": "last_answer_call",
    "longmemeval": "last_answer_call",
    "mtbench101": "sum_answer_calls",
    "locomo": "sum_answer_calls",
}


# --------------------------------------------------------------------------------- settings


class Settings:
    """Sections of fields; read with ``settings["answer"]["max_tokens"]`` or ``settings.get(...)``."""

    def __init__(self, sections: Mapping[str, Mapping[str, Any]] | None = None,
                 published: Mapping[str, Any] | None = None, source: str = "",
                 smoke: Mapping[str, Any] | None = None) -> None:
        self._sections: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (sections or {}).items()}
        self.published: dict[str, Any] = dict(published or {})
        #: ``{"section.field": value}`` settings for smoke runs on the embedded model (not yet applied).
        self.smoke: dict[str, Any] = dict(smoke or {})
        #: Where the values came from (for messages).
        self.source = source

    def __getitem__(self, section: str) -> dict[str, Any]:
        if section not in self._sections:
            raise KeyError(f"settings have no section [{section}] (known: {', '.join(sorted(self._sections))})")
        return dict(self._sections[section])

    def __contains__(self, section: object) -> bool:
        return section in self._sections

    def get(self, section: str, field: str, default: Any = None) -> Any:
        return self._sections.get(section, {}).get(field, default)

    def sections(self) -> list[str]:
        return sorted(self._sections)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return copy.deepcopy(self._sections)

    def identity(self) -> dict[str, dict[str, Any]]:
        """The sections that change results (everything but :data:`EXECUTION_SECTIONS`)."""
        return {k: v for k, v in self.to_dict().items() if k not in EXECUTION_SECTIONS}

    def with_values(self, section: str, **fields: Any) -> Settings:
        """A copy with fields set (used by code, not by users: no schema check)."""
        data = self.to_dict()
        data.setdefault(section, {}).update(fields)
        return Settings(data, self.published, self.source, self.smoke)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and self._sections == other._sections

    def __repr__(self) -> str:
        return f"Settings({self._sections!r})"


def settings_path(benchmark: str, directory: str | Path | None = None) -> Path:
    return Path(directory or BENCHMARKS_DIR) / f"{benchmark}.toml"


def _merge(base: dict[str, dict[str, Any]], top: Mapping[str, Any], origin: str) -> None:
    for section, fields in top.items():
        if not isinstance(fields, Mapping):
            raise SettingsError(f"{origin}: top-level key {section!r} must be a [section] table")
        target = base.setdefault(section, {})
        for name, value in fields.items():
            if isinstance(value, Mapping):
                raise SettingsError(f"{origin}: [{section}] {name} is a nested table; only scalars and lists")
            target[name] = value


def load_settings(benchmark: str, defaults: Mapping[str, Mapping[str, Any]] | None = None, *,
                  directory: str | Path | None = None) -> Settings:
    """Task defaults overridden by ``benchmarks/<benchmark>.toml`` (if it exists)."""
    merged: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (defaults or {}).items()}
    path = settings_path(benchmark, directory)
    published: dict[str, Any] = {}
    if path.is_file():
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"{path}: not valid TOML: {exc}") from exc
        published = dict(raw.pop(PUBLISHED_SECTION, {}) or {})
        smoke = dict(raw.pop(SMOKE_SECTION, {}) or {})
        _merge(merged, raw, str(path))
    return Settings(merged, published, str(path) if path.is_file() else "task defaults",
                    smoke if path.is_file() else None)


def _check_smoke(smoke: Mapping[str, Any], sections: Mapping[str, Mapping[str, Any]], origin: str) -> None:
    """Every ``[smoke]`` key names an existing ``section.field`` and keeps its type.

    Checked when the values are applied: only then are the task's defaults merged in (a test
    applies every benchmark's section, so a bad key in a shipped file fails the suite).
    """
    for key, value in smoke.items():
        section, _, field = key.partition(".")
        if not field or "." in field or section in {PUBLISHED_SECTION, SMOKE_SECTION}:
            raise SettingsError(f"{origin}: [smoke] key {key!r} must be \"section.field\"")
        if field not in sections.get(section, {}):
            raise SettingsError(f"{origin}: [smoke] {key}: no such setting")
        current = sections[section][field]
        if isinstance(current, bool) != isinstance(value, bool) or (
                isinstance(current, int | float) and not isinstance(value, int | float)) or (
                isinstance(current, str) and not isinstance(value, str)):
            raise SettingsError(f"{origin}: [smoke] {key} = {value!r} does not match the type of {current!r}")


def apply_smoke(settings: Settings) -> tuple[Settings, dict[str, tuple[Any, Any]]]:
    """The settings with the ``[smoke]`` values applied, and ``{key: (published, smoke)}`` that changed."""
    data = settings.to_dict()
    _check_smoke(settings.smoke, data, settings.source)
    changed: dict[str, tuple[Any, Any]] = {}
    for key, value in settings.smoke.items():
        section, field = key.split(".")
        old = data[section][field]
        if isinstance(old, float) and not isinstance(value, bool):
            value = float(value)
        if old != value:
            changed[key] = (old, value)
            data[section][field] = value
    return Settings(data, settings.published, settings.source, settings.smoke), changed


def parse_value(raw: str) -> int | float | bool | str:
    """``"3"`` → 3, ``"0.5"`` → 0.5, ``"true"``/``"false"`` → bool, anything else → the string."""
    text = raw.strip()
    low = text.lower()
    if low in {"true", "false"}:
        return low == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return raw


def _list_items(raw: str, where: str) -> list[str]:
    """The items of a list value as text: a TOML array (``[1, 4]``, ``["a", "b"]``) or ``1,4``.

    A bracketed value is read as TOML; one that is not valid TOML (``[CM, SI]``, bare words) is
    split on commas inside the brackets, so either spelling works.
    """
    text = raw.strip()
    if text.startswith("["):
        if not text.endswith("]"):
            raise SettingsError(f"--set {where}: a list must end with ']', got {raw!r} (e.g. {where}=[1,4])")
        try:
            parsed = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            text = text[1:-1]
        else:
            if any(isinstance(item, list | dict) for item in parsed):
                raise SettingsError(f"--set {where}: nested lists or tables are not settings, got {raw!r}")
            return [str(item).lower() if isinstance(item, bool) else str(item) for item in parsed]
    return [p.strip() for p in text.split(",") if p.strip()]


def _coerce(raw: str, current: Any, where: str) -> Any:
    if isinstance(current, bool):
        value = parse_value(raw)
        if not isinstance(value, bool):
            raise SettingsError(f"--set {where}: expected true or false, got {raw!r}")
        return value
    if isinstance(current, int):
        value = parse_value(raw)
        if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(value, float) and not value.is_integer()):
            raise SettingsError(f"--set {where}: expected an integer, got {raw!r}")
        return int(value)
    if isinstance(current, float):
        value = parse_value(raw)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SettingsError(f"--set {where}: expected a number, got {raw!r}")
        return float(value)
    if isinstance(current, list):
        items = _list_items(raw, where)
        if current:
            return [_coerce(p, current[0], where) for p in items]
        return [parse_value(p) for p in items]
    if isinstance(current, str):
        return raw
    return parse_value(raw)


def apply_overrides(settings: Settings, assignments: Iterable[str]) -> Settings:
    """Apply ``section.field=value`` strings; unknown sections or fields are a :class:`SettingsError`."""
    data = settings.to_dict()
    for assignment in assignments:
        if "=" not in assignment:
            raise SettingsError(f"--set {assignment!r}: expected section.field=value")
        key, raw = assignment.split("=", 1)
        key = key.strip()
        if key.count(".") != 1:
            raise SettingsError(f"--set {assignment!r}: the name must be section.field (e.g. answer.max_tokens)")
        section, field = key.split(".")
        if section == PUBLISHED_SECTION:
            raise SettingsError(f"--set {key}: [published] holds reference numbers and cannot be set")
        if section == SMOKE_SECTION:
            raise SettingsError(f"--set {key}: [smoke] settings live in the settings file; use --set on the "
                                f"setting itself (e.g. answer.max_tokens=64)")
        if section not in data:
            raise SettingsError(f"--set {key}: unknown section [{section}]; known sections: {', '.join(sorted(data))}")
        if field not in data[section]:
            known = ", ".join(sorted(data[section]))
            raise SettingsError(f"--set {key}: [{section}] has no field {field!r}; known fields: {known}")
        data[section][field] = _coerce(raw, data[section][field], key)
    return Settings(data, settings.published, settings.source, settings.smoke)


# --------------------------------------------------------------------------------- identity


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def config_hash(config: Mapping[str, Any], length: int = 16) -> str:
    """The run id: a short sha256 of the canonical JSON of everything that changes results."""
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()[:length]


def code_version() -> str:
    """``git describe --always --dirty`` of the checkout, else the installed package version."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=5, check=True)
        if out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        from importlib.metadata import version

        return f"agentlab {version('agentlab')}"
    except Exception:  # not installed as a distribution: still runnable from a checkout
        return "unknown"
