"""Done-when of the arms API: a mechanism and an arm defined here, outside ``agentlab/``, run on all four
benchmarks (dry run and scripted model), with ``<arm>+recall`` paired to it in ``report``.

No library file knows the toy: it is registered with :func:`agentlab.policies.arms.register_arm`.
The scripted model answers with everything its prompt shows (an echo), so an answer's overlap
with the reference measures how much of the history the arm kept in the prompt: the baseline
keeps it all, the toy only its last turns, and recall brings the hidden turns that match back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from cli_helpers import run_cli

from agentlab.bench.config import apply_overrides, load_settings
from agentlab.bench.datasets.locomo import LoCoMoData, parse_conversation
from agentlab.bench.datasets.longmemeval import write_longmemeval_fixture
from agentlab.bench.datasets.mtbench101 import Dialogue, DialogueTurn, MTBench101Data
from agentlab.bench.datasets.qmsum import Meeting, QMSumCase, TextSpan, TranscriptTurn
from agentlab.bench.running import executor
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import CaseSelection, get_task
from agentlab.bench.tasks import locomo as lc
from agentlab.bench.tasks import mtbench101 as mt
from agentlab.core import ContextMechanism, Invocation, RequestDraft, Stage, StagedProcessor, is_history_event
from agentlab.model.base import ModelInfo, ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.policies import arms

# --- the toy mechanism and its arm: the "Adding a policy" example (docs/adding-a-policy.md) ---------------


class KeepLast(ContextMechanism):
    """Show only the last ``n`` history events (the current input is added after it runs)."""

    def __init__(self, n: int = 2) -> None:
        self.n = n

    def describe(self) -> str:
        return f"keep_last_{self.n}"

    def request_processors(self) -> Sequence[StagedProcessor]:
        return [StagedProcessor(Stage("keep_last", 350), self)]  # after the history stage (300)

    async def process(self, inv: Invocation, draft: RequestDraft) -> None:
        current = inv.user_event.id if inv.user_event is not None else None
        history = [e for e in draft.events if is_history_event(e) and e.id != current]
        keep = {e.id for e in history[-self.n:]} | {current}
        draft.events = [e for e in draft.events if not is_history_event(e) or e.id in keep]


TOY = arms.Arm("toy_keep_last", role="lossy", build=lambda settings, model: [KeepLast(2)],
               description="keep the last 2 history events")


@pytest.fixture(autouse=True)
def toy_arm() -> Iterator[arms.Arm]:
    arms.register_arm(TOY, replace=True)
    yield TOY
    arms.ARMS.pop(TOY.name, None)


# --- four tiny datasets -------------------------------------------------------------------------------

FILLER = ["We should revisit the schedule.", "I agree with that plan.", "Let me check my notes.",
          "That sounds fine to me.", "Could you repeat the last point?"]


def qmsum_selection() -> CaseSelection:
    turns = [TranscriptTurn("Carol" if i % 2 else "Dave", FILLER[i % 5]) for i in range(12)]
    turns[3] = TranscriptTurn("Alice", "Alice thinks the zebra budget should stay at forty euros.")
    meeting = Meeting("Toy001", "Product", tuple(turns), (), (), ())
    task = get_task("qmsum")
    items = [QMSumCase(f"Toy001_specific_{n:02d}", meeting, "specific", "What did Alice say about the zebra budget?",
                       "Alice wanted the zebra budget kept at forty euros.", (TextSpan(3, 4),)) for n in (1, 2)]
    return CaseSelection([task.case_from(i) for i in items], dataset_sha256="toy", loaded=2)  # type: ignore[attr-defined]


LOCOMO_RAW = {
    "sample_id": "conv-toy", "conversation": {
        "speaker_a": "Caroline", "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Caroline", "dia_id": "D1:1", "text": "I adopted a puppy named Oscar."},
                      {"speaker": "Melanie", "dia_id": "D1:2", "text": "Lovely, I like dogs."},
                      {"speaker": "Caroline", "dia_id": "D1:3", "text": "We walk every morning."},
                      {"speaker": "Melanie", "dia_id": "D1:4", "text": "That is a good habit."},
                      {"speaker": "Caroline", "dia_id": "D1:5", "text": "See you soon."}]},
    "qa": [{"question": "What is the name of Caroline's puppy?", "answer": "Oscar", "evidence": ["D1:1"],
            "category": 4},
           {"question": "What did Caroline adopt?", "answer": "a puppy named Oscar", "evidence": ["D1:1"],
            "category": 4}],
}
DIALOGUES = (
    Dialogue("CM", 1, (DialogueTurn("Tell me about Paris.", "Paris is big."), DialogueTurn("And Rome?", "Rome is old."),
                       DialogueTurn("And Oslo?", "Oslo is cold."),
                       DialogueTurn("Which city did I ask about first?", "Paris."))),
    Dialogue("SA", 2, (DialogueTurn("Is 7 prime?", "Yes."), DialogueTurn("Are you sure?", "Yes, 7 is prime."))),
)


@pytest.fixture
def tiny_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(lc, "load_locomo", lambda: LoCoMoData((parse_conversation(LOCOMO_RAW, "toy"),), "toy-sha"))
    monkeypatch.setattr(mt, "load_mtbench101", lambda: MTBench101Data(DIALOGUES, "toy-sha"))
    return write_longmemeval_fixture(tmp_path / "lme.json", n_questions=2, question_types=["single-session-user"])


def settings_of(benchmark: str, lme: Path):  # type: ignore[no-untyped-def]
    task = get_task(benchmark)
    extra = [f"dataset.path={lme}"] if benchmark == "longmemeval" else []
    return apply_overrides(load_settings(benchmark, task.default_settings()), extra)


def echo(request: ModelRequest) -> str:
    """Everything the prompt shows, so an answer's overlap with the reference is what the arm kept."""
    recalled = [m.content.split(arms.HIDDEN_RECALL_HEADER)[-1] for m in request.messages
                if m.role == "system" and arms.HIDDEN_RECALL_HEADER in m.content]
    return " ".join([*recalled, *(m.content for m in request.messages[:-1] if m.role != "system")])


