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
    #: Settings of the policy that this benchmark's arm does not read: the run would not reflect them.
    unsupported: list[str]
    toml: str

    @property
    def command(self) -> str:
        """The shell command that runs the variant."""
        sets = " ".join(f"--set {flag}" for flag in self.flags)
        return f"python -m agentlab.bench {self.benchmark} --arm {self.mode} {sets}".rstrip()

    def describe(self) -> str:
        """The command, and below it as a comment the settings it cannot carry."""
        text = self.command
        if self.unsupported:
            text += (f"\n# not read by {self.benchmark}/{self.mode} (the run would not reflect these): "
                     + ", ".join(self.unsupported))
        return text


#: Where a compaction-only choice runs: the ``compaction`` arm on LoCoMo (the explorer's data), its
#: history delivered as tool results so that the passes have results to act on.
COMPACTION_RECIPE = ("locomo", "compaction", ("dataset.delivery=tool_results",))
#: Where a choice with a summary runs (the explorer's default): MT-Bench-101's summary mode.
SUMMARY_RECIPE = ("mtbench101", "summary", ())


def sections_read(benchmark: str, arm: str) -> set[str]:
    """The settings sections a run of ``benchmark`` with ``arm`` reads.

    A generic arm declares them (``Arm.sections``); a task mode reads the sections whose typed
    objects are the policies it runs (``Task.policies``). Other sections are known to the
    benchmark but do not change what that arm does.
    """
    from agentlab.bench.config import load_settings
    from agentlab.bench.tasks import get_task

    task = get_task(benchmark)
    chosen = task.arm(arm)
    if chosen.generic:
        return set(chosen.sections)
    settings = load_settings(task.name, task.default_settings())
    policies = task.policies(arm, settings)
    return {name for name in settings.sections() if any(settings.section(name) is p for p in policies)}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def run_recipe(choice: PolicyChoice, benchmark: str | None = None, mode: str | None = None) -> RunRecipe:
    """The ``--set`` flags (and TOML) that run ``choice`` as a variant of ``benchmark``/``mode`` (an arm).

    Without them: a choice with a summary runs as :data:`SUMMARY_RECIPE`, a compaction-only one
    as :data:`COMPACTION_RECIPE`. Only the settings that arm reads (:func:`sections_read`) become
    flags; the rest are listed as unsupported rather than dropped silently. The ``compaction``
    arms switch compaction on themselves, so ``compaction.enabled`` is not passed to them.
    """
    if benchmark is None or mode is None:
        auto = SUMMARY_RECIPE if choice.summary_policy() is not None or not choice.compaction else COMPACTION_RECIPE
        benchmark, mode = benchmark or auto[0], mode or auto[1]
    extra = list(COMPACTION_RECIPE[2]) if (benchmark, mode) == COMPACTION_RECIPE[:2] else []
    settings = choice.settings()
    read = sections_read(benchmark, mode)
    if "compaction" in read and mode.startswith("compaction"):
        settings.pop("compaction.enabled", None)
    assignments = [f"{key}={_toml_value(value).strip(chr(34))}" for key, value in settings.items()]
    known, missing = partition_settings(benchmark, assignments)
    kept = [a for a in known if a.split(".", 1)[0] in read]
    missing += [a for a in known if a.split(".", 1)[0] not in read]
    kept = extra + kept
    sections: dict[str, list[str]] = {}
    for key, value in settings.items():
        section, field_name = key.split(".")
        sections.setdefault(section, []).append(f"{field_name} = {_toml_value(value)}")
    toml = "\n\n".join(f"[{section}]\n" + "\n".join(lines) for section, lines in sections.items())
    return RunRecipe(benchmark, mode, kept, [m.split("=", 1)[0] for m in missing], toml)
