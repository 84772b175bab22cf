"""The in-process runtime: Runner -> Agent -> Model/Tools -> Events -> Session."""

from agentlab.runtime.agent import Agent, LLMAgent
from agentlab.runtime.context import RequestDraft, RequestProcessor, events_to_messages
from agentlab.runtime.invocation import Invocation, RunOptions
from agentlab.runtime.runner import Runner
from agentlab.runtime.tools import FunctionTool, Tool, ToolContext, tool

__all__ = [
    "Agent",
    "FunctionTool",
    "Invocation",
    "LLMAgent",
    "RequestDraft",
    "RequestProcessor",
    "RunOptions",
    "Runner",
    "Tool",
    "ToolContext",
    "events_to_messages",
    "tool",
]
