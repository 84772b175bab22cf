"""Which conversation a request belongs to.

The rule, first hit wins:

1. **header**: ``X-Agentlab-Conversation-Id`` (or ``X-Session-ID``, as tRPC-Agent-Go's server reads it);
2. **body**: ``metadata.agentlab_conversation_id``;
3. **retry**: the same body as a call of the last ten minutes, when that call failed or the client
   says it retries (``x-stainless-retry-count`` > 0); a first turn has no prefix to match yet;
4. **prefix**: the longest chain of already-seen messages (see :func:`agentlab.serve.wire.chain_hashes`)
   that covers at least the first user message and one message after it, when exactly one
   conversation has it (two would be a guess: the request starts a new conversation instead);
5. **new**: a fresh id.

An explicit id that is not 1-128 characters of ``A-Za-z0-9._:-`` is refused (HTTP 400), never
passed over. Every key lives in a *tenant*: a hash of the caller's credentials (the
``Authorization`` header) and the upstream, so two callers never share a conversation, whatever
ids they send or however alike their messages are.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.serve.wire import RequestError

CONVERSATION_HEADER = "x-agentlab-conversation-id"
KEY_SOURCE_HEADER = "x-agentlab-key-source"
#: Headers naming a conversation, in the order they are read.
EXPLICIT_HEADERS = (CONVERSATION_HEADER, "x-session-id")
BODY_FIELD = "agentlab_conversation_id"
VALID_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def tenant_of(credentials: str, upstream: str) -> str:
    """The namespace of a caller: a hash of its credentials and the upstream it reaches."""
    return hashlib.sha256(f"{credentials}\x00{upstream}".encode()).hexdigest()[:16]


def new_conversation_id() -> str:
    """A fresh conversation id."""
    return f"conv-{uuid.uuid4().hex[:24]}"


def _checked(value: Any, where: str) -> str:
    if not isinstance(value, str) or not VALID_ID.fullmatch(value):
        raise RequestError(f"{where} must be 1-128 characters of A-Z a-z 0-9 . _ : - (starting with a letter "
                           f"or digit), got {str(value)[:60]!r}", param=where)
    return value


def explicit_id(headers: Mapping[str, str], body: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(id, "header"|"body")`` when the request names its conversation; ``RequestError`` when the
    name is malformed.
    """
    for name in EXPLICIT_HEADERS:
        if name in headers:
            return _checked(headers[name], f"header {name}"), "header"
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and BODY_FIELD in metadata:
        return _checked(metadata[BODY_FIELD], f"metadata.{BODY_FIELD}"), "body"
    return None


def min_prefix_length(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many leading messages a prefix match must cover: through the first user message, plus one."""
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))
    return first_user + 2


@dataclass(frozen=True)
class PrefixMatch:
    """The outcome of a prefix lookup: the conversation (``None`` when none or ambiguous) and how
    many leading messages matched.
    """

    conversation_id: str | None
    length: int
    ambiguous: bool = False


def match_prefix(index: Mapping[tuple[str, str], set[str]], tenant: str, chain: Sequence[str],
                 minimum: int) -> PrefixMatch:
    """The longest prefix of ``chain`` (at least ``minimum`` long) that a conversation of ``tenant`` has."""
    for length in range(len(chain), minimum - 1, -1):
        if length <= 0:
            break
        found = index.get((tenant, chain[length - 1]))
        if found:
            if len(found) == 1:
                return PrefixMatch(next(iter(found)), length)
            return PrefixMatch(None, length, ambiguous=True)
    return PrefixMatch(None, 0)
