"""The optional publication gates of skill evolution: spec, safety and effectiveness checks.

Each gate is independent and runs only when the evolution policy switches it on (as in the
reference, docs/sources.md#skills-and-evolution: only the gates the application configures run;
with none, a proposal is published directly). The human gate is not a check: it parks the candidate in the
:class:`~agentlab.skills.publish.ApprovalQueue` and is handled by the evolution service.

* :func:`spec_check` — the skill is well formed: a valid name, a one-sentence description, and
  instructions within the length limit.
* :func:`safety_check` — the skill carries no secret (API keys, private keys, passwords, bearer
  tokens) and no fact private to the user whose run it came from: the user id, and the e-mail
  addresses, phone numbers, long numbers, host names and own name the user wrote in the delta.
* :func:`effectiveness_check` — the run the evidence came from worked: it ended with a final
  answer, and no tool call failed after the last successful one.

No gate calls a model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from agentlab.events import Event
from agentlab.skills.evidence import tool_failed
from agentlab.skills.repository import SkillFormatError, check_skill_fields
from agentlab.skills.review import Proposal


@dataclass(frozen=True)
class GateResult:
    """The verdict of one gate."""

    gate: str
    passed: bool
    reason: str = ""


def spec_check(proposal: Proposal, max_instructions_chars: int) -> GateResult:
    """Whether the proposal is a well-formed skill (see the module docstring)."""
    try:
        check_skill_fields(proposal.name, " ".join(proposal.description.split()))
    except SkillFormatError as exc:
        return GateResult("spec", False, str(exc))
    if not proposal.instructions.strip():
        return GateResult("spec", False, "no instructions")
    if len(proposal.instructions) > max_instructions_chars:
        return GateResult("spec", False, f"instructions are {len(proposal.instructions)} characters "
                                         f"(limit {max_instructions_chars})")
    return GateResult("spec", True)


#: Secrets, by what they look like.
SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("an API key", re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}")),
    ("an AWS access key", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a bearer token", re.compile(r"\bbearer\s+[A-Za-z0-9._~+/-]{16,}", re.IGNORECASE)),
    ("a password or token value", re.compile(r"\b(?:password|passwd|secret|token|api[_-]?key)\s*[:=]\s*\S{4,}",
                                             re.IGNORECASE)),
)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_PHONE = re.compile(r"\+?\d[\d ()-]{7,}\d")
_LONG_NUMBER = re.compile(r"\b\d{5,}\b")
_HOST = re.compile(r"\b(?:[a-z0-9-]+\.)+[a-z]{2,}\b", re.IGNORECASE)
#: A name the user gives for themselves ("my name is Alice", "I'm Alice Martin").
_OWN_NAME = re.compile(r"\b(?:[Mm]y name is|I am|I'm)\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)")


def private_values(delta: Sequence[Event], user_id: str = "") -> set[str]:
    """What the user wrote in ``delta`` that identifies them or their systems (lower-cased)."""
    found = {user_id.lower()} if len(user_id) >= 3 else set()
    for event in delta:
        if event.role != "user":
            continue
        text = event.text
        for pattern in (_EMAIL, _PHONE, _LONG_NUMBER, _HOST):
            found.update(m.group(0).strip().lower() for m in pattern.finditer(text))
        found.update(m.group(1).lower() for m in _OWN_NAME.finditer(text))
    return {v for v in found if v}


def safety_check(proposal: Proposal, delta: Sequence[Event], user_id: str = "") -> GateResult:
    """Whether the proposal is free of secrets and of the user's private facts (see the module docstring)."""
    text = "\n".join((proposal.name, proposal.description, proposal.instructions))
    for label, pattern in SECRET_PATTERNS:
        if pattern.search(text):
            return GateResult("safety", False, f"the skill contains {label}")
    lowered = text.lower()
    leaked = sorted(v for v in private_values(delta, user_id) if v in lowered)
    if leaked:
        return GateResult("safety", False, "the skill repeats what the user wrote about themselves or their "
                                           f"systems: {', '.join(leaked)}")
    if _EMAIL.search(text):
        return GateResult("safety", False, "the skill contains an e-mail address")
    return GateResult("safety", True)


def effectiveness_check(delta: Sequence[Event]) -> GateResult:
    """Whether the run the delta records ended well (see the module docstring)."""
    if not any(e.is_final_response() for e in delta):
        return GateResult("effectiveness", False, "the run gave no final answer")
    results = [e for e in delta if e.is_tool_result()]
    if results and tool_failed(results[-1]):
        return GateResult("effectiveness", False, "the run's last tool call failed")
    if any(e.error for e in delta):
        return GateResult("effectiveness", False, "the run recorded an error")
    return GateResult("effectiveness", True)


__all__ = ["SECRET_PATTERNS", "GateResult", "effectiveness_check", "private_values", "safety_check", "spec_check"]
