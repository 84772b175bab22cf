"""The chat-completions wire format as the server reads and writes it.

Pure functions, no I/O: checking a client's request body (every refusal is a :class:`RequestError`
that becomes an HTTP 400 naming the field), turning wire messages into agentlab
:class:`~agentlab.events.Message` objects and back, the canonical form of a message that
conversation matching hashes, the pairing check run before every upstream send, and the SSE
framing of a stream.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.events import Message, Role, ToolCall, dumps_in_pieces

#: Roles a client may send; ``developer`` is the newer name of ``system`` and is read as one.
CLIENT_ROLES = ("system", "developer", "user", "assistant", "tool")

#: Default :attr:`RequestLimits.max_messages`.
MAX_MESSAGES = 10_000
#: Default :attr:`RequestLimits.max_message_bytes`.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024

@dataclass(frozen=True)
class RequestLimits:
    """What one chat request may hold (beyond these it is refused with 413, nothing stored)."""

    #: Messages in one request.
    max_messages: int = MAX_MESSAGES
    #: Bytes of one message as JSON (what the ledger would store of it).
    max_message_bytes: int = MAX_MESSAGE_BYTES

    def check(self) -> None:
        """``ValueError`` naming a limit that is not positive."""
        if self.max_messages < 1:
            raise ValueError(f"--max-messages must be >= 1, got {self.max_messages}")
        if self.max_message_bytes < 1:
            raise ValueError(f"--max-message-bytes must be >= 1, got {self.max_message_bytes}")


_NUMBER = (int, float)
#: Known request fields and the JSON types they may hold (``None`` is always allowed: it means
#: "not set"). A known field of another type is refused; unknown fields pass through untouched.
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "messages": (list,),
    "stream": (bool,),
    "stream_options": (dict,),
    "tools": (list,),
    "tool_choice": (str, dict),
    "parallel_tool_calls": (bool,),
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "presence_penalty": _NUMBER,
    "frequency_penalty": _NUMBER,
    "max_tokens": (int,),
    "max_completion_tokens": (int,),
    "n": (int,),
    "seed": (int,),
    "stop": (str, list),
    "user": (str,),
    "metadata": (dict,),
    "response_format": (dict,),
    "prompt_cache_key": (str,),
    "logprobs": (bool,),
    "top_logprobs": (int,),
    "store": (bool,),
}

#: A UTF-16 surrogate (U+D800-U+DFFF) escaped in JSON text (a body holding one is checked for a lone surrogate).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

_TYPE_NAMES = {str: "a string", list: "an array", dict: "an object", bool: "a boolean", int: "an integer",
               float: "a number"}


class RequestError(Exception):
    """A request the server refuses; ``status`` (400 unless said otherwise) and a one-line message."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None,
                 code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The OpenAI-shaped error body."""
        return error_body(self.message, self.code, param=self.param)


def error_body(message: str, error_type: str, *, code: str | int | None = None,
               param: str | None = None) -> dict[str, Any]:
    """``{"error": {message, type, param, code}}``, the shape every OpenAI client parses."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code or error_type}}


def _is_type(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # JSON true is not a number here
        return bool in types
    return isinstance(value, types)


def parse_chat_request(raw: bytes | bytearray, *, max_messages: int | None = None) -> dict[str, Any]:
    """The request body as a dict, or :class:`RequestError` naming what is wrong with it (413 when
    it holds more than ``max_messages`` messages).
    """
    try:
        # Decoded strictly: ``json.loads`` of bytes would let surrogates (UTF-8 ``ED A0 80``, a lone
        # one in UTF-16) through as characters no UTF-8 encoder (nor the ledger) can take.
        body = json.loads(raw.decode(json.detect_encoding(raw)))
    except UnicodeDecodeError as exc:
        raise RequestError(f"the request body is not valid {exc.encoding.upper()} text: {exc.reason} at byte "
                           f"{exc.start} (a lone surrogate is not a character)") from None
    except json.JSONDecodeError as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise RequestError("the request body nests JSON too deeply") from None
    except ValueError as exc:  # an integer of more digits than Python converts (sys.set_int_max_str_digits)
        raise RequestError(f"the request body holds a number this server cannot read: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if _SURROGATE_ESCAPE.search(raw):
        # An escaped UTF-16 surrogate: only a pair makes a character, a lone one cannot be sent on.
        try:
            json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError as exc:
            raise RequestError(f"the request body holds a lone UTF-16 surrogate ({exc.object[exc.start:exc.end]!r}),"
                               " which is not a character") from None
        except RecursionError:
            raise RequestError("the request body nests JSON too deeply") from None
    for name, value in body.items():  # the fields sent, not every known one
        types = FIELD_TYPES.get(name)
        if types is not None and value is not None and not _is_type(value, types):
            wanted = " or ".join(_TYPE_NAMES[t] for t in types if t in _TYPE_NAMES)
            raise RequestError(f"field {name!r} must be {wanted}, got {type(value).__name__}", param=name)
    if body.get("n") not in (None, 1):
        raise RequestError(f"n={body['n']} is not supported: this server returns one choice (n must be 1)",
                           param="n")
    messages = body.get("messages")
    if not messages:
        raise RequestError("field 'messages' is required and must not be empty", param="messages")
    if max_messages is not None and len(messages) > max_messages:
        raise RequestError(f"the request holds {len(messages)} messages, over this server's limit of "
                           f"{max_messages} (--max-messages)", status=413, param="messages",
                           code="request_too_large")
    for i, m in enumerate(messages):
        check_message(m, i)
    for i, t in enumerate(body.get("tools") or []):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise RequestError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}",
                               param=f"tools[{i}]")
    return body


