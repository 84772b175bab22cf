"""Older import path of the projection types (now :mod:`agentlab.core.projection`)."""

from __future__ import annotations

from agentlab.core.projection import *  # noqa: F403  # the same names, re-exported
from agentlab.core.projection import __all__ as __all__  # noqa: PLC0414
