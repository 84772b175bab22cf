"""Window probes under a rewriting arm: only the upstream's model list, once, whatever the names."""

from __future__ import annotations

from typing import Any

import httpx


def _nine_names(server: Any) -> None:
    for i in range(9):
        response = httpx.post(server.base_url + "/chat/completions", timeout=30, json={
            "model": f"model-{i}", "messages": [{"role": "user", "content": f"question {i}"}]})
        assert response.status_code == 200, response.text


def test_nine_model_names_under_a_rewriting_arm_ask_the_model_list_once(recording, proxy) -> None:
    server = proxy("compaction", upstream=recording.base_url, upstream_api_key="sk-upstream")
    _nine_names(server)
    others = [(method, path) for method, path, _ in recording.seen if path != "/v1/chat/completions"]
    assert others == [("GET", "/v1/models")]  # no /props, /api/show, /api/v0/models; not once per name
    windows = server.app.backend.windows
    assert windows.fetches == 1
    stated = {name: info.context_window for name, info in windows._windows.items()}
    assert stated["model-0"] == 32768 and stated["model-5"] == 8192  # stated, else the fallback


def test_with_a_context_window_nothing_but_the_chat_route_is_asked(recording, proxy) -> None:
    server = proxy("compaction", upstream=recording.base_url, upstream_api_key="sk-upstream",
                   context_window=65536)
    _nine_names(server)
    assert {path for _, path, _ in recording.seen} == {"/v1/chat/completions"}
