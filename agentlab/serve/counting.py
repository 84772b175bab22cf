"""Canonical text, wire form and token counts of messages, remembered across a proxy's calls.

A client sends its whole history every call, so without these caches every earlier message would
be normalised, converted and counted again each time. Each cache is bounded (cleared when full).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from agentlab.events import Event, Message
from agentlab.model import tokens
from agentlab.serve.wire import canonical, chain_hashes, to_message, to_wire

#: Entries a cache keyed by content holds before it is cleared.
CONTENT_CACHE = 100_000
#: Characters of canonical text the cache of client messages holds before it is cleared (64 Mi).
CACHE_CHARS = 64 * 1024 * 1024
#: Entries a cache keyed by a live object's id holds before it is cleared.
OBJECT_CACHE = 200_000


#: Characters beyond which a text is not kept as a cache key (its length and hash are).
LONG_TEXT = 4096


def _key(text: str) -> str | tuple[int, int]:
    """A cache key of ``text``: itself, or for a long one its length and hash (so a cache of counts
    does not keep megabytes of text alive).
    """
    return text if len(text) <= LONG_TEXT else (len(text), hash(text))


def prefix_tokens(previous: Sequence[tuple[str, int]], current: Sequence[tuple[str, int]]) -> int:
    """Tokens of the longest message prefix two calls share (what a provider's prefix cache can reuse)."""
    shared = 0
    for (a, _), (b, cum) in zip(previous, current, strict=False):
        if a != b:
            break
        shared = cum
    return shared


class MessageCounter:
    """The proxy's caches of canonical text, wire dicts and token counts (local estimates)."""

    def __init__(self) -> None:
        self._token_cache: dict[str | tuple[int, int], int] = {}
        self._canon_cache: dict[int, tuple[dict[str, Any], str]] = {}
        self._request_canon: dict[tuple[Any, Any, Any, Any], str] = {}
        #: Characters of canonical text ``_request_canon`` holds (it is cleared beyond :data:`CACHE_CHARS`).
        self._canon_chars = 0
        self._wire_cache: dict[int, tuple[Message, dict[str, Any]]] = {}

    def message_tokens(self, canon: str, message: Message) -> int:
        """Tokens of ``message`` whose canonical text is ``canon``."""
        key = _key(canon)
        cached = self._token_cache.get(key)
        if cached is None:
            if len(self._token_cache) > CONTENT_CACHE:
                self._token_cache.clear()
            cached = self._token_cache[key] = tokens.count_message(message)
        return cached

    def wire_of(self, m: Message) -> dict[str, Any]:
        """:func:`to_wire` of ``m``, the same dict every time for a message that lives on (a ledger
        message), so its canonical text and token count are computed once, not every call.
        """
        cached = self._wire_cache.get(id(m))
        if cached is not None and cached[0] is m:
            return cached[1]
        if len(self._wire_cache) > OBJECT_CACHE:
            self._wire_cache.clear()
        wire = to_wire(m)
        self._wire_cache[id(m)] = (m, wire)
        return wire

    def canonical_of(self, m: dict[str, Any]) -> str:
        """:func:`canonical` of ``m``, remembered for message objects that live on (the ledger's raw messages)."""
        cached = self._canon_cache.get(id(m))
        if cached is not None and cached[0] is m:
            return cached[1]
        if len(self._canon_cache) > OBJECT_CACHE:
            self._canon_cache.clear()
        text = self.canonical_of_request(m)  # a new copy of a known message (compaction's) hits by content
        self._canon_cache[id(m)] = (m, text)
        return text

    def canonical_of_request(self, m: dict[str, Any]) -> str:
        """:func:`canonical` of a message a client sent, remembered by what it depends on when that
        is hashable (role, text, answered call id, and each tool call's id, name and arguments).
        """
        content = m.get("content")
        if not (content is None or isinstance(content, str)):
            return canonical(m)
        calls: tuple[Any, ...] = ()
        if m.get("tool_calls"):
            try:  # (id, name, arguments) of each call, when all are plain strings
                calls = tuple((c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"])
                hash(calls)
            except (KeyError, TypeError):
                return canonical(m)
        key = (m.get("role"), _key(content) if content else content, m.get("tool_call_id"), calls)
        text = self._request_canon.get(key)
        if text is None:
            if len(self._request_canon) > CONTENT_CACHE or self._canon_chars > CACHE_CHARS:
                self._request_canon.clear()
                self._canon_chars = 0
            text = self._request_canon[key] = canonical(m)
            self._canon_chars += len(text)
        return text

    def count(self, messages: Sequence[dict[str, Any]], tool_list: Sequence[dict[str, Any]] | None,
              seed: str, canon: Sequence[str] | None = None,
              chain: Sequence[str] | None = None) -> tuple[int, list[tuple[str, int]]]:
        """Prompt tokens (local estimate, the same counter on both sides) and the cumulative chain
        (``chain``: the messages' chain hashes from ``seed``, when already known).
        """
        canon = canon if canon is not None else [self.canonical_of(m) for m in messages]
        chain = chain if chain is not None else chain_hashes(messages, seed, canon)
        total = 0
        cumulative: list[tuple[str, int]] = []
        for h, text, m in zip(chain, canon, messages, strict=True):
            counted = self._token_cache.get(_key(text))
            if counted is None:
                counted = self.message_tokens(text, to_message(m))
            total += counted
            cumulative.append((h, total))
        return total + tokens.REPLY_PRIMING_TOKENS + self.tool_tokens(tool_list), cumulative

    def tool_tokens(self, tool_list: Sequence[dict[str, Any]] | None) -> int:
        """Tokens of the tool declarations of a request."""
        if not tool_list:
            return 0
        key = json.dumps(tool_list, sort_keys=True)
        counted = self._token_cache.get(key)
        if counted is None:
            counted = self._token_cache[key] = tokens.count_tools(list(tool_list))
        return counted

    def forget(self, events: Iterable[Event]) -> None:
        """Drop the entries keyed by these events' objects (an evicted conversation's), so the
        caches do not keep them alive.
        """
        for event in events:
            if event.message is not None:
                self._wire_cache.pop(id(event.message), None)
            raw = event.metadata.get("raw")
            if raw is not None:
                self._canon_cache.pop(id(raw), None)
