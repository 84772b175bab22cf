"""Delivery and compaction as benchmark-run settings.

``--set dataset.delivery=tool_results`` runs a generic arm on the case's history read through a tool
(the scripted trajectory of :mod:`agentlab.bench.retention.delivery`); ``[compaction]`` holds tRPC-Agent-Go's
defaults and is read by the ``compaction`` arm; neither moves a run id at its default; the
``compactions`` table gets a row whenever a mechanism compacted a request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli

from agentlab.bench.config import LATE_SETTINGS, apply_overrides, load_settings
from agentlab.bench.datasets.qmsum import Meeting, QMSumCase, TextSpan, TranscriptTurn
from agentlab.bench.running import executor
from agentlab.bench.spec import resolve_run
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import CaseSelection, compaction_row, get_task
from agentlab.compaction import CompactionPolicy
from agentlab.model.base import ModelInfo, ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.policies import arms


def tiny_qmsum() -> CaseSelection:
    """Two questions on one 24-turn meeting of long turns (so a read outweighs compaction's placeholder)."""
    words = "the remote control design needs a cheaper battery and a rubber case before the next review".split()
    turns = [TranscriptTurn(("Carol", "Dave")[i % 2], " ".join(words[i % 5:] + words[:i % 5]) * 2) for i in range(24)]
    turns[3] = TranscriptTurn("Alice", "Alice thinks the zebra budget should stay at forty euros.")
    task = get_task("qmsum")
    meeting = Meeting("Tiny01", "Product", tuple(turns), (), (), ())
    questions = [QMSumCase(f"Tiny01_specific_{n}", meeting, "specific", "What did Alice say about the zebra budget?",
                           "Alice wanted the zebra budget kept at forty euros.", (TextSpan(3, 4),)) for n in (1, 2)]
    return CaseSelection([task.case_from(q) for q in questions], dataset_sha256="tiny", loaded=2)  # type: ignore[attr-defined]


def echo(request: ModelRequest) -> str:
    """Everything the prompt shows (so an answer shows what the arm kept)."""
    return " ".join(m.content for m in request.messages[:-1] if m.role != "system")


def qmsum_settings(*overrides: str):  # type: ignore[no-untyped-def]
    task = get_task("qmsum")
    return apply_overrides(load_settings("qmsum", task.default_settings()), list(overrides))


# ------------------------------------------------------------------------------- identity


def test_default_compaction_and_delivery_stay_out_of_the_identity_and_a_changed_value_goes_in() -> None:
    plain = qmsum_settings()
    assert "compaction" not in plain.identity() and "compaction" in plain.sections()
    assert "delivery" not in plain.identity()["dataset"] and "chunk_turns" not in plain.identity()["dataset"]
    assert plain.section("compaction") == CompactionPolicy()  # the file holds tRPC-Agent-Go's defaults
    # The whole section goes in once one field differs; a late dataset field on its own.
    changed = qmsum_settings("compaction.tool_result_max_tokens=512")
    assert changed.identity()["compaction"] == {**CompactionPolicy().to_dict(), "tool_result_max_tokens": 512}
    tools = qmsum_settings("dataset.delivery=tool_results")
    assert tools.identity()["dataset"]["delivery"] == "tool_results"
    assert {k: v for k, v in tools.identity().items() if k != "dataset"} == {
        k: v for k, v in plain.identity().items() if k != "dataset"}
    assert set(LATE_SETTINGS) == {"artifact_offload", "compaction", "dataset"}


def test_every_benchmark_file_has_a_compaction_section_with_the_seeds_defaults() -> None:
    for name in ("qmsum", "locomo", "longmemeval", "mtbench101"):
        text = (Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.toml").read_text()
        assert "\n[compaction]" in text, name
        settings = load_settings(name, get_task(name).default_settings())
        assert settings.section("compaction") == CompactionPolicy(), name
        assert "compaction" not in settings.identity(), name


def _ids(*argv: str) -> dict[str, str]:
    spec = resolve_run("qmsum", mode="compaction", model="openai:gpt-4o-mini", overrides=argv, limit=1)
    bound = spec.bind(ModelInfo("openai:gpt-4o-mini", 128_000, "test"), "sha")
    return bound.run_ids()


def test_delivery_and_a_compaction_knob_change_the_run_id_of_the_compaction_arm() -> None:
    plain, tools = _ids(), _ids("dataset.delivery=tool_results")
    knob = _ids("compaction.tool_result_max_tokens=512")
    assert list(plain) == ["long_context", "compaction"]
    assert len({plain["compaction"], tools["compaction"], knob["compaction"]}) == 3
    # The baseline's id moves with the delivery (it reads the same trajectory), not with a compaction knob...
    assert tools["long_context"] != plain["long_context"]
    # ...which is part of every arm's settings once it differs from the default.
    assert knob["long_context"] != plain["long_context"]


def test_the_header_shows_a_tool_result_delivery() -> None:
    spec = resolve_run("qmsum", mode="compaction", model="openai:gpt-4o-mini", limit=1,
                       overrides=["dataset.delivery=tool_results"])
    bound = spec.bind(ModelInfo("openai:gpt-4o-mini", 128_000, "test"), "sha")
    assert "delivery tool_results" in bound.header()
    assert "delivery" not in resolve_run("qmsum", mode="compaction", model="openai:gpt-4o-mini", limit=1) \
        .bind(ModelInfo("openai:gpt-4o-mini", 128_000, "test"), "sha").header()


# ------------------------------------------------------------------------------- refusals


def test_a_task_mode_other_than_the_baseline_is_refused_under_tool_delivery() -> None:
    code, _, err = run_cli("qmsum", "--arm", "summary", "--set", "dataset.delivery=tool_results", "--dry-run",
                           "--limit", "1")
    assert code != 0 and "summary mode seeds its own history as turns" in err and "--arm compaction" in err


def test_mtbench101_says_why_delivery_does_not_apply() -> None:
    code, _, err = run_cli("mtbench101", "--arm", "compaction", "--set", "dataset.delivery=tool_results",
                           "--dry-run", "--limit", "1")
    assert code != 0 and "error: mtbench101: --set dataset.delivery does not apply" in err
    assert "turn by turn" in err


# ------------------------------------------------------------------------------- runs


def test_compaction_knobs_change_what_the_compaction_arm_sends() -> None:
    task = get_task("qmsum")
    case = tiny_qmsum().cases[0]
    base = qmsum_settings("dataset.delivery=tool_results", "dataset.chunk_turns=4")
    tight = qmsum_settings("dataset.delivery=tool_results", "dataset.chunk_turns=4", "compaction.tool_result_max_tokens=20")
    [full] = task.dry_run_arm(case, "long_context", base)
    [loose] = task.dry_run_arm(case, "compaction", base)
    [cut] = task.dry_run_arm(case, "compaction", tight)
    assert sum(m.role == "tool" for m in full) == 6  # 24 turns, 4 per read: the reading, not the turns
    assert "forty euros" in " ".join(m.content for m in full) and "forty euros" in " ".join(m.content for m in loose)
    assert "forty euros" not in " ".join(m.content for m in cut)  # pass 1 at 20 tokens: results became placeholders
    assert "tool result elided" in " ".join(m.content for m in cut)


async def test_a_scripted_run_with_tool_delivery_fills_the_compactions_table(tmp_path: Path) -> None:
    task = get_task("qmsum")
    settings = qmsum_settings("dataset.delivery=tool_results", "dataset.chunk_turns=4",
                              "compaction.tool_result_max_tokens=20")
    model = ScriptedModel(info=ModelInfo("scripted", 32_000), default_reply=echo)  # type: ignore[arg-type]
    ids = {}
    with ResultStore(tmp_path / "r.duckdb") as store:
        for arm in ("long_context", "compaction"):
            request = executor.RunRequest(benchmark="qmsum", mode=arm, model_spec="scripted", settings=settings,
                                          limit=2, progress=False)
            summary = await executor.run_task(task, request, model=model, store=store, selection=tiny_qmsum())
            assert summary.ok == 2, (arm, summary.errors)
            ids[arm] = summary.run_id
        rows = store.query("SELECT run_id, case_id, results_compacted, tokens_before, tokens_after, mechanism "
                           "FROM compactions ORDER BY run_id, case_id, seq")
        meta = store.query("SELECT metadata FROM cases WHERE run_id = ?", [ids["compaction"]])
        answers = dict(store.query("SELECT run_id, prediction FROM cases WHERE case_id = 'Tiny01_specific_1'"))
    assert {r[0] for r in rows} == {ids["compaction"]}  # the baseline compacts nothing
    assert {r[1] for r in rows} == {"Tiny01_specific_1", "Tiny01_specific_2"}
    assert all(r[2] >= 5 and r[3] > r[4] and r[5] == "compaction" for r in rows)
    assert all('"delivery": "tool_results"' in m[0] for m in meta)
    assert "forty euros" in answers[ids["long_context"]] and "forty euros" not in answers[ids["compaction"]]


def test_compaction_row_keeps_compactions_and_skips_other_request_stats() -> None:
    assert compaction_row({"hidden_recall": {"hits": ["e1"]}}) is None
    assert compaction_row({"kind": "peer_policy_note", "policy": "inspect_edit", "insufficient": True}) is None
    row = compaction_row({"kind": "peer_policy", "policy": "inspect_edit", "results_compacted": 2,
                          "tokens_before": 900, "tokens_after": 300})
    assert row is not None and (row.mechanism, row.results_compacted, row.tokens_after) == ("inspect_edit", 2, 300)
    seed = compaction_row({"kind": "tool_results", "results_compacted": 1, "tokens_before": 5, "tokens_after": 2})
    assert seed is not None and seed.mechanism == "compaction"


def test_the_registry_knows_the_compaction_arms_and_which_arms_need_a_model() -> None:
    assert arms.get_arm("compaction").sections == ("compaction",)
    assert arms.get_arm("compaction_recall").partner == "compaction"
    assert arms.get_arm("rolling_summary").needs_model and arms.get_arm("langchain_summarization").needs_model
    assert not arms.get_arm("inspect_edit").needs_model and not arms.get_arm("compaction").needs_model
    assert arms.get_arm("langchain_summarization+recall").needs_model


def test_compaction_recall_offers_the_search_tools_even_where_recall_is_preload_only() -> None:
    task = get_task("locomo")
    settings = load_settings("locomo", task.default_settings())
    assert settings.get("recall", "tools_enabled") is False  # LoCoMo's published recall: preload only
    compaction, recall = arms.get_arm("compaction_recall").mechanisms(settings, None)
    assert isinstance(compaction, CompactionPolicy) and compaction.enabled
    assert recall.policy.tools_enabled and recall.policy.search_tool and recall.policy.load_tool  # type: ignore[attr-defined]
    assert recall.policy.preload_limit == settings.get("recall", "preload_limit")  # type: ignore[attr-defined]


@pytest.mark.parametrize("benchmark", ["locomo", "longmemeval"])
async def test_locomo_and_longmemeval_run_a_generic_arm_on_their_sessions_opened_as_tool_results(
        benchmark: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_toy_arm import LOCOMO_RAW

    from agentlab.bench.datasets.locomo import LoCoMoData, parse_conversation
    from agentlab.bench.datasets.longmemeval import write_longmemeval_fixture
    from agentlab.bench.tasks import locomo as lc

    monkeypatch.setattr(lc, "load_locomo", lambda: LoCoMoData((parse_conversation(LOCOMO_RAW, "toy"),), "toy-sha"))
    task = get_task(benchmark)
    extra = [f"dataset.path={write_longmemeval_fixture(tmp_path / 'lme.json', n_questions=2)}"] \
        if benchmark == "longmemeval" else []
    settings = apply_overrides(load_settings(benchmark, task.default_settings()),
                               [*extra, "dataset.delivery=tool_results"])
    case = task.load_cases(settings).cases[0]
    [prompt] = task.dry_run_arm(case, "long_context", settings)
    assert [m.role for m in prompt][-1] == "user" and any(m.role == "tool" for m in prompt)
    assert any(m.tool_calls and m.tool_calls[0].name == "open_session" for m in prompt)
    model = ScriptedModel(info=ModelInfo("scripted", 32_000), default_reply=echo)  # type: ignore[arg-type]
    with ResultStore(tmp_path / "r.duckdb") as store:
        request = executor.RunRequest(benchmark=benchmark, mode="compaction", model_spec="scripted",
                                      settings=settings, limit=1, progress=False)
        summary = await executor.run_task(task, request, model=model, store=store)
        assert summary.ok == 1, summary.errors
        [(meta,)] = store.query("SELECT metadata FROM cases WHERE run_id = ?", [summary.run_id])
    assert '"delivery": "tool_results"' in meta


async def test_a_lived_seeding_replays_the_reading_and_still_answers(tmp_path: Path) -> None:
    task = get_task("qmsum")
    settings = qmsum_settings("dataset.delivery=tool_results", "dataset.chunk_turns=4",
                              "compaction.tool_result_max_tokens=20")
    model = ScriptedModel(info=ModelInfo("scripted", 32_000), default_reply=echo)  # type: ignore[arg-type]
    with ResultStore(tmp_path / "r.duckdb") as store:
        request = executor.RunRequest(benchmark="qmsum", mode="compaction", model_spec="scripted", settings=settings,
                                      limit=1, progress=False, seeding="lived")
        summary = await executor.run_task(task, request, model=model, store=store, selection=tiny_qmsum())
        assert summary.ok == 1, summary.errors
        [(meta,)] = store.query("SELECT metadata FROM cases WHERE run_id = ?", [summary.run_id])
    # One request built after each of the 13 reading events (the opening, 6 calls, 6 results).
    assert '"lived_requests": 13' in meta and '"delivery": "tool_results"' in meta
