"""One home for "which window does this run work with": agentlab.model.window.resolve_context_window."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agentlab.compaction import CompactionPolicy
from agentlab.compaction import resolve_window as compaction_window
from agentlab.events import Message
from agentlab.model import window as window_module
from agentlab.model.base import ModelInfo
from agentlab.model.scripted import ScriptedModel
from agentlab.model.window import resolve_context_window, stated_window
from agentlab.policy_json import FieldError
from agentlab.runtime import RunOptions
from agentlab.session.inmemory import InMemorySessionService
from agentlab.summary import SummaryPolicy
from agentlab.summary.summarizer import Summarizer
from agentlab.summary.worker import SummaryWorker, _invocation_window


def model(window: int) -> ScriptedModel:
    return ScriptedModel(info=ModelInfo("m", window, "test"))


def test_the_first_stated_window_wins_then_the_fallback() -> None:
    assert resolve_context_window(None, 0, 4096, model(8000)) == 4096
    assert resolve_context_window(None, model(8000), fallback=1) == 8000
    assert resolve_context_window(None, model(0), ModelInfo("x", 300, ""), fallback=1) == 300
    assert resolve_context_window(None, model(0), object(), fallback=8192) == 8192
    assert resolve_context_window() == 0
    assert (stated_window(True), stated_window(-5), stated_window("7"), stated_window(model(9))) == (0, 0, 7, 9)


def test_every_mechanism_and_the_harness_ask_the_one_function(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlab.bench.tasks import CaseError, check_window

    asked: list[tuple[Any, ...]] = []

    def spy(*sources: Any, fallback: int = 0) -> int:
        asked.append(sources)
        return 111

    monkeypatch.setattr(window_module, "resolve_context_window", spy)
    m = model(50_000)
    summarizer = Summarizer(m, SummaryPolicy())
    worker = SummaryWorker(InMemorySessionService(), summarizer)
    inv = SimpleNamespace(options=RunOptions(context_window=2000), agent=SimpleNamespace(model=m))
    ctx = SimpleNamespace(model=m)
    assert summarizer.window == 111
    assert worker.resolve_window(None) == 111
    assert _invocation_window(inv) == 111  # type: ignore[arg-type]
    assert compaction_window(inv.agent, inv) == 111  # type: ignore[arg-type]
    with pytest.raises(CaseError, match="111-token window"):
        check_window([Message.user("word " * 400)], ctx)  # type: ignore[arg-type]
    assert len(asked) >= 5
    assert (2000, m) in asked  # the run's override first, then the agent's model


def test_one_spelling_of_the_fallback_window() -> None:
    assert CompactionPolicy().context_fallback_window == SummaryPolicy().context_fallback_window == 8192
    assert CompactionPolicy(context_fallback_window=4096).fallback_context_window == 4096  # the old name reads
    with pytest.raises(FieldError, match="fallback_context_window was renamed to context_fallback_window"):
        CompactionPolicy.from_dict({"fallback_context_window": 4096})
    assert CompactionPolicy.from_dict({"context_fallback_window": 4096}).context_fallback_window == 4096


def test_a_settings_file_with_the_old_name_is_refused_with_the_new_one(tmp_path: Any) -> None:
    from agentlab.bench.config import SettingsError, load_settings

    (tmp_path / "x.toml").write_text("[compaction]\nfallback_context_window = 4096\n")
    with pytest.raises(SettingsError, match=r"no field 'fallback_context_window' \(renamed to 'context_fallback_window'\)"):
        load_settings("x", {"compaction": CompactionPolicy}, directory=tmp_path)
