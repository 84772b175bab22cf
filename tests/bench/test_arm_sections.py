"""Every benchmark takes a peer policy's settings as ``[<policy name>]`` (``--set name.field=value``).

The documented variants of an absolute token trigger (``trigger_fraction`` of the context budget)
are reachable from the command line; a section at the source's defaults stays out of the run id
(so no id made before these sections existed moves), a changed one goes in; and a dry run's
projection sees the run's ``--context-budget``.
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli

from agentlab.artifacts.offload import ArtifactOffloadPolicy
from agentlab.bench.config import SettingsError, apply_overrides, arm_sections, load_settings, peer_sections
from agentlab.bench.spec import resolve_run
from agentlab.bench.tasks import get_task
from agentlab.model.base import ModelInfo
from agentlab.policies import POLICIES
from agentlab.policies.langchain_summarization import LangChainSummarizationPolicy


def run_ids(benchmark: str, arm: str, *overrides: str) -> dict[str, str]:
    spec = resolve_run(benchmark, mode=arm, model="openai:gpt-4o-mini", overrides=list(overrides), limit=1)
    return spec.bind(ModelInfo("openai:gpt-4o-mini", 128_000, "test"), "sha").run_ids()


@pytest.mark.parametrize("benchmark", ["qmsum", "locomo", "longmemeval", "mtbench101"])
def test_every_peer_section_is_there_with_the_sources_defaults_and_out_of_the_identity(benchmark: str) -> None:
    settings = load_settings(benchmark, get_task(benchmark).default_settings())
    assert set(peer_sections()) == set(POLICIES)
    assert set(arm_sections()) == {"compaction", "artifact_offload", *POLICIES}
    assert "compaction" not in get_task(benchmark).default_settings()  # one home: config.arm_sections
    for name, entry in POLICIES.items():
        assert settings.section(name) == entry.policy_class()
        assert name not in settings.identity()
    assert settings.section("artifact_offload") == ArtifactOffloadPolicy()
    assert "artifact_offload" not in settings.identity()


def test_a_changed_peer_setting_reaches_the_arm_and_its_run_id_only() -> None:
    settings = apply_overrides(load_settings("qmsum", get_task("qmsum").default_settings()),
                               ["langchain_summarization.trigger_fraction=0.5"])
    assert settings.section("langchain_summarization") == LangChainSummarizationPolicy(trigger_fraction=0.5)
    assert settings.identity()["langchain_summarization"]["trigger_fraction"] == 0.5
    plain = run_ids("qmsum", "langchain_summarization")
    varied = run_ids("qmsum", "langchain_summarization", "langchain_summarization.trigger_fraction=0.5")
    assert varied["langchain_summarization"] != plain["langchain_summarization"]


def test_a_bad_peer_setting_is_an_error_naming_the_field() -> None:
    settings = load_settings("qmsum", get_task("qmsum").default_settings())
    with pytest.raises(SettingsError, match="trigger_fractoin.*trigger_fraction"):
        apply_overrides(settings, ["langchain_clear_tool_uses.trigger_fractoin=0.5"])
    with pytest.raises(SettingsError, match=r"must be in \(0, 1\]"):
        apply_overrides(settings, ["langchain_clear_tool_uses.trigger_fraction=2"])


def test_the_dry_run_projects_at_the_context_budget_and_the_fraction_variant_fires() -> None:
    base = ["qmsum", "--arm", "langchain_clear_tool_uses", "--set", "dataset.delivery=tool_results", "--limit", "2",
            "--dry-run", "--json"]

    def avg(*extra: str) -> float:
        code, out, err = run_cli(*base, *extra)
        assert code == 0, err
        return float(json.loads(out)["avg_prompt_tokens"])

    source = avg("--context-budget", "8192")  # the source's absolute 100k trigger: nothing cleared
    assert avg() == source
    fraction = avg("--context-budget", "8192", "--set", "langchain_clear_tool_uses.trigger_fraction=0.5")
    assert fraction < source / 2
    # without a budget the fraction is of the dry run's 128k window: QMSum's reads stay under it
    assert avg("--set", "langchain_clear_tool_uses.trigger_fraction=0.5") == source


def test_a_task_modes_dry_run_says_the_budget_is_not_applied_to_it() -> None:
    code, out, err = run_cli("qmsum", "--mode", "summary", "--dry-run", "--json", "--limit", "1",
                             "--context-budget", "8192")
    assert code == 0, err
    assert "not applied" in json.loads(out)["context_budget_note"]
    code, out, err = run_cli("qmsum", "--arm", "inspect_trim", "--dry-run", "--json", "--limit", "1",
                             "--context-budget", "8192")
    assert code == 0, err
    assert "context_budget_note" not in json.loads(out)
