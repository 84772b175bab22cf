"""Run ids of a fixed set of commands, computed without running a case.

``python tests/bench/run_id_commands.py OUT.json`` wrote ``data/run_ids_main.json`` from main's code
before the run specification existed; ``test_run_spec.py`` recomputes the ids through today's code
and requires them to be equal, so a refactoring of how a run is resolved cannot move an id.

The model is scripted (its window is the ``--context-window`` value when one is given, else 32,768)
and the executor runs no case: only the resolution up to the run id is exercised.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

SCRIPTED_WINDOW = 32_768
MODEL = "openai:gpt-4o-mini"

#: name → argv (without --db/--json/--no-progress). Demo commands need no data; the others need
#: the datasets under $AGENTLAB_DATA_DIR.
DEMO_COMMANDS: dict[str, list[str]] = {
    "demo_embedded_smoke": ["demo", "--limit", "2"],
    "demo_embedded_published": ["demo", "--limit", "2", "--published-settings"],
    "demo_recall_with_baselines": ["demo", "--mode", "recall", "--limit", "2", "--model", MODEL],
    "demo_set_variant": ["demo", "--mode", "summary", "--no-baselines", "--limit", "2", "--model", MODEL,
                         "--set", "answer.max_tokens=48"],
    "demo_named_variant": ["demo", "--limit", "2", "--model", MODEL, "--variant", "v1"],
    "demo_judge_model": ["demo", "--limit", "2", "--model", MODEL, "--judge-model", "openai:judge-x"],
    "demo_context_window": ["demo", "--limit", "2", "--model", MODEL, "--context-window", "4096"],
    "demo_sweep": ["sweep", "demo", "--mode", "summary", "--grid", "answer.max_tokens=16,32", "--limit", "2",
                   "--model", MODEL],
}
DATA_COMMANDS: dict[str, list[str]] = {
    "qmsum_recall": ["qmsum", "--mode", "recall", "--limit", "1", "--model", MODEL],
    "qmsum_long_context_set": ["qmsum", "--mode", "long_context", "--limit", "1", "--model", MODEL,
                               "--set", "answer.max_tokens=64"],
    "mtbench101_summary": ["mtbench101", "--mode", "summary", "--limit", "1", "--model", MODEL],
    "locomo_session_recall": ["locomo", "--mode", "session_recall", "--limit", "1", "--model", MODEL],
    "locomo_embedded": ["locomo", "--mode", "memory", "--no-baselines", "--limit", "1"],
    "locomo_embedded_published": ["locomo", "--mode", "memory", "--no-baselines", "--limit", "1",
                                  "--published-settings"],
    "qmsum_summary_window": ["qmsum", "--mode", "summary", "--no-baselines", "--limit", "1", "--model", MODEL,
                             "--context-window", "65536"],
}


@contextlib.contextmanager
def scripted_and_no_cases() -> Iterator[None]:
    """Every model is scripted and the in-process executor runs no case (nothing but the run ids)."""
    import bench_demo_task as demo  # registers the demo task

    import agentlab.model.registry as registry
    from agentlab.bench.running import executor
    from agentlab.model.base import ModelInfo
    from agentlab.model.scripted import ScriptedModel

    def fake_model(spec: str | None = None, *, context_window: int | None = None, **_: Any) -> Any:
        info = ModelInfo(str(spec), context_window or SCRIPTED_WINDOW,
                         "--context-window" if context_window else "scripted")
        return ScriptedModel(default_reply=demo.reply, info=info)  # type: ignore[arg-type]

    async def no_cases(self: Any, job: Any, todo: Any, deliver: Any) -> None:
        return None

    with mock.patch.object(registry, "get_model", fake_model), \
            mock.patch.object(registry, "default_spec", lambda: "embedded"), \
            mock.patch.object(executor.InProcessExecutor, "run", no_cases):
        yield


def _runs(payload: Any) -> list[list[str]]:
    """``[mode, run_id, variant]`` of every run in a CLI JSON payload, in order."""
    if isinstance(payload, dict):
        if "runs" in payload:
            return [pair for run in payload["runs"] for pair in _runs(run)]
        if "run_id" in payload:
            return [[payload["mode"], payload["run_id"], payload["variant"]]]
    return []


def run_ids(argv: list[str], db: Path) -> list[list[str]]:
    """The ``[mode, run_id, variant]`` triples the command makes (under :func:`scripted_and_no_cases`)."""
    from agentlab.bench.cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main([*argv, "--db", str(db), "--json", "--no-progress"], out=out)
    if code != 0:
        raise RuntimeError(f"{argv}: exit {code}: {err.getvalue()}")
    return _runs(json.loads(out.getvalue()))


def main(target: str) -> None:
    """Write ``{name: {"argv": ..., "runs": [[mode, run_id, variant], ...]}}`` of every command to ``target``."""
    data_dir = os.environ.get("AGENTLAB_DATA_DIR")
    commands = {**DEMO_COMMANDS, **(DATA_COMMANDS if data_dir else {})}
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, scripted_and_no_cases():
        os.environ["AGENTLAB_CACHE_DB"] = str(Path(tmp) / "cache.duckdb")
        for i, (name, argv) in enumerate(commands.items()):
            result[name] = {"argv": argv, "runs": run_ids(argv, Path(tmp) / f"r{i}.duckdb")}
    Path(target).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
