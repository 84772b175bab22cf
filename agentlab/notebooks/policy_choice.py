"""What one side of the compaction explorer sets, as the runtime's policies and as a benchmark run.

:class:`PolicyChoice` is the explorer's flat set of knobs; it builds the real
:class:`~agentlab.summary.SummaryPolicy`, :class:`~agentlab.compaction.CompactionPolicy` and
:class:`~agentlab.recall.RecallPolicy`, and :func:`run_recipe` turns it into the ``--set`` flags
that run the same policy as a benchmark variant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentlab.compaction import CompactionPolicy
from agentlab.notebooks.results import partition_settings
from agentlab.recall import RecallPolicy
from agentlab.summary import SummaryPolicy

RECALL_CHOICES = ("none", "search+load", "load only", "search only")


@dataclass(frozen=True)
class PolicyChoice:
    """What one side of the explorer sets.

    Zero switches a summary check off; all three off = no summary at all (a SummaryPolicy without
    checks would summarise at every chance).
    """

    summary_events_over: int = 0
    summary_tokens_over: int = 0
    summary_context_ratio: float = 0.0
    compaction: bool = True
    keep_recent_requests: int = 1
    tool_result_max_tokens: int = 1024
    oversized_tool_result_max_tokens: int = 0
    recall_tools: str = "search+load"
    #: The runner's background worker keeps the summary up to date as events are appended. Off:
    #: the history arrived without it (e.g. imported or seeded), so only the pre-model path can
    #: summarise — the synchronous summary then does the work right before the request is sent.
    background_summary: bool = True

    def __post_init__(self) -> None:
        if self.recall_tools not in RECALL_CHOICES:
            raise ValueError(f"recall_tools must be one of {', '.join(RECALL_CHOICES)}, got {self.recall_tools!r}")

    def summary_policy(self) -> SummaryPolicy | None:
        """The rolling summary these checks configure, or None when every check is off."""
        if not (self.summary_events_over or self.summary_tokens_over or self.summary_context_ratio):
            return None
        return SummaryPolicy(
            events_over=self.summary_events_over or None,
            tokens_over=self.summary_tokens_over or None,
            context_ratio=self.summary_context_ratio or None,
            checks_mode="any",
        )

    def compaction_policy(self) -> CompactionPolicy:
        """The compaction passes with this side's thresholds."""
        return CompactionPolicy(enabled=self.compaction, keep_recent_requests=self.keep_recent_requests,
                                tool_result_max_tokens=self.tool_result_max_tokens,
                                oversized_tool_result_max_tokens=self.oversized_tool_result_max_tokens)

    def recall_policy(self) -> RecallPolicy | None:
        """The recall tools offered to the model (their schemas cost request tokens), or None."""
        if self.recall_tools == "none":
            return None
        return RecallPolicy(search_tool=self.recall_tools in ("search+load", "search only"),
                            load_tool=self.recall_tools in ("search+load", "load only"))

    def settings(self) -> dict[str, Any]:
        """The policy as ``section.field`` settings, named after the policies' own fields.

        A summary check at 0 is off, so only the checks in use are listed (with ``checks_mode``
        any, as the explorer combines them). ``background_summary`` is not a setting: it models
        how the history arrived, which a benchmark decides.
        """
        out: dict[str, Any] = {}
        for name, value in (("events_over", self.summary_events_over), ("tokens_over", self.summary_tokens_over),
                            ("context_ratio", self.summary_context_ratio)):
            if value:
                out[f"summary.{name}"] = value
        if out:
            out["summary.checks_mode"] = "any"
        out.update({
            "compaction.enabled": self.compaction,
            "compaction.keep_recent_requests": self.keep_recent_requests,
            "compaction.tool_result_max_tokens": self.tool_result_max_tokens,
            "compaction.oversized_tool_result_max_tokens": self.oversized_tool_result_max_tokens,
            "recall.search_tool": self.recall_tools in ("search+load", "search only"),
            "recall.load_tool": self.recall_tools in ("search+load", "load only"),
        })
        return out


@dataclass(frozen=True)
class RunRecipe:
    """How to run a policy as a benchmark variant: the command, and what it cannot carry."""

    benchmark: str
    mode: str
    flags: list[str]
    #: Settings of the policy that the benchmark does not read: the run would not reflect them.
    unsupported: list[str]
    toml: str

    @property
    def command(self) -> str:
        """The shell command that runs the variant."""
        sets = " ".join(f"--set {flag}" for flag in self.flags)
        return f"python -m agentlab.bench {self.benchmark} --mode {self.mode} {sets}".rstrip()

    def describe(self) -> str:
        """The command, and below it as a comment the settings it cannot carry."""
        text = self.command
        if self.unsupported:
            text += ("\n# not read by " + self.benchmark + " (the run would not reflect these): "
                     + ", ".join(self.unsupported))
        return text


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def run_recipe(choice: PolicyChoice, benchmark: str = "mtbench101", mode: str = "summary") -> RunRecipe:
    """The ``--set`` flags (and TOML) that run ``choice`` as a variant of ``benchmark``/``mode``.

    Only the settings the benchmark reads become flags; the rest are listed as unsupported rather
    than dropped silently (the CLI refuses unknown settings, so they could not be passed anyway).
    """
    settings = choice.settings()
    assignments = [f"{key}={_toml_value(value).strip(chr(34))}" for key, value in settings.items()]
    kept, missing = partition_settings(benchmark, assignments)
    sections: dict[str, list[str]] = {}
    for key, value in settings.items():
        section, field_name = key.split(".")
        sections.setdefault(section, []).append(f"{field_name} = {_toml_value(value)}")
    toml = "\n\n".join(f"[{section}]\n" + "\n".join(lines) for section, lines in sections.items())
    return RunRecipe(benchmark, mode, kept, [m.split("=", 1)[0] for m in missing], toml)
