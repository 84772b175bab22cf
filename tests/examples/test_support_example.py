"""The support example: day 1 runs the diagnostic in the workspace, day 2 (a new ticket) loads its report artifact."""

from __future__ import annotations

import io
import json
from pathlib import Path

from agentlab.artifacts.duckdb import DuckDBArtifactService
from agentlab.examples.support import (
    APP,
    DAY1_SESSION,
    DAY2_SESSION,
    REPORT,
    USER,
    artifacts_root,
    main_async,
)
from agentlab.model.scripted import ScriptedModel
from agentlab.session.duckdb import DuckDBSessionService


async def test_the_report_is_written_in_the_workspace_and_loaded_by_the_next_ticket(tmp_path: Path) -> None:
    db = tmp_path / "support.duckdb"
    day1_model = ScriptedModel(["The certificate of pay.example.com expired; renew it."])
    out = io.StringIO()
    assert await main_async(db, None, model=day1_model, out=out) == 0
    assert "Day 1" in out.getvalue() and "run_diagnostic" in out.getvalue()
    async with DuckDBSessionService(db) as sessions:
        day1 = await sessions.get_session(APP, USER, DAY1_SESSION)
    assert day1 is not None
    result = json.loads(next(e for e in day1.events if e.is_tool_result()).text)
    assert result["status"] == "EXPIRED" and result["report"] == REPORT and result["revision"] == 0
    assert "TLS diagnostic" not in day1.events[2].text  # the session keeps the visible result, not the report
    async with DuckDBArtifactService(artifacts_root(db)) as store:
        report = await store.load(APP, USER, DAY2_SESSION, REPORT)  # user-scoped: any session of alice sees it
    assert report is not None and "- status: EXPIRED" in report.text and "Renew the certificate" in report.text
    # the model was shown the diagnostic's result, and offered artifact_load (the artifact tools, save off)
    assert [t["function"]["name"] for t in day1_model.requests[0].tools] == ["run_diagnostic", "artifact_list",
                                                                           "artifact_load"]

    day2_model = ScriptedModel(["Yes: yesterday's report says the certificate expired."])
    out = io.StringIO()
    assert await main_async(db, None, model=day2_model, out=out) == 0
    assert "Day 2: new case ticket-4712" in out.getvalue() and "artifact_load" in out.getvalue()
    shown = [m.content for m in day2_model.requests[0].messages if m.role == "tool"]
    assert len(shown) == 1 and "- status: EXPIRED" in json.loads(shown[0])["content"]
    assert "not instructions" in json.loads(shown[0])["note"]
