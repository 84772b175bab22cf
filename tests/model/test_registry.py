from pathlib import Path

import pytest

from agentlab.model import CachedModel, CallCache, EmbeddedModel, OpenAICompatModel, get_model
from agentlab.model.registry import default_spec


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AGENTLAB_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTLAB_CACHE_DB", str(tmp_path / "cache.duckdb"))


def test_default_spec_follows_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_spec() == "embedded"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert default_spec() == "openai:gpt-4o-mini"
    monkeypatch.setenv("AGENTLAB_MODEL", "openai:m@http://127.0.0.1:9/v1")
    assert default_spec() == "openai:m@http://127.0.0.1:9/v1"


def test_embedded_spec_builds_without_starting_the_server() -> None:
    model = get_model(cache=False)
    assert isinstance(model, EmbeddedModel)
    assert model.info.context_window == 8192


def test_openai_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    hosted = get_model("openai:gpt-4o-mini", cache=False)
    assert isinstance(hosted, OpenAICompatModel)
    assert (hosted.model, hosted.base_url, hosted.info.context_window) == ("gpt-4o-mini", None, 128_000)

    local = get_model("openai:Qwen/Qwen2.5-7B-Instruct@http://localhost:8000/v1/", cache=False, context_window=32768)
    assert isinstance(local, OpenAICompatModel)
    assert (local.model, local.base_url, local.info.context_window) == (
        "Qwen/Qwen2.5-7B-Instruct", "http://localhost:8000/v1", 32768)

    monkeypatch.setenv("OPENAI_BASE_URL", "http://gateway.local/v1")
    assert get_model("openai:gpt-4o", cache=False).base_url == "http://gateway.local/v1"  # type: ignore[attr-defined]


def test_local_server_needs_no_key() -> None:
    model = get_model("openai:llama3.1@http://127.0.0.1:11434/v1", cache=False)
    assert isinstance(model, OpenAICompatModel)


def test_cache_wrapping(tmp_path: Path) -> None:
    cached = get_model("openai:m@http://127.0.0.1:9/v1")
    assert isinstance(cached, CachedModel)
    assert cached.cache.path == (tmp_path / "cache.duckdb").resolve()
    mine = CallCache(None)
    assert get_model("openai:m@http://127.0.0.1:9/v1", cache=mine).cache is mine  # type: ignore[attr-defined]
    assert not isinstance(get_model("openai:m@http://127.0.0.1:9/v1", cache=False), CachedModel)


@pytest.mark.parametrize("spec", ["scripted", "gpt-4o-mini", "openai:", "anthropic:claude", "openai:m@ftp://x"])
def test_unknown_spec_lists_valid_forms(spec: str) -> None:
    with pytest.raises(ValueError, match="valid forms.*embedded.*openai:<model>"):
        get_model(spec, cache=False)
