"""Components import the projection types without loading the agent and runner (no import cycle)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("component", ["agentlab.summary", "agentlab.recall", "agentlab.compaction"])
def test_a_component_loads_without_the_agent_and_runner(component: str) -> None:
    code = (f"import sys, {component}; "
            "loaded = [m for m in ('agentlab.runtime.agent', 'agentlab.runtime.runner') if m in sys.modules]; "
            "print(','.join(loaded))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_the_lazy_runtime_package_still_exports_its_names() -> None:
    import agentlab.runtime as runtime

    assert runtime.LLMAgent.__name__ == "LLMAgent"
    assert runtime.Runner.__module__ == "agentlab.runtime.runner"
    assert set(runtime.__all__) <= set(dir(runtime))
    with pytest.raises(AttributeError):
        runtime.NoSuchThing  # noqa: B018


def test_every_exported_name_is_listed_once() -> None:
    import agentlab.runtime as runtime

    assert sorted(runtime.__all__) == sorted(runtime._EXPORTS)
