"""Benchmark settings: one typed object per section, published values in ``benchmarks/<name>.toml``.

A task declares its settings as a schema (:meth:`~agentlab.bench.tasks.Task.default_settings`):
section name → frozen dataclass. A policy section *is* its policy (``[summary]`` parses into a
``SummaryPolicy`` or a task's subclass of it, ``[answer]`` into a ``GenerationConfig``); task-only
knobs (dataset filters, judge, retrieval depths …) are small dataclasses of their own. So a
default is written once — the dataclass field, with its ``#:`` doc comment — and a value check
lives with the field (``__post_init__``). Layers, each checked when applied: the field defaults <
the TOML file < its ``[smoke]`` table (embedded model only) < ``--set section.field=value``. A
``--set`` value is parsed by the field's declared type (int / float / bool / str / ``none`` for an
optional field / a list as ``[1,4]`` or ``1,4``). Unknown sections or fields and wrong types are
a :class:`SettingsError` naming the benchmark, section, field and the valid fields.

The resolved ``to_dict()`` of every section except ``[run]`` (:meth:`Settings.identity`) is what
the run id hashes and what ``runs.config`` stores, so a changed library default makes a new run
rather than silently resuming an old one, and ``analysis.runs_df()`` can show every value.

A ``[published]`` section, if present, holds the published numbers to compare with; it is kept
apart from the settings (not settable, not part of the run identity).

A ``[smoke]`` section holds ``"section.field" = value`` settings that the CLI applies only when the
answer model is the embedded SmolLM2-135M (a smoke test). That model does not stop on its own, so
at the published output caps (2,000 answer tokens for MT-Bench-101, open-ended summaries) most of a
run's time goes into looping text; and it cannot call tools, so a mode that answers through a tool
gets the tool's results injected instead. The values change the run's settings, so they are part
of its id and stored with it; ``--set`` still wins, and ``--published-settings`` skips them.

Variants: a run's *variant* names how its settings differ from the benchmark's file — the settings
the plain command would use with the same model, i.e. the file plus, on the embedded model, its
``[smoke]`` settings (so a smoke run is not a variant of its own; ``--published-settings`` on the
embedded model is: its name lists the published values). :func:`variant_settings` lists the
differing ``section.field`` values and :func:`variant_name` turns them into a name such as
``summary.max_output_tokens=512``; no difference is the variant ``default``. ``--variant NAME``
names a run explicitly (and makes the name part of its id).

Mode roles (baseline / lossy / recovered) and the published token rule are facts of each task
class (``Task.mode_roles``, ``Task.published_token_rule``; :mod:`agentlab.bench.facts`). This
module does not import the task registry: a schema it is not given is looked up through
:func:`agentlab.bench.facts.registered_task`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, make_dataclass
from dataclasses import field as dataclass_field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, TypeVar

from agentlab.bench.facts import registered_roles, registered_so_far, registered_task
from agentlab.model.base import GenerationConfig
from agentlab.policy_json import (
    FieldError,
    PolicyJSON,
    field_names,
    from_dict,
    is_dataclass_type,
    parse_value_text,
    renamed_fields,
    to_dict,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS_DIR = REPO_ROOT / "benchmarks"
PUBLISHED_SECTION = "published"
SMOKE_SECTION = "smoke"
#: The variant of a run whose settings are the benchmark file's (plus [smoke] on the embedded model).
DEFAULT_VARIANT = "default"
#: Settings sections that tune how a run executes, not what it computes: left out of the run id.
EXECUTION_SECTIONS = frozenset({"run"})
#: Settings added after run ids were first recorded, kept out of the identity while at their
#: default so that every id made before them stays the id it was: section -> its late fields
#: (``None``: the whole section, left out while every field of it is at its default). A value
#: that differs from the default is hashed like any other setting.
LATE_SETTINGS: dict[str, tuple[str, ...] | None] = {
    "compaction": None,                           # [compaction]: tRPC-Agent-Go's defaults
    "dataset": ("delivery", "chunk_turns"),       # turns | tool_results delivery
    "artifact_offload": None,                     # [artifact_offload]: the offload arm's threshold and preview
}
#: Fields added to a peer policy after its section first counted in run ids: left out of the identity
#: while at their default, so that a run with another field of that section set keeps its id.
LATE_POLICY_FIELDS: dict[str, tuple[str, ...]] = {
    "anthropic_clear_tool_uses": ("clear_in_batches",),  # the cache-stable batch variant
}


@functools.cache
def peer_sections() -> dict[str, type[Any]]:
    """The sections the generic peer-policy arms read, on every benchmark: ``[<policy name>]``.

    Each is the policy's own dataclass (:data:`agentlab.policies.POLICIES`) with the source's
    defaults, so ``--set langchain_summarization.trigger_fraction=0.9`` runs the documented
    fraction variant of an absolute trigger. Like :data:`LATE_SETTINGS`, a section at its defaults
    stays out of the run id (the ids made before these sections existed stay what they were).
    """
    from agentlab.policies import POLICIES

    return {name: entry.policy_class for name, entry in POLICIES.items()}


def arm_sections() -> dict[str, type[Any]]:
    """The sections every benchmark has for the generic arms: ``[compaction]`` (tRPC-Agent-Go's
    compaction, :class:`~agentlab.compaction.CompactionPolicy`), ``[artifact_offload]``
    (:class:`~agentlab.artifacts.offload.ArtifactOffloadPolicy`) and :func:`peer_sections`.
    """
    from agentlab.artifacts.offload import ArtifactOffloadPolicy
    from agentlab.compaction import CompactionPolicy

    return {"compaction": CompactionPolicy, "artifact_offload": ArtifactOffloadPolicy, **peer_sections()}


def _listed(names: Iterable[str]) -> str:
    """Section names for an error message: the task's own, then the peer policies' as one note."""
    peers = peer_sections()
    own = sorted(n for n in names if n not in peers)
    return ", ".join(own) + (", and one per peer policy ([<policy name>], see `list`)" if peers else "")


def _late_fields(name: str) -> tuple[bool, tuple[str, ...] | None]:
    """Whether section ``name`` is late (left out of the id at its defaults), and which of its fields."""
    if name in LATE_SETTINGS:
        return True, LATE_SETTINGS[name]
    return name in peer_sections(), None


class SettingsError(ValueError):
    """A settings file or ``--set`` override is wrong; the message says which and why."""


# ------------------------------------------------------------------------- shared sections


@dataclass(frozen=True)
class AgentSettings(PolicyJSON):
    """``[agent]``: the answering agent's loop."""

    #: Model calls that may return tool calls before the agent must answer (recall modes).
    max_tool_iterations: int = 6

    def __post_init__(self) -> None:
        if self.max_tool_iterations < 1:
            raise ValueError(f"max_tool_iterations must be >= 1; got {self.max_tool_iterations}")


