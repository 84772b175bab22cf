"""Older import path of the tool types (now :mod:`agentlab.core.tools`)."""

from __future__ import annotations

from agentlab.core.tools import (
    FunctionTool,
    Tool,
    ToolContext,
    check_arguments,
    function_declaration,
    render_tool_result,
    tool,
)

__all__ = ["FunctionTool", "Tool", "ToolContext", "check_arguments", "function_declaration", "render_tool_result",
           "tool"]