def parse_elsewhere(raw: bytes, max_messages: int | None = None) -> tuple[dict[str, Any] | None, tuple[Any, ...]]:
    """:func:`parse_chat_request` for a worker process: ``(body, ())``, or ``(None, (message, status,
    param, code))`` of the :class:`RequestError` (which does not survive pickling whole).
    """
    try:
        return parse_chat_request(raw, max_messages=max_messages), ()
    except RequestError as exc:
        return None, (exc.message, exc.status, exc.param, exc.code)


def parse_shared(name: str, size: int, max_messages: int | None = None) -> tuple[dict[str, Any] | None, tuple[Any, ...]]:
    """:func:`parse_elsewhere` of the ``size`` bytes in the shared memory block ``name`` (for a
    worker process: the body is not pickled through the pool's queue).
    """
    from multiprocessing.shared_memory import SharedMemory

    # Attaching registers the name with the resource tracker this process shares with the proxy
    # (a second registration of one name changes nothing); the proxy unlinks the block.
    shared = SharedMemory(name=name)
    try:
        buffer = shared.buf
        assert buffer is not None
        raw = bytes(buffer[:size])
        del buffer
    finally:
        shared.close()
    return parse_elsewhere(raw, max_messages)


def stored_size(m: dict[str, Any], canon: str, limit: int) -> int:
    """Bytes the ledger stores of message ``m`` (``canon`` its canonical text), exact when it may
    exceed ``limit``, else a cheap bound below it.
    """
    size = len(canon)  # characters: UTF-8 bytes are at least as many, at most four times
    content = m.get("content")
    if isinstance(content, list):  # parts the canonical text leaves out (images, audio) are stored too
        size += sum(len(json.dumps(p, ensure_ascii=False)) for p in content
                    if not (isinstance(p, dict) and p.get("type") == "text"))
    if size * 4 <= limit:
        return size
    return len(dumps_in_pieces(m).encode())  # in pieces: this runs in a worker thread for a large body


def check_message(m: Any, i: int) -> None:
    """Refuse a message the chat-completions format does not allow (``messages[i]`` in the message)."""
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        raise RequestError(f"{where} must be an object", param=where)
    role = m.get("role")
    if role not in CLIENT_ROLES:
        raise RequestError(f"{where}.role must be one of {', '.join(CLIENT_ROLES)}, got {role!r}", param=where)
    content = m.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise RequestError(f"{where}.content must be a string or an array of parts", param=where)
    for text_field in ("name", "tool_call_id"):
        if m.get(text_field) is not None and not isinstance(m[text_field], str):
            raise RequestError(f"{where}.{text_field} must be a string, got {type(m[text_field]).__name__}",
                               param=where)
    if role == "tool" and not isinstance(m.get("tool_call_id"), str):
        raise RequestError(f"{where} is a tool result without a string tool_call_id", param=where)
    calls = m.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise RequestError(f"{where}.tool_calls must be an array on an assistant message", param=where)
        for j, c in enumerate(calls):
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(c.get("id"), str):
                raise RequestError(f"{where}.tool_calls[{j}] needs an id and function.name", param=where)


# ------------------------------------------------------------------------------ messages


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, dict) and p.get("type", "text") == "text")
    return ""


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


def to_message(m: dict[str, Any]) -> Message:
    """An agentlab message from a (checked) wire message; ``developer`` becomes ``system``."""
    role: Role = "system" if m["role"] == "developer" else m["role"]
    calls = tuple(
        ToolCall(id=c["id"], name=c["function"]["name"], arguments=_arguments_text(c["function"].get("arguments")))
        for c in m.get("tool_calls") or ()
    )
    return Message(role=role, content=content_text(m.get("content")), tool_calls=calls,
                   tool_call_id=m.get("tool_call_id"), name=m.get("name") if role == "tool" else None)


