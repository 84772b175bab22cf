"""Skills: packaged capabilities the model discovers by name, loads when needed, and that are learned after runs.

* :class:`SkillRepository` (:mod:`~agentlab.skills.repository`) — one folder per skill
  (``SKILL.md`` with a front matter, optional ``docs/`` and ``scripts/``), refreshed on demand;
  a malformed skill is one :class:`SkillError` and the rest still load.
* :class:`SkillsMechanism` and :class:`SkillsPolicy` (:mod:`~agentlab.skills.mechanism`) —
  progressive disclosure: a listing of names and descriptions in the model view, ``skill_load``,
  ``skill_read`` and (profile ``workspace``) ``skill_run``; loaded skills recorded in session state.
* :class:`EvolutionMechanism`, :class:`EvolutionPolicy`, :class:`EvolutionService`
  (:mod:`~agentlab.skills.evolution`) — post-run review of the session delta: evidence gate,
  reviewer, reconciliation, optional gates, publication of a new revision. Never writes memory.

The shape follows trpc-agent-go's skill repository, tools and evolution service
(docs/sources.md#skills-and-evolution).
"""

from __future__ import annotations

from agentlab.skills.evidence import Evidence, Signal, find_evidence
from agentlab.skills.evolution import (
    CURSOR_KEY,
    PENDING_KEY,
    EvolutionMechanism,
    EvolutionPolicy,
    EvolutionResult,
    EvolutionService,
    evolution_service,
)
from agentlab.skills.gates import GateResult
from agentlab.skills.mechanism import DOCS_READ_KEY, LOADED_KEY, SKILLS, SkillsMechanism, SkillsPolicy
from agentlab.skills.publish import ApprovalQueue, Candidate, Revision, SkillPublisher
from agentlab.skills.repository import Skill, SkillError, SkillRepository
from agentlab.skills.review import Proposal, reconcile
from agentlab.skills.scripts import ScriptResult, run_script

__all__ = [
    "CURSOR_KEY",
    "DOCS_READ_KEY",
    "LOADED_KEY",
    "PENDING_KEY",
    "SKILLS",
    "ApprovalQueue",
    "Candidate",
    "Evidence",
    "EvolutionMechanism",
    "EvolutionPolicy",
    "EvolutionResult",
    "EvolutionService",
    "GateResult",
    "Proposal",
    "Revision",
    "ScriptResult",
    "Signal",
    "Skill",
    "SkillError",
    "SkillPublisher",
    "SkillRepository",
    "SkillsMechanism",
    "SkillsPolicy",
    "evolution_service",
    "find_evidence",
    "reconcile",
    "run_script",
]
