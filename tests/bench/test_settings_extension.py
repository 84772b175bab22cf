"""One source of truth for a run's settings.

Adding a knob is one field with its doc comment and check: a policy subclass below adds
``patience``, a test task uses it, and the field reaches the settings file, ``--set``, the run id
and ``analysis.runs_df()`` with no other edit. Also: the error messages of bad settings, and that
a changed library default starts a new run instead of resuming the old one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from cli_helpers import run_cli

from agentlab.bench import analysis
from agentlab.bench import config as bench_config
from agentlab.bench.config import (
    JudgeSettings,
    RunSettings,
    Settings,
    SettingsError,
    apply_overrides,
    generation_config,
    load_settings,
)
from agentlab.bench.facts import ModeRoles
from agentlab.bench.scoring.metrics import Score
from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import TASKS, Case, CaseResult, CaseSelection, RunContext, Task, register
from agentlab.events import Message
from agentlab.model.base import GenerationConfig, ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.summary import SummaryPolicy


@dataclass(frozen=True)
class PatientSummary(SummaryPolicy):
    """A summary policy with one new knob, added the way a new mechanism would add it."""

    #: Seconds the summariser may deliberate before it answers (made up for this test).
    patience: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.patience < 0:
            raise ValueError(f"patience must be >= 0; got {self.patience}")


class KnobTask(Task):
    """Two cases answered by a scripted model; the summary section is a :class:`PatientSummary`."""

    name = "knobtest"
    version = "1"
    modes = ("long_context", "summary")
    default_mode = "summary"
    mode_roles = ModeRoles(baseline="long_context", lossy="summary")
    #: The summary section's class (a test swaps it to change a default).
    summary_class: ClassVar[type[SummaryPolicy]] = PatientSummary

    def default_settings(self) -> dict[str, type[Any]]:
        return {"summary": self.summary_class, "answer": GenerationConfig, "judge": JudgeSettings,
                "run": RunSettings}

    def policies(self, mode: str, settings: Settings) -> list[Any]:
        return [settings.of("summary", SummaryPolicy)] if mode == "summary" else []

    def load_cases(self, settings: Settings) -> CaseSelection:
        cases = [Case(id=f"k{i}", question=f"q{i}?", reference="fine") for i in (1, 2)]
        return CaseSelection(cases, dataset_sha256="knob-data-v1")

    async def run_case(self, case: Case, mode: str, ctx: RunContext) -> CaseResult:
        patience = getattr(ctx.settings.section("summary"), "patience", None)
        request = ModelRequest([Message.user(case.question)], config=generation_config(ctx.settings.section("answer")))
        response = await ctx.model.generate(request)
        return CaseResult(prediction=response.message.content, metadata={"patience_read": patience})

    async def score(self, case: Case, result: CaseResult, ctx: RunContext) -> list[Score]:
        return [Score("exact", float(result.prediction == case.reference), "knob-v1")]

    def dry_run_prompts(self, case: Case, mode: str, settings: Settings) -> list[list[Message]]:
        return [[Message.user(case.question)]]


@pytest.fixture
def knob_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """KnobTask registered, its settings file in ``tmp_path``, every model scripted; yields the file."""
    import agentlab.model.registry as registry

    register(KnobTask)
    monkeypatch.setattr(bench_config, "BENCHMARKS_DIR", tmp_path)
    monkeypatch.setattr(registry, "get_model",
                        lambda spec=None, **_: ScriptedModel(default_reply=lambda request: "fine"))
    path = tmp_path / "knobtest.toml"
    path.write_text("[summary]\nevents_over = 4\npatience = 5     # the published patience\n\n"
                    "[answer]\nmax_tokens = 16\n")
    yield path
    TASKS.pop("knobtest", None)


def _run(db: Path, *flags: str) -> dict[str, Any]:
    code, out, err = run_cli("knobtest", "--mode", "summary", "--model", "openai:fake", "--no-baselines",
                             "--db", str(db), "--no-progress", "--json", *flags)
    assert code == 0, err
    return json.loads(out)


def test_a_new_policy_field_reaches_toml_set_run_id_and_runs_df(knob_task: Path, tmp_path: Path) -> None:
    # TOML: the file's value is the typed field's value.
    settings = load_settings("knobtest", KnobTask().default_settings())
    assert settings.of("summary", PatientSummary).patience == 5
    # --set: parsed by the field's declared type.
    assert apply_overrides(settings, ["summary.patience=7"]).of("summary", PatientSummary).patience == 7

    db = tmp_path / "r.duckdb"
    first = _run(db)
    again = _run(db)
    other = _run(db, "--set", "summary.patience=7")
    # Run id: the same value resumes the same run; another value is another run.
    assert again["run_id"] == first["run_id"] and again["already_done"] == 2
    assert other["run_id"] != first["run_id"] and other["already_done"] == 0
    assert other["variant"] == "summary.patience=7" and first["variant"] == "default"

    runs = analysis.runs_df("knobtest", db=db).set_index("run_id")
    # runs_df: one column per field, defaults included (workers was never written anywhere).
    assert runs.loc[first["run_id"], "summary.patience"] == 5
    assert runs.loc[other["run_id"], "summary.patience"] == 7
    assert runs.loc[first["run_id"], "summary.workers"] == SummaryPolicy().workers
    assert runs.loc[first["run_id"], "answer.max_tokens"] == 16
    assert "run.concurrency" not in runs.columns  # [run] changes how, not what: not part of the id
    # And the task reads the value it is identified by.
    with ResultStore(db) as store:
        read = store.query("SELECT DISTINCT json_extract(metadata, '$.patience_read') FROM cases WHERE run_id = ?",
                           [other["run_id"]])
    assert [json.loads(r[0]) for r in read] == [7]


def test_the_new_fields_check_and_type_are_one_line_errors(knob_task: Path, tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    for flags, needles in ((["--set", "summary.patience=-1"],
                            ["knobtest [summary] patience must be >= 0; got -1", "--set summary.patience=-1"]),
                           (["--set", "summary.patience=lots"],
                            ["knobtest [summary] patience must be an integer; got 'lots'"]),
                           (["--set", "summary.patients=2"],
                            ["knobtest [summary] has no field 'patients'", "did you mean 'patience'",
                             "valid fields:", "events_over"])):
        code, _, err = run_cli("knobtest", "--mode", "summary", "--model", "openai:fake", "--db", str(db), *flags)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        for needle in needles:
            assert needle in err, (needle, err)
    assert not db.exists()  # refused before anything was stored


@pytest.mark.parametrize(("body", "needles"), [
    ("[summary]\npatience = -2\n", ["knobtest [summary] patience must be >= 0; got -2", "knobtest.toml"]),
    ("[summary]\npatience = \"a lot\"\n", ["knobtest [summary] patience must be an integer; got 'a lot'"]),
    ("[summary]\nevent_threshold = 40\n", ["knobtest [summary] has no field 'event_threshold'", "events_over"]),
    ("[sumary]\npatience = 1\n", ["knobtest has no settings section [sumary]", "sections: answer, artifact_offload, compaction, judge"]),
    ("[smoke]\n\"summary.patience\" = -1\n", ["knobtest [summary] patience must be >= 0", "[smoke]"]),
    ("[summary]\ncheck_mode = \"any\"\n", ["has no field 'check_mode'", "did you mean 'checks_mode'"]),
])
def test_settings_file_errors_name_section_field_and_fix(knob_task: Path, body: str, needles: Sequence[str]) -> None:
    knob_task.write_text(body)
    with pytest.raises(SettingsError) as caught:
        load_settings("knobtest", KnobTask().default_settings())
    for needle in needles:
        assert needle in str(caught.value), (needle, str(caught.value))
    code, _, err = run_cli("knobtest", "--mode", "summary", "--dry-run")
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_a_changed_library_default_starts_a_new_run(knob_task: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    knob_task.write_text("[answer]\nmax_tokens = 16\n")  # patience is left to its default
    db = tmp_path / "r.duckdb"
    before = _run(db)

    @dataclass(frozen=True)
    class NewerPatientSummary(PatientSummary):
        """The same policy after a release changed the default of ``patience``."""

        patience: int = 4

    monkeypatch.setattr(KnobTask, "summary_class", NewerPatientSummary)
    after = _run(db)
    assert after["run_id"] != before["run_id"]
    assert after["already_done"] == 0 and after["ok"] == 2  # nothing resumed from the old run
    runs = analysis.runs_df("knobtest", db=db).set_index("run_id")
    assert runs.loc[before["run_id"], "summary.patience"] == 3 and runs.loc[after["run_id"], "summary.patience"] == 4


def test_runs_stored_before_typed_settings_show_as_legacy(knob_task: Path, tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    run = _run(db)
    old_config = {"benchmark": "knobtest", "settings": {"summary": {"event_threshold": 40, "visible_events": 20}}}
    with ResultStore(db) as store:  # what a run stored before variants and typed settings looks like
        store.conn.execute("UPDATE runs SET variant = NULL, variant_settings = NULL, config = ? WHERE run_id = ?",
                           [json.dumps(old_config), run["run_id"]])
    code, out, err = run_cli("report", "knobtest", "--db", str(db), "--json")
    assert code == 0, err
    assert json.loads(out)["variants"] == ["legacy"]
    runs = analysis.runs_df("knobtest", db=db)
    assert runs.loc[0, "summary.event_threshold"] == 40  # its own stored names, not the new ones
    assert "summary.patience" not in runs.columns


def test_a_variant_name_types_back_into_set(knob_task: Path) -> None:
    settings = load_settings("knobtest", KnobTask().default_settings())
    capped = apply_overrides(settings, ["summary.max_output_tokens=64", "summary.filter_key_allowlist=a,b"])
    cleared = apply_overrides(capped, ["summary.max_output_tokens=none"])
    assert capped.of("summary", PatientSummary).filter_key_allowlist == ("a", "b")  # a tuple field stays a tuple
    name = bench_config.variant_name(bench_config.variant_settings(cleared, capped))
    assert name == "summary.max_output_tokens=none"
    # The name's assignment, given back to --set, rebuilds the same settings.
    assert apply_overrides(capped, name.split(";")) == cleared


@pytest.mark.parametrize(("flag", "needle"), [
    ("answer.max_tokens=0", "[answer] max_tokens must be >= 1"),
    ("answer.temperature=-1", "[answer] temperature must be >= 0"),
    ("summary.max_output_tokens=0", "max_output_tokens must be >= 1"),
])
def test_a_zero_token_budget_is_refused_not_sent(knob_task: Path, flag: str, needle: str) -> None:
    # max_tokens=0 once meant "the model's default" in the settings files; a server takes it literally.
    code, _, err = run_cli("knobtest", "--mode", "summary", "--dry-run", "--set", flag)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert needle in err and f"--set {flag}" in err
