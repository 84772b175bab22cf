"""A sixth benchmark written outside ``agentlab/`` plugs in with no library file edited.

The test writes a task module, its settings file and a tiny dataset file into ``tmp_path``, names
the module in ``$AGENTLAB_EXTENSIONS`` (by path), and runs every command a benchmark has on it:
``list``, a dry run, ``run`` on the local OpenAI-compatible test server, ``league``, ``retention``
and ``report``. The same module registers a lossy arm of its own, which the proxy serves too:
``python -m agentlab.serve --arm toy_keep_last_two`` with ``$AGENTLAB_EXTENSIONS`` naming the module,
in front of the test server. The task implements the capability
interface of :class:`agentlab.bench.tasks.Task` and nothing else: ``load_cases``, ``history``, ``run_case``, ``score``, ``dry_run_prompts`` and
``retention_groups`` (its gold evidence: the one fact each question asks about).
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_helpers import run_cli

from agentlab.bench.store.results import ResultStore
from agentlab.bench.tasks import TASKS
from agentlab.extensions import EXTENSIONS_ENV
from agentlab.policies.arms import ARMS
from agentlab.testing.openai_server import OpenAITestServer
from agentlab.testing.served import served_proxy

NAME = "toybench"
MODULE = "toybench_ext"

TASK_SOURCE = '''
"""toybench: a question about one fact in a short list of facts (a test's benchmark, kept outside agentlab)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from agentlab.policies.arms import Arm, full_history_arm, register_arm
from agentlab.bench.facts import ModeRoles
from agentlab.bench.retention.delivery import EvidenceMap, EvidencePiece, EvidenceUnit
from agentlab.bench.scoring.metrics import Score
from agentlab.bench.retention.rows import HistoryGroup, Question
from agentlab.bench.tasks import Case, CaseSelection, Task, Unsupported, register
from agentlab.core import ContextMechanism, StagedProcessor, Stage, is_history_event
from agentlab.events import OBJ_USER, Event, Message


class KeepLastTwo(ContextMechanism):
    """Show only the last two history events (the toy's own lossy arm)."""

    def request_processors(self):
        return [StagedProcessor(Stage("keep_last_two", 350), self)]

    async def process(self, inv, draft):
        current = inv.user_event.id if inv.user_event is not None else None
        history = [e for e in draft.events if is_history_event(e) and e.id != current]
        keep = {e.id for e in history[-2:]} | {current}
        draft.events = [e for e in draft.events if not is_history_event(e) or e.id in keep]


register_arm(Arm("toy_keep_last_two", role="lossy", build=lambda settings, model: [KeepLastTwo()],
                 description="keep the last 2 history events"), replace=True)


@register
class ToyBench(Task):
    name = "toybench"
    version = "1"
    modes = ("long_context",)
    default_mode = "long_context"
    mode_roles = ModeRoles(baseline="long_context")
    description = "a test's benchmark kept outside the package"
    settings_file = str(Path(__file__).with_suffix(".toml"))

    def default_settings(self):
        return {"dataset": {"path": ""}}

    def load_cases(self, settings):
        path = Path(settings.get("dataset", "path"))
        items = json.loads(path.read_text())
        cases = [Case(i["id"], i["question"], i["answer"], data=i) for i in items]
        return CaseSelection(cases, dataset_sha256=hashlib.sha256(path.read_bytes()).hexdigest(), note="every item")

    def history(self, case, settings):
        return [Event(author="user", choices=[Message.user(fact)], object=OBJ_USER, id=f"{case.id}-{k}",
                      timestamp=1_700_000_000.0 + k) for k, fact in enumerate(case.data["facts"])]

    async def run_case(self, case, mode, ctx):
        return await self.run_generic(case, full_history_arm(mode), ctx)

    def dry_run_prompts(self, case, mode, settings):
        return self.generic_dry_run(case, full_history_arm(mode), settings)

    async def score(self, case, result, ctx):
        return [Score("contains", float(case.reference.lower() in result.prediction.lower()), "1")]

    def retention_groups(self, cases, settings, delivery):
        if delivery != "turns":
            raise Unsupported("toybench has no tool delivery")
        groups = []
        for case in cases:
            events = self.history(case, settings)
            gold = events[case.data["evidence"]]
            evidence = EvidenceMap((EvidenceUnit("fact", (EvidencePiece(gold.id, gold.text),)),), ())
            groups.append(HistoryGroup(f"retention-{case.id}", delivery, tuple(events), (),
                                       (Question(case.id, case.question, evidence),)))
        return groups
'''


def bare_source() -> str:
    """The same task without its optional capabilities (no dry run, no retention), named ``toybare``."""
    source = TASK_SOURCE.replace('name = "toybench"', 'name = "toybare"')
    for method in ("    def dry_run_prompts(", "    def retention_groups("):
        start = source.index(method)
        later = re.search(r"\n    (async )?def ", source[start + 1:])
        source = source[:start] + (source[start + 2 + later.start():] if later else "")
    assert "dry_run_prompts" not in source and "retention_groups" not in source and "def score" in source
    return source


def facts(n: int) -> list[str]:
    return [f"Fact {k}: the box number {k} holds a {colour} marble."
            for k, colour in enumerate(["red", "blue", "green", "amber", "white", "black"][:n])]


@pytest.fixture
def toybench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The three files of the toy benchmark in ``tmp_path``, loaded through ``$AGENTLAB_EXTENSIONS``."""
    data = tmp_path / "toy.json"
    items = [{"id": f"t{q}", "question": f"What colour is the marble in box {q}?",
              "answer": ["red", "blue", "green", "amber", "white", "black"][q], "facts": facts(6), "evidence": q}
             for q in range(3)]
    data.write_text(json.dumps(items))
    module = tmp_path / f"{MODULE}.py"
    module.write_text(textwrap.dedent(TASK_SOURCE))
    bare = tmp_path / "toybare_ext.py"
    bare.write_text(textwrap.dedent(bare_source()))
    for path in (module, bare):
        path.with_suffix(".toml").write_text(f'[dataset]\npath = "{data}"\n')
    monkeypatch.setenv(EXTENSIONS_ENV, f"{module},{bare}")
    yield tmp_path
    for name in (NAME, "toybare"):
        TASKS.pop(name, None)
    sys.modules.pop("toybare_ext", None)
    ARMS.pop("toy_keep_last_two", None)
    sys.modules.pop(MODULE, None)


def test_a_benchmark_outside_the_package_runs_every_command(toybench: Path) -> None:
    db = toybench / "results.duckdb"
    code, out, err = run_cli("list")
    assert code == 0 and NAME in out, err

    code, out, err = run_cli(NAME, "--dry-run", "--json")
    assert code == 0, err
    dry = json.loads(out)
    assert dry["benchmark"] == NAME and dry["cases"] == 3 and dry["avg_prompt_tokens"] > 0

    with OpenAITestServer(context_window=32_000) as server:
        code, out, err = run_cli(NAME, "--model", server.model_spec, "--db", str(db), "--json", "--no-progress")
        assert code == 0, err
        with ResultStore(db) as store:
            assert store.query("SELECT count(*) FROM cases WHERE status = 'ok'") == [(3,)]
            assert store.query("SELECT count(*) FROM scores WHERE metric = 'contains'") == [(3,)]

        code, out, err = run_cli("league", NAME, "--arms", "toy_keep_last_two", "--model", server.model_spec,
                                 "--db", str(db), "--json", "--no-progress")
    assert code == 0, err
    table = json.loads(out)
    assert table["benchmark"] == NAME and table["baseline"] == "long_context"
    rows = {r["arm"]: r for r in table["rows"] if r["metric"] == "contains"}
    # The baseline shows every fact (evidence kept 1.0); the arm that keeps the last two events hides
    # the asked-about fact of every case (boxes 0-2 of 6), measured without a model.
    assert rows["long_context"]["evidence_kept"] == 1.0
    assert rows["toy_keep_last_two"]["evidence_kept"] == 0.0

    code, out, err = run_cli("retention", NAME, "--arms", "long_context,compaction", "--json", "--db", str(db))
    assert code == 0, err
    summaries = {s["arm"]: s for s in json.loads(out)["summaries"]}
    assert summaries["long_context"]["retained"] == 1.0 and summaries["long_context"]["n_scored"] == 3

    code, out, err = run_cli("report", NAME, "--db", str(db))
    assert code == 0, err
    assert "long_context" in out and "toy_keep_last_two" in out


def test_a_capability_the_task_lacks_is_one_error_line_and_the_league_still_runs(toybench: Path) -> None:
    db = toybench / "results.duckdb"
    for argv in (("toybare", "--dry-run"), ("retention", "toybare", "--db", str(db))):
        code, out, err = run_cli(*argv)
        assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err and "toybare" in err
    assert "toybench" in run_cli("retention", "toybare", "--db", str(db))[2]  # names the ones that have it
    with OpenAITestServer(context_window=32_000) as server:
        code, out, err = run_cli("league", "toybare", "--arms", "toy_keep_last_two", "--model", server.model_spec,
                                 "--db", str(db), "--json", "--no-progress")
    assert code == 0, err
    assert "has no dry run" in err  # the window check before the run is skipped, and said so
    rows = {r["arm"]: r for r in json.loads(out)["rows"] if r["metric"] == "contains"}
    assert rows["long_context"]["n_ok"] == 3 and rows["long_context"]["evidence_kept"] is None


def recorded_calls(base_url: str, n: int, wait: float = 30.0) -> list[dict[str, Any]]:
    """The proxy's call log (``GET /v1/agentlab/calls``) once it holds ``n`` rows: a row is written off the answer's path."""
    deadline = time.monotonic() + wait
    while True:
        calls = httpx.get(base_url + "/agentlab/calls", timeout=60).json()["data"]
        if len(calls) >= n or time.monotonic() > deadline:
            return calls
        time.sleep(0.1)


def test_the_toy_arm_is_served_by_the_proxy(toybench: Path) -> None:
    """The module's own arm, by name, from ``python -m agentlab.serve``: its projection reaches the upstream."""
    told = facts(4)
    env = {EXTENSIONS_ENV: str(toybench / f"{MODULE}.py")}
    with OpenAITestServer(record_requests=True) as upstream, \
            served_proxy(upstream.base_url, "toy_keep_last_two", toybench / "serve.duckdb", env=env) as base_url:
        messages: list[dict[str, str]] = [{"role": "system", "content": "You remember facts about boxes."}]
        for fact in told:
            messages.append({"role": "user", "content": fact})
            answer = httpx.post(base_url + "/chat/completions", json={"model": "test-model", "messages": messages},
                                timeout=60)
            assert answer.status_code == 200 and answer.headers["x-agentlab-arm"] == "toy_keep_last_two", answer.text
            messages.append({"role": "assistant", "content": answer.json()["choices"][0]["message"]["content"]})
        calls = recorded_calls(base_url, len(told))
    # The client sent every turn; the arm kept the last two history events and the new fact, so the
    # upstream never saw the first two facts in the last call.
    sent = [m["content"] for m in upstream.received[-1]["messages"]]
    assert sent[-1] == told[-1] and told[2] in sent and told[0] not in sent and told[1] not in sent
    assert [(c["arm"], c["status"], c["purpose"]) for c in calls] == [("toy_keep_last_two", 200, "answer")] * 4
    assert (calls[-1]["client_messages"], calls[-1]["upstream_messages"]) == (len(messages) - 1, len(sent))
    assert calls[-1]["upstream_prompt_tokens"] < calls[-1]["client_prompt_tokens"]