@dataclass(frozen=True)
class JudgeSettings(PolicyJSON):
    """``[judge]``: whether and with which model answers are graded."""

    #: Grade answers with an LLM judge; off leaves only the model-free metrics.
    enabled: bool = True
    #: Judge model spec; empty: the answer model judges (``--judge-model`` overrides it).
    model: str = ""


@dataclass(frozen=True)
class RunSettings(PolicyJSON):
    """``[run]``: how a run executes, not what it computes (left out of the run id)."""

    #: Cases in flight at once (``--concurrency`` overrides it).
    concurrency: int = 4

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1; got {self.concurrency}")


@dataclass(frozen=True)
class RetrievalSettings(PolicyJSON):
    """``[retrieval]``: the model-free evidence recall@k of ``--retrieval-only`` (and recall runs)."""

    #: Depths k at which evidence recall is measured.
    ks: tuple[int, ...] = (5, 10)

    def __post_init__(self) -> None:
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"ks must be positive integers; got {list(self.ks)}")


def generation_config(section: Any) -> GenerationConfig:
    """The plain :class:`GenerationConfig` of an ``[answer]`` section (which may add task fields).

    Built from GenerationConfig's own fields only, so a task's extra answer knob (e.g.
    MT-Bench-101's ``instruction``) never reaches a request or its call-cache key.
    """
    return GenerationConfig(**{f.name: getattr(section, f.name) for f in dataclass_fields(GenerationConfig)})


# --------------------------------------------------------------------------------- settings

#: A settings schema: section name → the dataclass that section is parsed into.
Schema = Mapping[str, type[Any]]
T = TypeVar("T")