BENCHMARKS = ("qmsum", "longmemeval", "locomo", "mtbench101")


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_the_toy_arm_and_its_recall_dry_run_on_every_benchmark(benchmark: str, tiny_data: Path) -> None:
    task = get_task(benchmark)
    settings = settings_of(benchmark, tiny_data)
    selection = qmsum_selection() if benchmark == "qmsum" else None
    assert "toy_keep_last" in task.arm_names() and "toy_keep_last+recall" in task.arm_names()
    full = executor.dry_run(task, "toy_keep_last", settings, limit=2, selection=selection)
    recalled = executor.dry_run(task, "toy_keep_last+recall", settings, limit=2, selection=selection)
    assert full["cases"] == 2 and full["mode"] == "toy_keep_last" and full["avg_prompt_tokens"] > 0
    # The recall block adds the hidden turns that match the question back; the toy alone keeps 2 events.
    assert recalled["avg_prompt_tokens"] >= full["avg_prompt_tokens"]


def test_the_toy_prompt_keeps_only_the_last_two_history_events(tiny_data: Path) -> None:
    task = get_task("qmsum")
    case = qmsum_selection().cases[0]
    settings = settings_of("qmsum", tiny_data)
    [prompt] = task.dry_run_arm(case, "toy_keep_last", settings)
    assert [m.role for m in prompt] == ["system", "user", "user", "user"]
    assert prompt[-1].content == case.question and "zebra" not in prompt[1].content + prompt[2].content
    [recalled] = task.dry_run_arm(case, "toy_keep_last+recall", settings)
    assert "Alice thinks the zebra budget" in recalled[0].content  # the hidden turn, preloaded


