"""Publishing skill revisions, with history, and the human approval queue.

:class:`SkillPublisher` writes a proposal as a new revision of a skill in the repository's folder:

* the revision's text and a small JSON record (revision number, proposal id, action, where the
  evidence came from, when) go to ``<root>/.history/<name>/<nnnn>.md`` / ``.json`` — every
  revision is kept;
* then ``<root>/<name>/SKILL.md`` is replaced atomically (a temporary file renamed over it), and
  the repository is refreshed, so the next run lists and loads the new body.

Publication is **idempotent per proposal id**: publishing an id that a revision already records
returns that revision (and rewrites ``SKILL.md`` from it if a crash stopped between the two
writes) instead of writing a second one. That, with the pending record the evolution service
keeps in session state, is why a crash between review and publish neither loses the proposal nor
publishes it twice.

:class:`ApprovalQueue` holds candidates that wait for a person (the human gate): one JSON file,
``<root>/.approvals.json``, rewritten atomically; :meth:`ApprovalQueue.decide` records an approval
or a rejection.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentlab.skills.repository import SKILL_FILE, SkillRepository, render_skill_file
from agentlab.skills.review import Proposal

HISTORY_DIR = ".history"
APPROVALS_FILE = ".approvals.json"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


@dataclass(frozen=True)
class Revision:
    """One published revision of a skill."""

    name: str
    number: int
    proposal_id: str
    action: str
    source: str
    published_at: float
    #: ``True`` when this call found the revision already written (nothing new was published).
    already_published: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON record kept beside the revision's text."""
        return {"name": self.name, "number": self.number, "proposal_id": self.proposal_id, "action": self.action,
                "source": self.source, "published_at": self.published_at}


class SkillPublisher:
    """Writes revisions into ``repository``'s folder and refreshes it (see the module docstring)."""

    def __init__(self, repository: SkillRepository) -> None:
        self.repository = repository
        self.root = repository.root

    def history(self, name: str) -> list[Revision]:
        """Every revision of skill ``name``, oldest first."""
        folder = self.root / HISTORY_DIR / name
        if not folder.is_dir():
            return []
        out = []
        for path in sorted(folder.glob("*.json")):
            data = json.loads(path.read_text(encoding="utf-8"))
            out.append(Revision(data["name"], int(data["number"]), data["proposal_id"], data["action"],
                                data.get("source", ""), float(data["published_at"])))
        return out

    def revision_text(self, name: str, number: int) -> str:
        """The ``SKILL.md`` text of revision ``number`` of ``name``."""
        return (self.root / HISTORY_DIR / name / f"{number:04d}.md").read_text(encoding="utf-8")

    def find(self, proposal_id: str) -> Revision | None:
        """The revision a proposal id was published as, if any."""
        base = self.root / HISTORY_DIR
        if not base.is_dir():
            return None
        for folder in sorted(p for p in base.iterdir() if p.is_dir()):
            for revision in self.history(folder.name):
                if revision.proposal_id == proposal_id:
                    return revision
        return None

    def _folder_of(self, name: str) -> Path:
        skill = self.repository.get(name)
        return skill.path if skill is not None else self.root / name

    def publish(self, proposal: Proposal, proposal_id: str, *, source: str = "") -> Revision:
        """Write ``proposal`` as the next revision of its skill (idempotent per ``proposal_id``)."""
        if proposal.action not in ("create", "update"):
            raise ValueError(f"only create and update proposals are published, not {proposal.action!r}")
        found = self.find(proposal_id)
        if found is not None:
            latest = self.history(found.name)[-1]
            if latest.number == found.number:  # repair a crash between the history write and SKILL.md
                path = self._folder_of(found.name) / SKILL_FILE
                text = self.revision_text(found.name, found.number)
                if not path.is_file() or path.read_text(encoding="utf-8") != text:
                    _write_atomic(path, text)
                    self.repository.refresh()
            return Revision(**{**found.to_dict(), "already_published": True})
        text = render_skill_file(proposal.name, proposal.description, proposal.instructions)
        number = len(self.history(proposal.name)) + 1
        revision = Revision(proposal.name, number, proposal_id, proposal.action, source, time.time())
        history = self.root / HISTORY_DIR / proposal.name
        _write_atomic(history / f"{number:04d}.md", text)
        _write_atomic(history / f"{number:04d}.json", json.dumps(revision.to_dict(), sort_keys=True))
        _write_atomic(self._folder_of(proposal.name) / SKILL_FILE, text)
        self.repository.refresh()
        return revision


@dataclass(frozen=True)
class Candidate:
    """A proposal waiting for (or decided by) a person."""

    id: str
    proposal: Proposal
    source: str
    status: str = "pending"
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"id": self.id, "proposal": self.proposal.to_dict(), "source": self.source, "status": self.status,
                "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        """Read :meth:`to_dict` output back."""
        return cls(data["id"], Proposal.from_dict(data["proposal"]), data.get("source", ""),
                   data.get("status", "pending"), data.get("reason", ""))


class ApprovalQueue:
    """Candidates awaiting a human decision, in one JSON file beside the skills."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / APPROVALS_FILE

    def _load(self) -> dict[str, Candidate]:
        if not self.path.is_file():
            return {}
        return {c["id"]: Candidate.from_dict(c) for c in json.loads(self.path.read_text(encoding="utf-8"))}

    def _save(self, candidates: dict[str, Candidate]) -> None:
        _write_atomic(self.path, json.dumps([c.to_dict() for c in candidates.values()], indent=1))

    def submit(self, candidate_id: str, proposal: Proposal, source: str) -> Candidate:
        """Park a candidate (submitting the same id again keeps the first)."""
        candidates = self._load()
        if candidate_id not in candidates:
            candidates[candidate_id] = Candidate(candidate_id, proposal, source)
            self._save(candidates)
        return candidates[candidate_id]

    def get(self, candidate_id: str) -> Candidate:
        """The candidate with this id; ``KeyError`` naming the pending ones otherwise."""
        candidates = self._load()
        if candidate_id not in candidates:
            pending = ", ".join(c.id for c in candidates.values() if c.status == "pending") or "none"
            raise KeyError(f"no candidate {candidate_id!r} in {self.path} (pending: {pending})")
        return candidates[candidate_id]

    def pending(self) -> list[Candidate]:
        """The candidates still waiting, in submission order."""
        return [c for c in self._load().values() if c.status == "pending"]

    def decide(self, candidate_id: str, status: str, reason: str = "") -> Candidate:
        """Record ``approved`` or ``rejected`` for a pending candidate."""
        if status not in ("approved", "rejected"):
            raise ValueError(f"a decision is 'approved' or 'rejected', not {status!r}")
        candidates = self._load()
        current = self.get(candidate_id)
        if current.status != "pending":
            raise ValueError(f"candidate {candidate_id!r} was already {current.status}")
        candidates[candidate_id] = Candidate(current.id, current.proposal, current.source, status, reason)
        self._save(candidates)
        return candidates[candidate_id]


__all__ = ["APPROVALS_FILE", "HISTORY_DIR", "ApprovalQueue", "Candidate", "Revision", "SkillPublisher"]
