"""A context-governing OpenAI-compatible server: ``python -m agentlab.serve``.

Two back ends behind one ``/v1/chat/completions``:

* **proxy** (``--upstream URL --arm NAME``): in front of any OpenAI-compatible server; each
  conversation gets a durable ledger and the arm's projection decides what goes upstream, so a
  context policy can be measured on an agent written with any client;
* **agent** (``--agent module:factory``): an agentlab ``LLMAgent`` served through a ``Runner``
  (tRPC-Agent-Go's OpenAI adapter).

Every call is recorded in ``serve_calls`` (see :func:`agentlab.serve.analysis.serve_calls_df`), every
tool call the server runs itself (recall) in ``serve_exchanges`` (:func:`~agentlab.serve.analysis.serve_exchanges_df`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlab._lazy import lazy_exports

_EXPORTS = {
    "arm_names": "agentlab.serve.arms",
    "get_arm": "agentlab.serve.arms",
    "ServeConfig": "agentlab.serve.server",
    "ServeApp": "agentlab.serve.server",
    "ServeHandle": "agentlab.serve.server",
    "serve_forever": "agentlab.serve.server",
    "start_server": "agentlab.serve.server",
    "serve_calls_df": "agentlab.serve.analysis",
    "savings_df": "agentlab.serve.analysis",
    "serve_exchanges_df": "agentlab.serve.analysis",
}

__all__ = ["ServeApp", "ServeConfig", "ServeHandle", "arm_names", "get_arm", "savings_df", "serve_calls_df",
           "serve_exchanges_df", "serve_forever", "start_server"]

if TYPE_CHECKING:
    from agentlab.serve.analysis import savings_df, serve_calls_df, serve_exchanges_df
    from agentlab.serve.arms import arm_names, get_arm
    from agentlab.serve.server import ServeApp, ServeConfig, ServeHandle, serve_forever, start_server

__getattr__, __dir__ = lazy_exports("agentlab.serve", _EXPORTS, globals())