def _section_type(name: str, spec: Any) -> type[Any]:
    """The dataclass of a section: ``spec`` itself, or one made from a ``{field: default}`` dict.

    The dict form keeps tasks written before typed settings (and quick test schemas) working:
    each field gets the type of its default, so values are still type-checked.
    """
    if is_dataclass_type(spec):
        return spec  # type: ignore[no-any-return,unused-ignore]
    if isinstance(spec, Mapping):
        made = []
        for key, default in spec.items():
            if isinstance(default, list):
                item = type(default[0]) if default else Any
                made.append((key, tuple[item, ...], dataclass_field(default=tuple(default))))  # type: ignore[valid-type]
            else:
                made.append((key, type(default), dataclass_field(default=default)))
        return make_dataclass(f"{name.title()}Section", made, frozen=True)
    raise SettingsError(f"settings section [{name}] must be a dataclass (or a dict of defaults), got {spec!r}")


class Settings:
    """The typed sections of one run's settings, plus the file's ``[published]`` and ``[smoke]`` tables.

    ``settings.of("recall", RecallPolicy)`` is the typed section (what tasks use);
    ``settings["recall"]`` its JSON view (a dict) and ``settings.get("recall", "search_top_k")`` one
    value, for code that only reads.
    """

    def __init__(self, sections: Mapping[str, Any] | None = None,
                 published: Mapping[str, Any] | None = None, source: str = "",
                 smoke: Mapping[str, Any] | None = None, benchmark: str = "") -> None:
        self._sections: dict[str, Any] = {}
        for name, value in (sections or {}).items():
            if isinstance(value, Mapping):  # a plain {field: value} section (tests, untyped tasks)
                value = _section_type(name, value)()
            self._sections[name] = value
        self.published: dict[str, Any] = dict(published or {})
        #: ``{"section.field": value}`` settings for smoke runs on the embedded model (not yet applied).
        self.smoke: dict[str, Any] = dict(smoke or {})
        #: Where the values came from (for messages).
        self.source = source
        #: The benchmark the settings belong to (for messages).
        self.benchmark = benchmark

    def __getitem__(self, section: str) -> dict[str, Any]:
        return to_dict(self.section(section))

    def __contains__(self, section: object) -> bool:
        return section in self._sections

    def section(self, name: str) -> Any:
        """The typed object of section ``name``."""
        if name not in self._sections:
            raise KeyError(f"settings have no section [{name}] (known: {', '.join(sorted(self._sections))})")
        return self._sections[name]

    def of(self, name: str, cls: type[T]) -> T:
        """Section ``name`` as a ``cls`` (a type error in the task's schema fails loudly here)."""
        value = self.section(name)
        if not isinstance(value, cls):
            raise TypeError(f"settings section [{name}] is a {type(value).__name__}, not a {cls.__name__}")
        return value

    def get(self, section: str, field: str, default: Any = None) -> Any:
        """One value, or ``default`` when the section or field does not exist."""
        obj = self._sections.get(section)
        return to_dict(obj).get(field, default) if obj is not None else default

    def sections(self) -> list[str]:
        """The section names, sorted."""
        return sorted(self._sections)

    def schema(self) -> dict[str, type[Any]]:
        """Section name → its dataclass."""
        return {name: type(obj) for name, obj in self._sections.items()}

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Every section's resolved fields (defaults included), JSON-shaped."""
        return {name: to_dict(obj) for name, obj in sorted(self._sections.items())}

    def identity(self) -> dict[str, dict[str, Any]]:
        """The sections that change results (everything but :data:`EXECUTION_SECTIONS`).

        Every field is included, defaults too: a changed library default changes the run id, so
        a rerun after it starts a new run instead of resuming one made with the old value. The
        one exception is :data:`LATE_SETTINGS` and the :func:`arm_sections`, left out while at their default.
        """
        out: dict[str, dict[str, Any]] = {}
        for name, obj in sorted(self._sections.items()):
            if name in EXECUTION_SECTIONS:
                continue
            values = to_dict(obj)
            is_late, late = _late_fields(name)
            if is_late:
                defaults = _defaults_of(type(obj))
                if late is None:
                    if values == defaults:
                        continue
                    late = LATE_POLICY_FIELDS.get(name, ())
                if late:
                    values = {k: v for k, v in values.items()
                              if not (k in late and k in defaults and defaults[k] == v)}
            out[name] = values
        return out

    def with_values(self, section: str, **fields: Any) -> Settings:
        """A copy with fields set, checked like any other value."""
        return self._replaced({section: fields}, "code")

    def _replaced(self, changes: Mapping[str, Mapping[str, Any]], origin: str) -> Settings:
        sections = dict(self._sections)
        for name, values in changes.items():
            current = self.section(name)
            sections[name] = _build(self.benchmark, name, type(current), {**to_dict(current), **values}, origin)
        return Settings(sections, self.published, self.source, self.smoke, self.benchmark)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Settings({self.to_dict()!r})"