@pytest.mark.parametrize("benchmark", BENCHMARKS)
async def test_the_toy_and_its_recall_run_and_pair_in_the_report(benchmark: str, tiny_data: Path,
                                                                   tmp_path: Path) -> None:
    task = get_task(benchmark)
    baseline = task.roles().baseline  # type: ignore[union-attr]
    settings = settings_of(benchmark, tiny_data)
    selection = qmsum_selection() if benchmark == "qmsum" else None
    db = tmp_path / "results.duckdb"
    model = ScriptedModel(info=ModelInfo("scripted", 32_000), default_reply=echo)  # type: ignore[arg-type]
    ids = {}
    with ResultStore(db) as store:
        for arm in (baseline, "toy_keep_last", "toy_keep_last+recall"):
            request = executor.RunRequest(benchmark=benchmark, mode=arm, model_spec="scripted", settings=settings,
                                          limit=2, progress=False)
            summary = await executor.run_task(task, request, model=model, store=store, selection=selection)
            assert summary.ok == 2, (arm, summary.errors)
            ids[arm] = summary.run_id
        store.rebuild_derived()
        pairs = store.query("SELECT run_id, role, baseline_run_id, lossy_run_id FROM report_runs")
    by_run = {run: (role, base, lossy) for run, role, base, lossy in pairs}
    assert by_run[ids["toy_keep_last"]] == ("lossy", ids[baseline], None)
    assert by_run[ids["toy_keep_last+recall"]] == ("recovered", ids[baseline], ids["toy_keep_last"])

    code, out, err = run_cli("report", benchmark, "--db", str(db), "--json")
    assert code == 0, err
    report = json.loads(out)
    shown = {r["run_id"]: r.get("lossy_run_id") for r in report["runs"]}
    assert shown[ids["toy_keep_last+recall"]] == ids["toy_keep_last"]
    recovery = report["recovery"]
    if benchmark == "mtbench101":
        # Its metrics compare a run with the baseline's answers; the baseline, scored against
        # itself on the rule-based ones, gives each recovered arm its row.
        assert {(r["lossy_mode"], r["recovered_mode"], r["metric"]) for r in recovery} == {
            ("toy_keep_last", "toy_keep_last+recall", m) for m in ("retention", "word_jaccard")}
        return
    assert recovery and {(r["lossy_mode"], r["recovered_mode"]) for r in recovery} == {
        ("toy_keep_last", "toy_keep_last+recall")}
    # The echo answers show what each arm kept: recall wins back some of what the toy hid.
    f1 = next(r for r in recovery if r["metric"] in ("rouge_l_f1", "f1", "locomo_f1", "rouge1_f1"))
    assert f1["recovered_mean"] > f1["lossy_mean"]


def test_list_shows_the_registered_arm_and_an_unknown_arm_lists_the_known_ones() -> None:
    code, out, _ = run_cli("list", "--json")
    assert code == 0
    for row in json.loads(out)["benchmarks"]:
        if row["benchmark"] in BENCHMARKS:
            assert {"toy_keep_last", "toy_keep_last+recall", "inspect_trim", "inspect_trim+recall"} <= set(row["arms"])
    with pytest.raises(arms.UnknownArm, match="unknown mode 'toy_keep_lost'.*toy_keep_last"):
        get_task("qmsum").arm("toy_keep_lost")


def test_a_task_declares_an_arm_that_does_not_apply_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    task = get_task("locomo")
    monkeypatch.setattr(type(task), "inapplicable_arms", {"toy_keep_last": "every question needs the whole history"})
    assert "toy_keep_last" not in task.arm_names() and not task.has_arm("toy_keep_last")
    assert "toy_keep_last+recall" not in task.arm_names() and not task.has_arm("toy_keep_last+recall")
    with pytest.raises(arms.UnknownArm, match="does not apply: every question needs the whole history"):
        task.arm("toy_keep_last")
    assert get_task("qmsum").has_arm("toy_keep_last")  # the other benchmarks still run it
