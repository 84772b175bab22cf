from __future__ import annotations

import pytest

from agentlab.session.inmemory import InMemorySessionService


@pytest.fixture
def svc() -> InMemorySessionService:
    return InMemorySessionService()
