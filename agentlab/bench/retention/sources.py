"""The recorded trajectories a ``trajectories`` run replays: the pinned datasets and a user's own Claude Code logs.

:func:`load_selected` loads the chosen names — ``tau_bench`` and ``swe_agent``
(:mod:`agentlab.bench.datasets.trajectories`), ``claude_code``
(:mod:`agentlab.bench.datasets.claude_code`: the 300 pinned sessions, or, with ``sessions_dir``, every
``*.jsonl`` of a folder of the user's own logs) — into one :class:`Selected` whose :attr:`Selected.note`
says what the output must say: whose data it is, the malformed lines skipped (file and line), the
``api_error`` lines, Claude Code's own compactions and the sub-agent threads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from agentlab.bench.datasets.claude_code import ClaudeCodeData, load_claude_code, load_sessions_dir
from agentlab.bench.datasets.trajectories import Trajectory, load_trajectories

CLAUDE_CODE = "claude_code"
#: Skipped lines named one by one in the note; past this many, only their count.
NAMED_SKIPS = 5


@dataclass(frozen=True)
class Selected:
    """The trajectories loaded, one fingerprint, and the note the output prints (empty when nothing to say)."""

    trajectories: tuple[Trajectory, ...]
    sha256: str
    note: str = ""
    claude_code: ClaudeCodeData | None = None


def claude_code_note(data: ClaudeCodeData) -> str:
    """One line on a Claude Code load: whose data, threads, skipped lines (named), api errors, compactions."""
    whose = ("the user's own Claude Code logs (--sessions-dir; not pinned, no sha256 checked)" if data.origin == "user"
             else "the pinned Claude Code sessions (sha256 checked; no license: never redistribute)")
    agents = sum(1 for t in data.trajectories if t.metadata.get("thread", "main") != "main")
    after = sum(1 for t in data.trajectories if t.metadata.get("after_compaction"))
    skipped = "; ".join(str(s) for s in data.skipped[:NAMED_SKIPS])
    more = f" and {len(data.skipped) - NAMED_SKIPS} more" if len(data.skipped) > NAMED_SKIPS else ""
    return (f"{whose}: {data.files} files, {len(data.trajectories)} threads ({agents} sub-agent threads, "
            f"{after} stretches after Claude Code's own compactions); {data.compactions} compaction boundaries, "
            f"{data.api_errors} api_error lines and {data.synthetic} synthetic assistant lines (not messages); "
            f"{len(data.skipped)} malformed lines skipped" + (f" ({skipped}{more})" if data.skipped else ""))


def load_selected(names: Sequence[str], sessions_dir: str = "", *, strict: bool = False,
                  limit: int | None = None) -> Selected:
    """The trajectories of ``names`` in a fixed order (tau_bench, swe_agent, claude_code)."""
    pinned = tuple(n for n in names if n != CLAUDE_CODE)
    out: list[Trajectory] = []
    digests: list[str] = []
    if pinned:
        data = load_trajectories(pinned)
        out += data.trajectories
        digests.append(data.sha256)
    cc: ClaudeCodeData | None = None
    if CLAUDE_CODE in names:
        cc = load_sessions_dir(sessions_dir, strict=strict) if sessions_dir else load_claude_code(strict=strict,
                                                                                                  limit=limit)
        out += cc.trajectories
        digests.append(cc.sha256)
    sha = digests[0] if len(digests) == 1 else hashlib.sha256("\n".join(digests).encode()).hexdigest()
    return Selected(tuple(out), sha, f"; {claude_code_note(cc)}" if cc is not None else "", cc)


__all__ = ["CLAUDE_CODE", "Selected", "claude_code_note", "load_selected"]
