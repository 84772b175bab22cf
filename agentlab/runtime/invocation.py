"""Older import path of the work order (now :mod:`agentlab.core.invocation`)."""

from __future__ import annotations

from agentlab.core.invocation import Agent, Invocation, RunOptions

__all__ = ["Agent", "Invocation", "RunOptions"]
