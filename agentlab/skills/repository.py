"""The skill repository: one folder of skills, read from disk and refreshed on demand.

A skill is a packaged capability, one sub-folder of the repository's root::

    skills/
      tls-triage/
        SKILL.md          front matter (name, description), then the instructions
        docs/             optional documents, read one at a time with ``skill_read``
          report.txt
        scripts/          optional scripts, run only by an agent given the workspace
          check.py

``SKILL.md`` opens with a YAML-ish front matter block: ``key: value`` lines between two ``---``
lines (values may be quoted; an indented line continues the previous value). ``name`` and
``description`` are required; the rest of the file is the instructions. This is the shape of
trpc-agent-go's ``FSRepository`` (docs/sources.md#skills-and-evolution); the parser is a small one of our own,
not YAML.

:meth:`SkillRepository.refresh` reads the folder again. A malformed skill does not stop the
others: it becomes one :class:`SkillError` naming its file and what to fix, kept in
:attr:`SkillRepository.errors`, and every well-formed skill still loads. Folders whose name starts
with ``.`` or ``_`` (the revision history the evolution service keeps, for one) are not skills.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

#: The file every skill folder holds.
SKILL_FILE = "SKILL.md"
#: A skill name: lower-case letters, digits and single hyphens (``tls-triage``).
NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
#: Longest name and description accepted (longer ones are a malformed skill).
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024


@dataclass(frozen=True)
class Skill:
    """One skill as the repository read it."""

    name: str
    description: str
    #: The instructions: ``SKILL.md`` after its front matter.
    instructions: str
    #: The skill's folder.
    path: Path
    #: Documents under ``docs/``, as paths relative to the skill folder, sorted.
    docs: tuple[str, ...] = ()
    #: Scripts under ``scripts/``, as paths relative to the skill folder, sorted.
    scripts: tuple[str, ...] = ()
    #: Other front-matter keys, as written.
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    def listing_line(self) -> str:
        """The one line the model view shows for this skill: name and description only."""
        return f"- {self.name}: {self.description}"


@dataclass(frozen=True)
class SkillError:
    """A skill folder that could not be read: the file and what is wrong with it."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SkillFormatError(ValueError):
    """A ``SKILL.md`` that does not parse (the message says what to fix)."""


