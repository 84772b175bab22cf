"""Skills in the model view by progressive disclosure: a listing, then ``skill_load`` / ``skill_read`` / ``skill_run``.

:class:`SkillsMechanism` is a :class:`~agentlab.core.ContextMechanism` over a
:class:`~agentlab.skills.repository.SkillRepository`:

* **Listing.** Every request's system text lists each skill's name and description only
  (stage :data:`SKILLS`, after the instruction): never the instructions, documents or scripts.
* **Loading.** ``skill_load(name)`` returns the instructions (and names the skill's documents,
  and its scripts when the profile allows running them); ``skill_read(name, doc)`` returns one
  document. Each records what it loaded as a state delta of the session (state keys
  :data:`LOADED_KEY` and :data:`DOCS_READ_KEY`, written through the session service), so the
  next call knows what was read: the listing marks the loaded skills, and loading one again
  answers with a short note instead of repeating the instructions, which are already in the
  conversation (``reload=true`` fetches them again, e.g. after a summary cut them away).
* **Profiles** decide the tool surface (:class:`SkillsPolicy.profile`): ``read_only`` gets
  ``skill_load`` and ``skill_read`` (guidance only); ``workspace`` adds ``skill_run``, which runs
  one of a skill's scripts through :func:`agentlab.skills.scripts.run_script` (the code
  workspace, :class:`agentlab.executor.CodeExecutor`: a timeout, an output cap, no sandbox). A skill is only guidance unless
  the agent was explicitly given the workspace.

This follows trpc-agent-go's skill tools (docs/sources.md#skills-and-evolution); the text of the listing and
the tool descriptions is ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from agentlab.core.mechanism import ContextMechanism, EventsRole, RequestDraft, Stage, StagedProcessor
from agentlab.core.tools import FunctionTool, Tool, ToolContext
from agentlab.policy_json import PolicyJSON
from agentlab.skills.repository import SkillRepository
from agentlab.skills.scripts import run_script

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation
    from agentlab.core.services import ServiceRegistry

#: Where the listing goes: right after the agent's instruction, before memory (a stable prefix).
SKILLS = Stage("skills", 150)
#: Session state key: the names of the skills loaded in this session, in load order.
LOADED_KEY = "skills:loaded"
#: Session state key: the documents read, as ``"<skill>/<doc>"``.
DOCS_READ_KEY = "skills:docs_read"

SkillsProfile = Literal["read_only", "workspace"]
PROFILES: tuple[str, ...] = ("read_only", "workspace")

LISTING_HEADER = ("Skills you can use. Each line is a skill's name and what it is for; call skill_load "
                  "with the name to read its instructions before following it.")


@dataclass(frozen=True)
class SkillsPolicy(PolicyJSON):
    """How skills enter the model view and which skill tools the agent gets."""

    #: ``read_only``: skill_load and skill_read (guidance only); ``workspace``: also skill_run.
    profile: SkillsProfile = "read_only"
    #: Seconds a script may run before its process group is killed.
    script_timeout_seconds: float = 30.0
    #: Bytes of a script's (merged) output returned to the model; the rest is cut.
    script_output_cap_bytes: int = 16_000

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"skills profile {self.profile!r} is unknown: use one of {', '.join(PROFILES)}")
        if self.script_timeout_seconds <= 0 or self.script_output_cap_bytes <= 0:
            raise ValueError("script_timeout_seconds and script_output_cap_bytes must be positive")

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The skill tools this profile offers."""
        return ("skill_load", "skill_read") + (("skill_run",) if self.profile == "workspace" else ())


def loaded_skills(state: dict[str, Any]) -> list[str]:
    """The skills a session's state records as loaded."""
    value = state.get(LOADED_KEY)
    return [str(v) for v in value] if isinstance(value, list) else []


def render_listing(repository: SkillRepository, loaded: Sequence[str] = ()) -> str:
    """The system text listing the skills (names and descriptions), marking the ones already loaded."""
    lines = [LISTING_HEADER, *(s.listing_line() for s in repository.list())]
    shown = [n for n in loaded if repository.get(n) is not None]
    if shown:
        lines.append("Already loaded in this conversation (their instructions are above; do not load them "
                     f"again): {', '.join(shown)}")
    return "\n".join(lines)