def to_wire(m: Message) -> dict[str, Any]:
    """The wire form of an agentlab message (``name`` kept on tool results)."""
    out = m.to_openai()
    if m.role == "tool" and m.name:
        out["name"] = m.name
    return out


def _canonical_arguments(arguments: Any) -> str:
    text = _arguments_text(arguments)
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (json.JSONDecodeError, TypeError):
        return " ".join(text.split())


def canonical(m: dict[str, Any]) -> str:
    """The canonical text of a wire message, as conversation matching compares it.

    Clients re-serialise what they were sent (``content: null`` for ``""``, text parts, re-dumped
    tool arguments, changed whitespace), so only what survives that is kept: the role
    (``developer`` = ``system``), whitespace-normalised text, tool calls as (id, name, arguments
    as sorted JSON), and the answered call id.
    """
    role = "system" if m.get("role") == "developer" else m.get("role")
    calls = [[c.get("id"), (c.get("function") or {}).get("name"),
              _canonical_arguments((c.get("function") or {}).get("arguments"))]
             for c in m.get("tool_calls") or ()]
    parts: list[Any] = [role, normalise_space(content_text(m.get("content"))), calls, m.get("tool_call_id")]
    return dumps_in_pieces(parts, separators=(",", ":"))  # a long text in pieces (see dumps_in_pieces)


#: Characters of text whitespace-normalised in one step (a longer text is done in pieces).
SPACE_PIECE = 1 << 18
_SPACE = re.compile(r"\s")


def normalise_space(text: str) -> str:
    """``" ".join(text.split())``, in pieces of about :data:`SPACE_PIECE` characters cut at whitespace.

    One ``split`` of a 4 MB text makes 800,000 strings in a single step that holds the interpreter
    lock (about 100 ms): a worker thread counting a large request held up the event loop that long.
    Cut at whitespace, the pieces' words are the text's words, so the result is the same.
    """
    if len(text) <= SPACE_PIECE:
        return " ".join(text.split())
    pieces: list[str] = []
    start = 0
    while start < len(text):
        found = _SPACE.search(text, min(start + SPACE_PIECE, len(text)))
        end = found.start() if found is not None else len(text)
        words = " ".join(text[start:end].split())
        if words:
            pieces.append(words)
        start = end + 1 if found is not None else end
    return " ".join(pieces)


def chain_hashes(messages: Sequence[dict[str, Any]], seed: str = "", canon: Sequence[str] | None = None) -> list[str]:
    """``h[i]`` identifies ``messages[: i + 1]``: each hash folds the previous one and a canonical message
    (``canon``: the messages' :func:`canonical` texts, when already known).
    """
    out: list[str] = []
    previous = seed
    for text in canon if canon is not None else map(canonical, messages):
        previous = hashlib.sha256(f"{previous}\x00{text}".encode()).hexdigest()[:32]
        out.append(previous)
    return out


# ------------------------------------------------------------------------------ the send check


def pairing_problem(messages: Sequence[dict[str, Any]]) -> str | None:
    """Why ``messages`` would be refused by a provider, or ``None`` when they are well formed.

    Every tool result answers a call of the assistant message just before its run of results,
    every call has its result before the next other message, no call id repeats, roles are known.
    """
    if not messages:
        return "the request has no messages"
    pending: set[str] = set()
    seen_calls: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in CLIENT_ROLES:
            return f"messages[{i}] has the unknown role {role!r}"
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id not in pending:
                return f"messages[{i}] is a tool result for {call_id!r}, which no pending tool call asked for"
            pending.discard(call_id)
            continue
        if pending:
            return f"messages[{i}] ({role}) comes before the results of tool calls {sorted(pending)}"
        for c in m.get("tool_calls") or ():
            call_id = c.get("id")
            if call_id in seen_calls:
                return f"messages[{i}] repeats the tool call id {call_id!r}"
            seen_calls.add(call_id)
            pending.add(call_id)
    if pending:
        return f"the request ends with tool calls {sorted(pending)} that have no results"
    return None


# ------------------------------------------------------------------------------ streams


def sse(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``payload`` as JSON."""
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def chunk(response_id: str, model: str, created: int, delta: dict[str, Any],
          finish_reason: str | None = None) -> dict[str, Any]:
    """A ``chat.completion.chunk`` with one choice."""
    return {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def tool_call_deltas(calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stream deltas of whole tool calls: one per call, each with its ``index``, id, type and function."""
    return [{"index": i, "id": c["id"], "type": "function",
             "function": {"name": c["function"]["name"], "arguments": c["function"].get("arguments") or ""}}
            for i, c in enumerate(calls)]


def usage_dict(usage: dict[str, Any] | None) -> tuple[int, int, int]:
    """(prompt, completion, cached) tokens of a wire ``usage`` object (zeros when absent)."""
    if not isinstance(usage, dict):
        return 0, 0, 0
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), int(cached or 0)