def parse_front_matter(text: str) -> tuple[dict[str, str], str]:
    """``(front matter, body)`` of a ``SKILL.md`` text; :class:`SkillFormatError` when it has none."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillFormatError("no front matter: the file must start with a '---' line, then 'name:' and "
                               "'description:' lines, then '---'")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise SkillFormatError("the front matter is not closed: add a '---' line after it") from None
    meta: dict[str, str] = {}
    key: str | None = None
    for number, line in enumerate(lines[1:end], start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t" and key is not None:
            meta[key] = f"{meta[key]} {line.strip()}".strip()
            continue
        match = re.match(r"^([A-Za-z_][\w-]*)\s*:\s*(.*)$", line)
        if match is None:
            raise SkillFormatError(f"line {number} of the front matter is not 'key: value': {line.strip()[:60]!r}")
        key = match.group(1).lower()
        value = match.group(2).strip()
        if value in (">", "|", ">-", "|-"):
            value = ""
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        meta[key] = value
    body = "\n".join(lines[end + 1:]).strip("\n")
    return meta, body


def check_skill_fields(name: str, description: str) -> None:
    """:class:`SkillFormatError` when ``name`` or ``description`` is not acceptable (the spec of a skill)."""
    if not name:
        raise SkillFormatError("the front matter has no 'name:'")
    if not NAME_PATTERN.match(name) or len(name) > MAX_NAME_CHARS:
        raise SkillFormatError(f"name {name!r} is not lower-case words joined by hyphens "
                               f"(at most {MAX_NAME_CHARS} characters), e.g. 'tls-triage'")
    if not description:
        raise SkillFormatError("the front matter has no 'description:' (one sentence saying when to use the skill)")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillFormatError(f"the description is {len(description)} characters; keep it under "
                               f"{MAX_DESCRIPTION_CHARS}")


def _files_under(folder: Path, sub: str) -> tuple[str, ...]:
    base = folder / sub
    if not base.is_dir():
        return ()
    return tuple(sorted(p.relative_to(folder).as_posix() for p in base.rglob("*")
                        if p.is_file() and not p.name.startswith(".")))


def read_skill(folder: Path) -> Skill:
    """The skill in ``folder``; :class:`SkillFormatError` (saying what to fix) when it is malformed."""
    path = folder / SKILL_FILE
    if not path.is_file():
        raise SkillFormatError(f"no {SKILL_FILE} in the skill folder (add one, or move the folder out)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SkillFormatError("not UTF-8 text") from None
    meta, body = parse_front_matter(text)
    name = meta.pop("name", "")
    description = meta.pop("description", "")
    check_skill_fields(name, description)
    if not body.strip():
        raise SkillFormatError("no instructions after the front matter")
    return Skill(name=name, description=description, instructions=body, path=folder,
                 docs=_files_under(folder, "docs"), scripts=_files_under(folder, "scripts"), extra=meta)


def render_skill_file(name: str, description: str, instructions: str) -> str:
    """The text of a ``SKILL.md`` with this name, description and instructions (what the publisher writes)."""
    one_line = " ".join(description.split())
    return f"---\nname: {name}\ndescription: {one_line}\n---\n\n{instructions.strip()}\n"


def write_skill(root: str | Path, name: str, description: str, instructions: str, *,
                docs: dict[str, str] | None = None, scripts: dict[str, str] | None = None) -> Path:
    """Create (or overwrite) the skill folder ``root/name``; ``docs`` / ``scripts``: file name -> text.

    For examples, tests and generated catalogs; the evolution service writes through its publisher.
    """
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SKILL_FILE).write_text(render_skill_file(name, description, instructions), encoding="utf-8")
    for sub, files in (("docs", docs or {}), ("scripts", scripts or {})):
        for file_name, text in files.items():
            path = folder / sub / file_name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return folder


class SkillRepository:
    """The skills of one folder (see the module docstring); read at construction and by :meth:`refresh`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._skills: dict[str, Skill] = {}
        #: The malformed skills of the last refresh, one error each.
        self.errors: list[SkillError] = []
        #: How many times the folder was read (a test can see that a refresh happened).
        self.refreshes = 0
        self.refresh()

    def refresh(self) -> list[SkillError]:
        """Read the folder again; returns the errors (also kept in :attr:`errors`).

        A missing root is an empty repository (the evolution service may create the first skill).
        Two folders declaring the same name: the first in folder order wins, the second is an error.
        """
        skills: dict[str, Skill] = {}
        errors: list[SkillError] = []
        folders = sorted(p for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else []
        for folder in folders:
            if folder.name.startswith((".", "_")):
                continue
            try:
                skill = read_skill(folder)
            except SkillFormatError as exc:
                errors.append(SkillError(folder / SKILL_FILE, str(exc)))
                continue
            if skill.name in skills:
                errors.append(SkillError(folder / SKILL_FILE, f"name {skill.name!r} is already used by "
                                         f"{skills[skill.name].path / SKILL_FILE}; rename one of them"))
                continue
            skills[skill.name] = skill
        self._skills = skills
        self.errors = errors
        self.refreshes += 1
        return errors

    def names(self) -> list[str]:
        """The skill names, sorted."""
        return sorted(self._skills)

    def list(self) -> list[Skill]:
        """Every well-formed skill, sorted by name."""
        return [self._skills[n] for n in self.names()]

    def get(self, name: str) -> Skill | None:
        """The skill called ``name``, or ``None``."""
        return self._skills.get(name)

    def require(self, name: str) -> Skill:
        """The skill called ``name``; ``KeyError`` naming the known skills otherwise."""
        skill = self._skills.get(name)
        if skill is None:
            known = ", ".join(self.names()) or "none"
            raise KeyError(f"no skill named {name!r} (known: {known})")
        return skill

    def _inside(self, skill: Skill, relative: str, kind: str, listed: tuple[str, ...]) -> Path:
        if relative not in listed:
            # The model may name a document without its folder ("report.txt" for "docs/report.txt").
            matches = [p for p in listed if p.split("/", 1)[-1] == relative]
            if len(matches) != 1:
                offered = ", ".join(listed) or "none"
                raise KeyError(f"skill {skill.name!r} has no {kind} {relative!r} (it has: {offered})")
            relative = matches[0]
        path = (skill.path / relative).resolve()
        if not path.is_relative_to(skill.path.resolve()):
            raise KeyError(f"{relative!r} is outside skill {skill.name!r}")
        return path

    def read_doc(self, name: str, doc: str) -> str:
        """The text of document ``doc`` of skill ``name`` (``KeyError`` naming what exists otherwise)."""
        skill = self.require(name)
        return self._inside(skill, doc, "document", skill.docs).read_text(encoding="utf-8", errors="replace")

    def script_path(self, name: str, script: str) -> Path:
        """The file of script ``script`` of skill ``name`` (``KeyError`` naming what exists otherwise)."""
        skill = self.require(name)
        return self._inside(skill, script, "script", skill.scripts)


__all__ = ["MAX_DESCRIPTION_CHARS", "MAX_NAME_CHARS", "NAME_PATTERN", "SKILL_FILE", "Skill", "SkillError",
           "SkillFormatError", "SkillRepository", "check_skill_fields", "parse_front_matter", "read_skill",
           "render_skill_file", "write_skill"]
