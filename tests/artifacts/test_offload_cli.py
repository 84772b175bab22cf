"""``retention <benchmark>`` runs the offload arm with no model: handles in the requests, recoverable by name."""

from __future__ import annotations

import json

from tests.bench.cli_helpers import run_cli


def test_retention_measures_artifact_offload_beside_the_baseline_with_its_threshold_set() -> None:
    code, out, err = run_cli("retention", "qmsum", "--limit", "2", "--arms", "long_context,artifact_offload",
                             "--set", "dataset.delivery=tool_results", "--set", "artifact_offload.threshold_tokens=512",
                             "--cache-profile", "anthropic", "--no-store", "--json")
    assert code == 0, err
    by_arm = {s["arm"]: s for s in json.loads(out)["summaries"]}
    base, offload = by_arm["long_context"], by_arm["artifact_offload"]
    assert base["recoverable"]["5"] is None  # no way back offered without the arm
    # Every read chunk is over 512 tokens: the evidence in its hidden middle is not in the request,
    # but each handle names its artifact, so one artifact_load brings it back.
    assert offload["retained"] < base["retained"] == 1.0
    assert offload["recoverable"]["5"] == offload["recoverable"]["10"] == 1.0
    assert offload["mean_total_prompt_tokens"] < base["mean_total_prompt_tokens"] / 2
    assert offload["extra"]["cache_busts"] == 0  # a handle never changes: no cached prefix is rewritten


def test_an_unknown_offload_setting_is_one_error_line() -> None:
    code, out, err = run_cli("retention", "qmsum", "--limit", "1", "--arms", "artifact_offload",
                             "--set", "artifact_offload.threshold=5", "--no-store")
    assert code != 0 and "threshold" in err and "Traceback" not in err
