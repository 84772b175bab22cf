"""The notebooks' shared helpers: benchmark runs through the CLI, settings, manifests, and the
runtime tour's pieces on a scripted model."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from agentlab.compaction import CompactionPolicy
from agentlab.events import Message
from agentlab.examples.support import read_certificate
from agentlab.model.scripted import ScriptedModel
from agentlab.notebooks import comparison, kernel, results, runtime_tour, subsets
from agentlab.recall import RecallPolicy
from agentlab.recall.tools import session_load
from agentlab.runtime import FunctionTool, Invocation, Runner, RunOptions
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import SummaryPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_demo_task as demo  # noqa: E402  (the harness's own demo task, shared with tests/bench)


@pytest.fixture()
def scripted_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentlab.model.registry as registry

    demo.reset()
    monkeypatch.setattr(registry, "get_model", lambda spec=None, **_: demo.scripted_model())


def test_ensure_results_runs_missing_modes_once(tmp_path: Path, scripted_cli: None) -> None:
    db = tmp_path / "results.duckdb"
    modes = ["long_context", "summary", "recall"]
    first = results.ensure_results("demo", modes, model="openai:fake", limit=2, db=db, echo=False)
    assert list(first["status"]) == [0, 0, 0]
    assert list(first["ran_ok"]) == [2, 2, 2] and list(first["already_done"]) == [0, 0, 0]
    again = results.ensure_results("demo", modes, model="openai:fake", limit=2, db=db, echo=False)
    assert list(again["already_done"]) == [2, 2, 2] and list(again["ran_ok"]) == [0, 0, 0]
    assert list(again["run_id"]) == list(first["run_id"])  # resumed, not new runs
    more = results.ensure_results("demo", ["summary"], model="openai:fake", limit=3, db=db, echo=False)
    assert (more.iloc[0]["already_done"], more.iloc[0]["ran_ok"]) == (2, 1)
    # The derived tables were rebuilt with the task's own mode roles.
    ours = results.mode_quality_and_savings("demo", "rougeL", db=db, model="openai:fake")
    assert set(ours["mode"]) == set(modes)
    assert ours.set_index("mode").loc["long_context", "prompt_savings"] == 0.0
    assert ours.set_index("mode").loc["summary", "prompt_savings"] > 0


def test_ensure_results_passes_a_context_budget_into_the_runs(tmp_path: Path, scripted_cli: None) -> None:
    from agentlab.bench.store.results import ResultStore

    db = tmp_path / "results.duckdb"
    plain = results.ensure_results("demo", ["summary"], model="openai:fake", limit=1, db=db, echo=False)
    tight = results.ensure_results("demo", ["summary"], model="openai:fake", limit=1, db=db, context_budget=2000,
                                   echo=False)
    assert list(plain["status"]) == list(tight["status"]) == [0]
    assert tight.iloc[0]["run_id"] != plain.iloc[0]["run_id"]
    with ResultStore(db) as store:
        (config,), = store.query("SELECT config FROM runs WHERE run_id = ?", [tight.iloc[0]["run_id"]])
    assert '"context_budget": 2000' in config


def test_ensure_sweep_and_the_policy_comparison_view(tmp_path: Path, scripted_cli: None) -> None:
    pytest.importorskip("ipywidgets")
    import matplotlib

    matplotlib.use("Agg")
    db = tmp_path / "results.duckdb"
    log = results.ensure_sweep("demo", "summary", ["answer.max_tokens=16,24"], model="openai:fake", limit=3, db=db,
                               echo=False)
    assert list(log["mode"]) == ["long_context", "summary", "summary"] and list(log["ok"]) == [3, 3, 3]
    again = results.ensure_sweep("demo", "summary", ["answer.max_tokens=16,24"], model="openai:fake", limit=3, db=db,
                                 echo=False)
    assert list(again["already_done"]) == [3, 3, 3] and list(again["ok"]) == [0, 0, 0]
    view = comparison.PolicyComparison(db, model="openai:fake")
    assert view.variants("demo") == ["answer.max_tokens=16", "answer.max_tokens=24"]
    shown = view.render("demo", "f1", ["answer.max_tokens=24"])
    assert list(shown["pareto"]["variant"]) == ["answer.max_tokens=24"]
    assert list(shown["quality_loss"]["variant"]) == ["answer.max_tokens=24"]
    assert {"ci_low", "ci_high", "p_value", "n_pairs"} <= set(shown["quality_loss"].columns)
    ax = shown["figure"].axes[0]
    assert "quality delta (Δ f1" in ax.get_ylabel() and ax.get_lines()  # the point (and its bars) are drawn
    assert "variant − baseline" in ax.get_ylabel()  # as the delta column of the table beside it
    box = view.widget(metric="f1")
    variant_box = box.children[1]
    variant_box.value = ("answer.max_tokens=16",)  # the observer redraws without raising
    ours = results.mode_quality_and_savings("demo", "f1", db=db, model="openai:fake")
    assert sorted(ours["variant"]) == ["answer.max_tokens=16", "answer.max_tokens=24", "default"]


def test_ensure_results_reports_a_refused_run(tmp_path: Path, scripted_cli: None) -> None:
    log = results.ensure_results("demo", ["summary"], model="openai:fake", limit=1, db=tmp_path / "r.duckdb",
                            overrides=["nosuch.field=1"], echo=False)
    assert log.iloc[0]["status"] == 2 and "nosuch" in log.iloc[0]["error"]


def test_run_cli_reports_a_bad_flag_without_raising() -> None:
    status, text = results.run_cli(["demo", "--limit", "-1", "--model", "openai:fake", "--no-progress"])
    assert status == 2 and "--limit" in text


def test_supported_settings_drops_unknown_fields(capsys: pytest.CaptureFixture[str]) -> None:
    kept = results.supported_settings("qmsum", ["answer.max_tokens=128", "answer.nonsense=1", "nosection.x=2"])
    assert kept == ["answer.max_tokens=128"]
    assert "answer.nonsense" in capsys.readouterr().out


def test_qmsum_subset_manifest_loads_only_those_meetings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = os.environ.get("AGENTLAB_DATA_DIR", "")
    if not (Path(data_dir) / "qmsum" / "test" / "IS1003a.json").is_file():
        pytest.skip("needs AGENTLAB_DATA_DIR with the QMSum test split")
    from agentlab.bench.datasets import load_qmsum

    manifest = subsets.qmsum_subset_manifest(["IS1003a"], tmp_path / "m.toml")
    monkeypatch.setenv("AGENTLAB_MANIFEST", str(manifest))
    data = load_qmsum()
    assert [m.meeting_id for m in data.meetings] == ["IS1003a"]
    with pytest.raises(ValueError, match="Nope001"):
        subsets.qmsum_subset_manifest(["Nope001"], tmp_path / "bad.toml")


def test_locomo_trimmed_keeps_early_sessions_and_their_questions(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = os.environ.get("AGENTLAB_DATA_DIR", "")
    if not (Path(data_dir) / "locomo" / "locomo10.json").is_file():
        pytest.skip("needs AGENTLAB_DATA_DIR with LoCoMo")
    from agentlab.bench.datasets import load_locomo
    from agentlab.bench.datasets.base import clear_verification_memory

    _, manifest = subsets.locomo_trimmed("conv-26", 3, tmp_path)
    monkeypatch.setenv("AGENTLAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("AGENTLAB_MANIFEST", str(manifest))
    clear_verification_memory()
    [conversation] = load_locomo().conversations
    assert conversation.sample_id == "conv-26" and [s.number for s in conversation.sessions] == [1, 2, 3]
    assert conversation.qa and all(e.startswith(("D1:", "D2:", "D3:")) for q in conversation.qa for e in q.evidence)
    assert conversation.qa[0].question == "When did Caroline go to the LGBTQ support group?"


def test_run_sync_works_inside_a_running_loop() -> None:
    async def inner() -> int:
        await asyncio.sleep(0)
        return 7

    async def outer() -> int:
        return kernel.run_sync(inner())  # a running loop here: the helper uses a worker thread

    assert kernel.run_sync(inner()) == 7
    assert asyncio.run(outer()) == 7


async def test_the_tour_flow_on_a_scripted_model() -> None:
    """Diagnostics as real tool events, a forced summary, compaction of the old log, session_load."""
    tools = [FunctionTool(read_certificate), FunctionTool(runtime_tour.fetch_gateway_logs)]
    recall = RecallPolicy()
    llm = runtime_tour.ObservedLLMAgent("support", ScriptedModel(default_reply="It is the expired certificate."),
                              instruction="Answer briefly.", tools=tools,
                              summary=SummaryPolicy(events_over=40),
                              compaction=CompactionPolicy(enabled=True, keep_recent_requests=0, tool_result_max_tokens=256),
                              recall=recall)
    agent = runtime_tour.DiagnosticAgent(llm, tools)
    sessions = InMemorySessionService()
    runner = Runner("desk", agent, sessions)
    await runner.ask("u", "case", "TLS fails.", options=RunOptions(
        metadata={"label": "t1", "diagnostics": [("read_certificate", {"host": "pay.example.com"})]}))
    session = await sessions.get_session("desk", "u", "case")
    assert await runner.summary_worker.summarize(session, "", force=True)
    await runner.ask("u", "case", "Logs?", options=RunOptions(
        metadata={"label": "t2", "diagnostics": [("fetch_gateway_logs", {"host": "pay.example.com"})]}))
    _, events = await runner.ask("u", "case", "Same error?", options=RunOptions(metadata={"label": "t3"}))
    await runner.close()

    session = await sessions.get_session("desk", "u", "case")
    ledger = runtime_tour.ledger_df(session, session.summaries[""])
    assert list(ledger["kind"][:4]) == ["user input", "tool call", "tool result", "answer"]
    assert ledger["covered_by_summary"].tolist()[:4] == [True] * 4 and not ledger["covered_by_summary"].iloc[4]
    log_event = session.events[session.event_index("ev-t2-result0")]
    assert log_event.token_count > 1000

    request, draft = llm.projections[-1]
    compacted = [e for e in draft.events if e.metadata.get("compacted")]
    assert [e.id for e in compacted] == ["ev-t2-result0"]
    assert "session_load" in compacted[0].text and "ev-t2-result0" in compacted[0].text
    table = runtime_tour.request_df(request, draft)
    assert table.loc[table["from_event"] == "ev-t2-result0", "compacted"].tolist() == ["pass1"]
    assert not any(e.id.startswith("ev-t1") for e in draft.events)  # covered by the summary
    assert any(e.object == "context.compaction" for e in events)

    inv = Invocation(app_name="desk", user_id="u", session=session, session_service=sessions, agent=agent,
                     message=Message.user("again"))
    loaded = await session_load(inv, recall, event_id="ev-t2-result0")
    anchor = next(m for m in loaded["messages"] if m.get("anchor"))
    assert anchor["content"] == f"fetch_gateway_logs: {log_event.text}"

    fig = runtime_tour.plot_history_and_context(session, session.summaries[""], draft, request)
    assert len(fig.axes) == 2


def test_savings_plots_follow_the_published_token_rule() -> None:
    import pandas as pd

    last = pd.DataFrame({"mode": ["recall"], "published_token_rule": ["last_answer_call"]})
    summed = pd.DataFrame({"mode": ["summary"], "published_token_rule": ["sum_answer_calls"]})
    assert results.published_savings_column(last) == "prompt_savings_last"
    assert results.published_savings_column(summed) == "prompt_savings"
    assert results.published_savings_column(pd.DataFrame(columns=["mode", "prompt_savings"])) == "prompt_savings"
