"""The ``--agent module:factory`` the agent back-end tests serve (its model: the upstream in the env)."""

from __future__ import annotations

import os

from agentlab.model.openai_compat import OpenAICompatModel
from agentlab.runtime.agent import LLMAgent


def make_agent() -> LLMAgent:
    """An agent on the test server named by ``AGENTLAB_SERVE_TEST_UPSTREAM``."""
    model = OpenAICompatModel("test-model", base_url=os.environ["AGENTLAB_SERVE_TEST_UPSTREAM"], api_key="x",
                              context_window=131_072, max_attempts=1)
    return LLMAgent("office-agent", model, instruction="You answer questions about the company's offices.")