def _defaults_of(cls: type[Any]) -> dict[str, Any]:
    """The JSON view of ``cls()`` (every field at its default); ``{}`` when a field has no default."""
    try:
        return to_dict(cls())
    except TypeError:
        return {}


def _where(benchmark: str, section: str) -> str:
    return f"{benchmark} [{section}]" if benchmark else f"[{section}]"


def _build(benchmark: str, name: str, cls: type[Any], values: Mapping[str, Any], origin: str) -> Any:
    """``cls`` from ``values``; any problem is a :class:`SettingsError` naming section, field and origin."""
    declared = field_names(cls)
    unknown = sorted(set(values) - set(declared))
    if unknown:
        new = renamed_fields(cls).get(unknown[0])
        hint = f" (renamed to {new!r})" if new else _did_you_mean(unknown[0], declared)
        raise SettingsError(f"{_where(benchmark, name)} has no field {unknown[0]!r}{hint} ({origin}); "
                            f"valid fields: {', '.join(sorted(declared))}")
    try:
        return from_dict(cls, dict(values))
    except FieldError as exc:
        raise SettingsError(f"{_where(benchmark, name)} {exc} ({origin})") from None
    except (ValueError, TypeError) as exc:
        raise SettingsError(f"{_where(benchmark, name)} {exc} ({origin})") from None


def _did_you_mean(name: str, declared: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, declared, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def settings_path(benchmark: str, directory: str | Path | None = None) -> Path:
    """Where the benchmark's settings file lives: ``benchmarks/<benchmark>.toml``, or its task's ``settings_file``.

    A task kept outside the package names its own file (:attr:`agentlab.bench.tasks.Task.settings_file`);
    ``directory`` (a test's folder) overrides both.
    """
    if directory is None:
        own = getattr(registered_so_far(benchmark), "settings_file", None)
        if own is not None:
            return Path(own)
    return Path(directory or BENCHMARKS_DIR) / f"{benchmark}.toml"


def _task_schema(benchmark: str) -> Schema:
    try:
        cls = registered_task(benchmark)
    except LookupError as exc:
        raise SettingsError(str(exc.args[0])) from None
    schema: Schema = cls().default_settings()
    return schema


def __getattr__(name: str) -> Any:
    # ``config.MODE_ROLES`` (benchmark → roles) was a table here; the roles are the task classes' now.
    if name == "MODE_ROLES":
        return registered_roles()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")



def load_settings(benchmark: str, defaults: Schema | Mapping[str, Mapping[str, Any]] | None = None, *,
                  directory: str | Path | None = None) -> Settings:
    """The schema's defaults overridden by ``benchmarks/<benchmark>.toml`` (if it exists), typed and checked.

    ``defaults``: section name → dataclass (a task's :meth:`~agentlab.bench.tasks.Task.default_settings`);
    ``None`` looks the registered task up. Every section of the file must be in the schema and
    every ``[smoke]`` key must name a field of it (checked now, applied by :func:`apply_smoke`).
    """
    schema = {name: _section_type(name, spec)
              for name, spec in (_task_schema(benchmark) if defaults is None else defaults).items()}
    for name, cls in arm_sections().items():
        schema.setdefault(name, cls)
    path = settings_path(benchmark, directory)
    raw: dict[str, Any] = {}
    if path.is_file():
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"{path}: not valid TOML: {exc}") from exc
    published = dict(raw.pop(PUBLISHED_SECTION, {}) or {})
    smoke = dict(raw.pop(SMOKE_SECTION, {}) or {})
    origin = _display(path)
    for section, fields in raw.items():
        if not isinstance(fields, Mapping):
            raise SettingsError(f"{origin}: top-level key {section!r} must be a [section] table")
        if section not in schema:
            raise SettingsError(f"{origin}: {benchmark} has no settings section [{section}]; "
                                f"sections: {_listed(schema)}")
    sections = {name: _build(benchmark, name, cls, raw.get(name, {}), origin) for name, cls in schema.items()}
    settings = Settings(sections, published, origin if path.is_file() else "task defaults", smoke, benchmark)
    if smoke:
        _smoke_changes(settings)  # a bad key or value in [smoke] fails now, on every model
    return settings


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _smoke_changes(settings: Settings) -> dict[str, dict[str, Any]]:
    """The ``[smoke]`` values grouped by section, each key checked against the schema."""
    origin = f"{settings.source} [smoke]"
    changes: dict[str, dict[str, Any]] = {}
    for key, value in settings.smoke.items():
        section, _, field = key.partition(".")
        if not field or "." in field or section in {PUBLISHED_SECTION, SMOKE_SECTION}:
            raise SettingsError(f"{origin}: key {key!r} must be \"section.field\"")
        if section not in settings:
            raise SettingsError(f"{origin}: {key}: no section [{section}]; sections: {_listed(settings.sections())}")
        changes.setdefault(section, {})[field] = value
    settings._replaced(changes, origin)  # checks names, types and the sections' own checks
    return changes


