"""Test doubles that behave like the real things: a local OpenAI-compatible server.

Imported lazily, so ``python -m agentlab.testing.openai_server`` runs its module only once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab._lazy import lazy_exports

if TYPE_CHECKING:
    from agentlab.testing.openai_server import OpenAITestServer

__all__ = ["OpenAITestServer"]

__getattr__, __dir__ = lazy_exports("agentlab.testing", {"OpenAITestServer": "agentlab.testing.openai_server"},
                                    globals())
