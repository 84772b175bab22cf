"""Session Recall: tools that bring raw evidence back after summary or compaction hid it.

* ``session_search`` — search the current session's hidden (summarised-away) history, the whole
  current session, or the user's other sessions (lexical BM25, dense, or hybrid RRF).
* ``session_load`` — load a tiny raw window around one event, paging large tool results.
* preload recall — before the first model call, inject related events from other sessions.

Everything recalled is framed as historical data, never as instructions. The knobs are one
frozen :class:`RecallPolicy`; ``LLMAgent(recall=RecallPolicy(...))`` switches recall on.
Submodules: :mod:`~agentlab.recall.embed` (embedders), :mod:`~agentlab.recall.index` (generic
search primitives), :mod:`~agentlab.recall.search` (event index + ``session_search``),
:mod:`~agentlab.recall.tools` (the tools, ``session_load``, the overview),
:mod:`~agentlab.recall.preload` (preload recall), :mod:`~agentlab.recall.policy` (the
settings) and :mod:`~agentlab.recall.mechanism` (what an agent runs for them).

"The reference" and a "reference" default are trpc-agent-go's session recall, read at the
commit and paths that docs/sources.md#session-recall names.
"""

from __future__ import annotations

from agentlab.recall.mechanism import RecallMechanism
from agentlab.recall.policy import INJECTION_MODES, SCOPES, SEARCH_MODES, RecallPolicy

__all__ = ["INJECTION_MODES", "SCOPES", "SEARCH_MODES", "RecallMechanism", "RecallPolicy"]
