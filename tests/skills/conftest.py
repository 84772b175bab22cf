"""The ``desk`` fixture: a support desk with skills and evolution (see ``desk.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.skills.desk import Desk, make_desk


@pytest.fixture
def desk(tmp_path: Path) -> Desk:
    return make_desk(tmp_path / "skills")
