"""The compaction explorer's widget callbacks, driven directly: change a control, the shown token
counts change (and the ledger never does)."""

from __future__ import annotations

import re

import pytest

from agentlab.notebooks import explorer as ex

pytest.importorskip("ipywidgets")


def small_ledger(units: int = 24) -> ex.Ledger:
    turns = []
    for i in range(units):
        turns.append(("user", f"Question {i}: what did we decide about item {i} of the budget review?", 1000.0 + 2 * i))
        turns.append(("assistant", f"For item {i} we agreed to revisit the numbers next week with the finance team.",
                      1001.0 + 2 * i))
    return ex.ledger_from_turns(turns, "What did we decide about item 3?", name="test", tool_every=3,
                                tool_sizes=(300, 700, 1500))


@pytest.fixture()
def explorer() -> ex.Explorer:
    policies = {"A": ex.PolicyChoice(keep_recent_requests=1, tool_result_max_tokens=1024),
                "B": ex.PolicyChoice(summary_events_over=10, keep_recent_requests=1, tool_result_max_tokens=1024)}
    return ex.Explorer(small_ledger(), window=8192, policies=policies, draw=False)


def shown_numbers(explorer: ex.Explorer, policy: str) -> dict[str, int]:
    """The token counts of one policy as the HTML table shows them, stage by stage."""
    html = explorer.table.value
    column = list(explorer.results).index(policy)
    shown = {}
    for stage in ex.STAGES:
        row = re.search(rf"<td>{re.escape(stage)}</td>((?:\s*<td>[^<]*</td>)+)", html)
        assert row is not None, f"stage {stage} missing from the table"
        cells = re.findall(r"<td>([^<]*)</td>", row.group(1))
        shown[stage] = int(cells[column])
    return shown


def test_the_ledger_has_synthetic_tool_results_and_counted_tokens() -> None:
    ledger = small_ledger()
    assert ledger.synthetic_tool_results == 8  # units 2, 5, ..., 23 (the last completed unit always has one)
    assert all(e.token_count for e in ledger.events)
    last_result = [e for e in ledger.events if e.is_tool_result()][-1]
    assert last_result.token_count >= 1500  # the last completed unit gets the largest result


def test_pass1_threshold_changes_the_shown_counts(explorer: ex.Explorer) -> None:
    before = shown_numbers(explorer, "A")
    assert before == explorer.results["A"].stages
    explorer.controls["A"]["tool_result_max_tokens"].value = 256
    after = shown_numbers(explorer, "A")
    assert after["pass 1"] < before["pass 1"]
    assert after["sent"] < before["sent"]
    assert after["history"] == before["history"]  # the ledger is the same; only the projection changed
    assert explorer.results["A"].compacted["pass1"] > 0


def test_keep_recent_requests_protects_more_results(explorer: ex.Explorer) -> None:
    explorer.controls["A"]["tool_result_max_tokens"].value = 256
    compacted = explorer.results["A"].compacted["pass1"]
    sent = explorer.results["A"].sent
    explorer.controls["A"]["keep_recent_requests"].value = 6
    assert explorer.results["A"].compacted["pass1"] < compacted
    assert explorer.results["A"].sent > sent


def test_pass2_cuts_the_protected_oversized_result(explorer: ex.Explorer) -> None:
    before = explorer.results["A"].stages
    explorer.controls["A"]["oversized_tool_result_max_tokens"].value = 512
    after = explorer.results["A"].stages
    assert explorer.results["A"].compacted["pass2"] >= 1
    assert after["pass 2"] < before["pass 2"]
    assert after["pass 1"] == before["pass 1"]


def test_a_summary_trigger_moves_the_boundary_and_shrinks_the_request(explorer: ex.Explorer) -> None:
    b = explorer.results["B"]
    assert b.summary_updates >= 1 and b.summary_boundary > 0
    assert b.stages["summary"] < b.stages["history"]
    # No summary check on A: its summary stage is the raw history.
    assert explorer.results["A"].stages["summary"] == explorer.results["A"].stages["history"]
    explorer.controls["B"]["summary_events_over"].value = 40
    later = explorer.results["B"]
    assert later.summary_updates < b.summary_updates
    assert later.stages["summary"] != b.stages["summary"]


def test_switching_recall_tools_off_drops_their_schemas(explorer: ex.Explorer) -> None:
    before = shown_numbers(explorer, "A")["history"]
    explorer.controls["A"]["recall_tools"].value = "none"
    assert shown_numbers(explorer, "A")["history"] < before