def apply_smoke(settings: Settings) -> tuple[Settings, dict[str, tuple[Any, Any]]]:
    """The settings with the ``[smoke]`` values applied, and ``{key: (published, smoke)}`` that changed."""
    changes = _smoke_changes(settings)
    smoked = settings._replaced(changes, f"{settings.source} [smoke]")
    changed: dict[str, tuple[Any, Any]] = {}
    for section, values in changes.items():
        for field in values:
            old, new = settings.get(section, field), smoked.get(section, field)
            if old != new:
                changed[f"{section}.{field}"] = (old, new)
    return smoked, changed


def parse_value(raw: str) -> int | float | bool | str:
    """``"3"`` → 3, ``"0.5"`` → 0.5, ``"true"``/``"false"`` → bool, anything else → the string.

    For text whose field is unknown (e.g. a CLI flag); a ``--set`` value is parsed by its field's
    declared type instead (:func:`agentlab.policy_json.parse_value_text`).
    """
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


def apply_overrides(settings: Settings, assignments: Iterable[str]) -> Settings:
    """Apply ``section.field=value`` strings, each parsed by its field's declared type and checked.

    Unknown sections or fields, values of the wrong type and values a section's checks reject
    are a :class:`SettingsError` naming the section, the field and the valid ones.
    """
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
        if section not in settings:
            raise SettingsError(f"--set {key}: unknown section [{section}]; known sections: "
                                f"{_listed(settings.sections())}")
        cls = type(settings.section(section))
        declared = field_names(cls)
        origin = f"--set {key}={raw}"
        if field not in declared:
            raise SettingsError(f"{_where(settings.benchmark, section)} has no field {field!r}"
                                f"{_did_you_mean(field, declared)} ({origin}); valid fields: "
                                f"{', '.join(sorted(declared))}")
        try:
            value = parse_value_text(cls, field, raw)
        except FieldError as exc:
            raise SettingsError(f"{_where(settings.benchmark, section)} {exc} ({origin})") from None
        settings = settings._replaced({section: {field: value}}, origin)
    return settings


# --------------------------------------------------------------------------------- variants


def variant_settings(settings: Settings, reference: Settings) -> dict[str, Any]:
    """``{"section.field": value}`` of every result-changing setting that differs from ``reference``."""
    ours, base = settings.identity(), reference.identity()
    diff: dict[str, Any] = {}
    for section in sorted(ours):
        for field, value in sorted(ours[section].items()):
            if base.get(section, {}).get(field, _MISSING) != value:
                diff[f"{section}.{field}"] = value
    return diff


_MISSING = object()


def _format_value(value: Any) -> str:
    """A value as ``--set`` would take it back (``true``, ``none``, ``1,4``)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(_format_value(v) for v in value)
    return str(value)


def variant_name(settings: Mapping[str, Any]) -> str:
    """``a.b=1;c.d=x`` (sorted keys; ``;`` because a list value holds commas), or ``default``."""
    if not settings:
        return DEFAULT_VARIANT
    return ";".join(f"{key}={_format_value(settings[key])}" for key in sorted(settings))


# --------------------------------------------------------------------------------- identity


def canonical_json(value: Any) -> str:
    """Sorted-key, whitespace-free JSON: equal configs hash equally whatever order built them."""
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