class SkillListingProcessor:
    """Adds the skill listing to the system text (reads session state; never touches the events)."""

    name = "skill_listing"
    events_role: ClassVar[EventsRole] = EventsRole.UNTOUCHED

    def __init__(self, repository: SkillRepository) -> None:
        self.repository = repository

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        """Append the listing to ``draft.system_parts`` when the repository holds any skill."""
        if self.repository.names():
            draft.system_parts.append(render_listing(self.repository, loaded_skills(inv.session.state)))


async def _record(ctx: ToolContext, key: str, item: str) -> None:
    inv = ctx.invocation
    current = inv.session.state.get(key)
    items = [str(v) for v in current] if isinstance(current, list) else []
    if item not in items:
        await inv.session_service.update_state(inv.session, {key: [*items, item]})


def skill_tools(repository: SkillRepository, policy: SkillsPolicy) -> list[Tool]:
    """The skill tools ``policy``'s profile offers, over ``repository``."""

    async def skill_load(name: str, ctx: ToolContext, reload: bool = False) -> str:
        """Read a skill's instructions (once per conversation).

        Args:
            name: The skill's name, as listed.
            reload: Fetch the instructions again even though they were loaded before.
        """
        skill = repository.require(name)
        if name in loaded_skills(ctx.invocation.session.state) and not reload:
            return (f"Skill {name!r} is already loaded: its instructions are earlier in this conversation. "
                    "Follow them; pass reload=true only if they are no longer visible.")
        await _record(ctx, LOADED_KEY, name)
        parts = [f"Instructions of skill {name!r}:", skill.instructions]
        if skill.docs:
            parts.append("Documents (read one with skill_read): " + ", ".join(skill.docs))
        if skill.scripts and policy.profile == "workspace":
            parts.append("Scripts (run one with skill_run): " + ", ".join(skill.scripts))
        return "\n\n".join(parts)

    async def skill_read(name: str, doc: str, ctx: ToolContext) -> str:
        """Read one document of a skill, when its instructions point to it.

        Args:
            name: The skill's name.
            doc: The document's path, as skill_load listed it.
        """
        text = repository.read_doc(name, doc)
        await _record(ctx, DOCS_READ_KEY, f"{name}/{doc}")
        return text

    async def skill_run(name: str, script: str, args: list[str] | None = None) -> str:
        """Run one of a skill's scripts and return its exit code and output.

        Args:
            name: The skill's name.
            script: The script's path, as skill_load listed it.
            args: Command-line arguments for the script.
        """
        path = repository.script_path(name, script)
        result = await run_script(path, [str(a) for a in args or []],
                                  timeout_seconds=policy.script_timeout_seconds,
                                  output_cap_bytes=policy.script_output_cap_bytes,
                                  extra_env={"SKILL_DIR": str(repository.require(name).path)})
        return result.render()

    tools: list[Tool] = [FunctionTool(skill_load), FunctionTool(skill_read)]
    if policy.profile == "workspace":
        tools.append(FunctionTool(skill_run))
    return tools


class SkillsMechanism(ContextMechanism):
    """The skill listing and the profile's skill tools in every request (see the module docstring)."""

    def __init__(self, repository: SkillRepository, policy: SkillsPolicy | None = None) -> None:
        self.repository = repository
        self.policy = policy or SkillsPolicy()
        self._tools = skill_tools(repository, self.policy)
        self._processor = SkillListingProcessor(repository)

    def describe(self) -> str:
        """``"skills"`` and the profile."""
        return f"skills ({self.policy.profile})"

    def request_processors(self) -> Sequence[StagedProcessor]:
        """The listing, at stage :data:`SKILLS`."""
        return [StagedProcessor(SKILLS, self._processor)]

    def request_tools(self, inv: Invocation) -> Sequence[Tool]:
        """The profile's skill tools (none while the repository is empty)."""
        return list(self._tools) if self.repository.names() else []

    def open(self, services: ServiceRegistry) -> None:
        """Register the repository, so the evolution service (and anything else) finds it by type."""
        services.add(self.repository, replace=False)


__all__ = ["DOCS_READ_KEY", "LISTING_HEADER", "LOADED_KEY", "PROFILES", "SKILLS", "SkillListingProcessor",
           "SkillsMechanism", "SkillsPolicy", "SkillsProfile", "loaded_skills", "render_listing", "skill_tools"]
