"""Test doubles that behave like the real things: a local OpenAI-compatible server.

Imported lazily, so ``python -m agentlab.testing.openai_server`` runs its module only once.
"""

from typing import Any

__all__ = ["OpenAITestServer"]


def __getattr__(name: str) -> Any:
    if name == "OpenAITestServer":
        from agentlab.testing.openai_server import OpenAITestServer

        return OpenAITestServer
    raise AttributeError(name)
