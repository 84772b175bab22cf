"""The isolation measure: a sub-agent's pages never reach the lead's prompts; the table's numbers add up."""

from __future__ import annotations

import pytest

from agentlab.examples import isolation
from agentlab.notebooks import composition_view as cv


@pytest.mark.parametrize("backend", ["scripted", "server"])
async def test_the_lead_never_sees_the_pages_behind_a_sub_agent(backend):
    runs = {run.arm: run for run in await isolation.measure([backend])}
    inline, sub = (isolation.branch_rows(runs[arm]) for arm in isolation.ARMS)
    [inline_lead] = inline
    sub_lead = next(r for r in sub if r["branch"] == isolation.PARENT_KEY)
    researcher = next(r for r in sub if r["branch"] == "main/researcher")
    # the lead's peak prompt shrinks to a fraction; the researcher carries the pages instead
    assert sub_lead["peak_prompt"] * 4 < inline_lead["peak_prompt"]
    assert researcher["peak_prompt"] >= inline_lead["peak_prompt"] * 0.9
    assert inline_lead["never_in_parent_view_tokens"] == 0
    assert sub_lead["never_in_parent_view_tokens"] > 2000
    # per-call rows sum to the per-branch rows
    calls = isolation.call_rows(runs["subagent"])
    assert sum(r["prompt_tokens"] for r in calls) == sub_lead["prompt_tokens"] + researcher["prompt_tokens"]
    # the lead's view of the sub-agent arm holds one tool result, the researcher's report; the
    # inline lead's holds the log tools' own results
    def tool_results(run):
        return [e.message.name for e in run.session.events
                if e.is_tool_result() and e.filter_key == isolation.PARENT_KEY]

    assert tool_results(runs["subagent"]) == ["researcher"]
    assert tool_results(runs["inline"]) and "researcher" not in tool_results(runs["inline"])


def test_table_and_unknown_arm():
    assert isolation.table([{"a": 1, "b": "x"}]).splitlines() == ["| a | b |", "|---|---|", "| 1 | x |"]
    with pytest.raises(ValueError, match="unknown arm"):
        import asyncio
        asyncio.run(isolation.run_arm("sideways"))


async def test_demo_graph_runs_and_its_events_sit_on_node_branches():
    session = await cv.run_demo_graph()
    assert session.state["graph:triage"]["status"] == "done"
    assert session.state["graph:triage"]["state"]["rounds"] == 2
    keys = {e.filter_key for e in session.events}
    assert {"main", "main/plan", "main/runbook", "main/logs"} <= keys
    kinds = {cv.event_kind(e) for e in session.events}
    assert {"node_start", "node_finish", "tool call", "tool result", "answer", "input"} <= kinds