def test_without_a_background_summary_the_pre_model_path_summarises(explorer: ex.Explorer) -> None:
    # A seeded history with no summary yet: at >= 70 % of a 4,096 window the request triggers a
    # synchronous summary (trigger events_over=10 passes), and what is sent is smaller.
    explorer.window.value = 4096
    assert explorer.results["B"].sync_threshold == 2867
    assert not explorer.results["B"].sync_summary  # the background worker kept the summary current
    explorer.controls["B"]["background_summary"].value = False
    b = explorer.results["B"]
    assert b.summary_updates == 0 and b.stages["summary"] == b.stages["history"]
    assert b.sync_summary
    assert b.sent < b.stages["pass 2"]
    explorer.window.value = 131072  # far below 70 % of a large window: nothing to relieve
    assert not explorer.results["B"].sync_summary


def test_every_change_refreshes_and_the_ledger_never_changes(explorer: ex.Explorer) -> None:
    snapshot = [e.to_json() for e in explorer.ledger.events]
    refreshes = explorer.refreshes
    explorer.set("A", tool_result_max_tokens=128, keep_recent_requests=0, oversized_tool_result_max_tokens=256)
    assert explorer.refreshes == refreshes + 3
    assert [e.to_json() for e in explorer.ledger.events] == snapshot


def test_the_plot_redraws_into_its_output() -> None:
    pytest.importorskip("matplotlib")
    explorer = ex.Explorer(small_ledger(8), draw=True)
    fig = explorer.figure()
    assert len(fig.axes[0].patches) == len(ex.STAGES) * 2  # one bar per stage and policy
    explorer.controls["A"]["tool_result_max_tokens"].value = 128
    assert explorer.refreshes == 2


def test_policy_choice_rejects_an_unknown_recall_setting() -> None:
    with pytest.raises(ValueError, match="recall_tools"):
        ex.PolicyChoice(recall_tools="everything")


def test_the_current_policy_is_shown_as_the_flags_that_run_it(explorer: ex.Explorer) -> None:
    recipe = explorer.recipe("B")
    assert "--set summary.events_over=10" in recipe.command and "--set summary.checks_mode=any" in recipe.command
    # MT-Bench-101 reads no compaction settings: listed as unsupported, never passed to the CLI.
    assert "compaction.tool_result_max_tokens" in recipe.unsupported
    assert "compaction" not in recipe.command and "[compaction]" in recipe.toml
    explorer.set("B", summary_events_over=25)
    assert "summary.events_over=25" in explorer.recipes.value
    assert "summary.events_over" not in explorer.recipe("A").command  # A has no summary checks
    from agentlab.bench.config import apply_overrides, load_settings
    from agentlab.bench.tasks import get_task

    # The flags are valid for the CLI: its own check of --set values accepts every one of them.
    task = get_task("mtbench101")
    settings = apply_overrides(load_settings(task.name, task.default_settings()), explorer.recipe("B").flags)
    assert settings.get("summary", "events_over") == 25 and settings.get("summary", "checks_mode") == "any"


def test_a_compaction_only_policy_runs_as_the_compaction_arm_with_its_knobs() -> None:
    from agentlab.bench.config import apply_overrides, load_settings
    from agentlab.bench.tasks import get_task

    choice = ex.PolicyChoice(tool_result_max_tokens=256, keep_recent_requests=3, recall_tools="none")
    recipe = ex.run_recipe(choice)
    assert (recipe.benchmark, recipe.mode) == ("locomo", "compaction")
    assert recipe.flags[0] == "dataset.delivery=tool_results"
    assert "--set compaction.tool_result_max_tokens=256" in recipe.command
    assert "--set compaction.keep_recent_requests=3" in recipe.command
    # The arm switches compaction on itself; [recall] is not read by it, so listed, not passed.
    assert "compaction.enabled" not in recipe.command and "recall.search_tool" in recipe.unsupported
    task = get_task("locomo")
    settings = apply_overrides(load_settings(task.name, task.default_settings()), recipe.flags)
    assert settings.get("compaction", "tool_result_max_tokens") == 256
    # A summary mode reads only [summary]: asked for explicitly, the compaction knobs are not read by it.
    assert "compaction.tool_result_max_tokens" in ex.run_recipe(choice, "mtbench101", "summary").unsupported
