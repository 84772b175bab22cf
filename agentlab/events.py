"""Pure data of a run: messages, tool calls, usage and the events a run emits.

Nothing here does I/O. Every type round-trips through JSON (``to_dict`` / ``from_dict``) so
events can be persisted by any session backend and replayed exactly.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]

#: Event ``object`` kinds. Only a few of them are ever persisted (see ``Event.qualifies``).
OBJ_USER = "user.input"
OBJ_COMPLETION = "chat.completion"
OBJ_CHUNK = "chat.completion.chunk"
OBJ_TOOL_RESPONSE = "tool.response"
OBJ_STATE = "state.update"
OBJ_COMPACTION = "context.compaction"
OBJ_ERROR = "error"
OBJ_RUN_DONE = "runner.completion"


class _IdSequence:
    """Ids derived from a seed and a counter: the n-th id asked for under a seed is always the same."""

    def __init__(self, seed: str) -> None:
        self.seed = seed
        self._count = itertools.count()

    def next(self) -> str:
        return hashlib.sha256(f"{self.seed}\x00{next(self._count)}".encode()).hexdigest()[:32]


_ID_SEQUENCE: ContextVar[_IdSequence | None] = ContextVar("agentlab_id_sequence", default=None)


@contextmanager
def reproducible_ids(seed: str) -> Iterator[None]:
    """Within the block, :func:`new_id` derives ids from ``seed`` and the order they are asked for.

    Event, session and memory ids reach prompts (``session_search`` hits name the ``event_id`` to
    load; the memory extractor lists memory ids), so random ids would make every rerun of a case
    send different prompts: the call cache could not replay it and two runs of one case could not
    be compared call by call. The executor runs each case under a seed naming the benchmark, mode
    and case, so a case creates the same ids wherever and however often it runs, as long as its
    steps run in the same order. Asyncio tasks started inside the block share the sequence.
    """
    token = _ID_SEQUENCE.set(_IdSequence(seed))
    try:
        yield
    finally:
        _ID_SEQUENCE.reset(token)


def new_id(prefix: str = "") -> str:
    """A unique id, ``prefix`` first: random hex, or the next id of :func:`reproducible_ids`' seed."""
    sequence = _ID_SEQUENCE.get()
    return f"{prefix}{sequence.next() if sequence is not None else uuid.uuid4().hex}"


@dataclass(frozen=True)
class ToolCall:
    """A model's request to run one tool; ``arguments`` is the raw JSON string the model wrote."""

    id: str
    name: str
    arguments: str = "{}"

    def parsed_arguments(self) -> dict[str, Any]:
        """Arguments as a dict; raises ``ValueError`` with a readable message if not JSON."""
        try:
            value = json.loads(self.arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"tool {self.name!r} got arguments that are not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise ValueError(f"tool {self.name!r} arguments must be a JSON object")
        return value

    def to_dict(self) -> dict[str, Any]:
        """The stored form (a plain dict)."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        """The call from :meth:`to_dict` output; empty arguments become ``{}``."""
        return cls(id=data["id"], name=data["name"], arguments=data.get("arguments") or "{}")


@dataclass(frozen=True)
class Message:
    """One chat message. ``name`` carries the tool name on tool results."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    @staticmethod
    def system(text: str) -> Message:
        """A system message."""
        return Message(role="system", content=text)

    @staticmethod
    def user(text: str) -> Message:
        """A user message."""
        return Message(role="user", content=text)

    @staticmethod
    def assistant(text: str = "", tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()) -> Message:
        """An assistant message, optionally calling tools."""
        return Message(role="assistant", content=text, tool_calls=tuple(tool_calls))

    @staticmethod
    def tool(tool_call_id: str, name: str, content: str) -> Message:
        """The result of one tool call, answering ``tool_call_id``."""
        return Message(role="tool", content=content, tool_call_id=tool_call_id, name=name)

    def with_content(self, content: str) -> Message:
        """A copy with other content (messages are immutable: copy-on-write)."""
        return replace(self, content=content)

    def to_openai(self) -> dict[str, Any]:
        """The chat-completions wire form of this message."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
            if not self.content:
                out["content"] = None
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
        return out

    def to_dict(self) -> dict[str, Any]:
        """The stored form (tool calls as dicts)."""
        return {
            "role": self.role,
            "content": self.content,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "tool_call_id": self.tool_call_id,
            "name": self.name,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """The message from :meth:`to_dict` output (the stored form)."""
        return cls(
            role=data["role"],
            content=data.get("content") or "",
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


@dataclass(frozen=True)
class Usage:
    """Token usage as the provider reported it (the truth for cost)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens (cached tokens are part of the prompt)."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        """The stored form: the three counts."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage | None:
        """Usage from its stored form; ``None`` stays ``None`` (no usage reported)."""
        if data is None:
            return None
        return cls(**{k: int(data.get(k) or 0) for k in ("prompt_tokens", "completion_tokens", "cached_tokens")})


@dataclass
class Event:
    """One record of a run. The session ledger is a list of these and is never rewritten.

    ``choices`` holds the response messages (choice 0 is the one the run continues with);
    a user input, a tool result and an assistant answer are all events with one choice.
    ``token_count`` is computed once, when a session service appends the event.
    """

    author: str
    choices: list[Message] = field(default_factory=list)
    object: str = OBJ_COMPLETION
    id: str = field(default_factory=lambda: new_id("ev-"))
    invocation_id: str = ""
    request_id: str = ""
    timestamp: float = field(default_factory=time.time)
    partial: bool = False
    done: bool = True
    state_delta: dict[str, Any] = field(default_factory=dict)
    filter_key: str = ""
    usage: Usage | None = None
    error: str | None = None
    error_code: str | None = None
    token_count: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def message(self) -> Message | None:
        """The message the run continues with (choice 0), if any."""
        return self.choices[0] if self.choices else None

    @property
    def role(self) -> str | None:
        """The role of :attr:`message` (``None`` for an event without one)."""
        return self.message.role if self.message else None

    @property
    def text(self) -> str:
        """The content of :attr:`message` (empty without one)."""
        return self.message.content if self.message else ""

    def is_tool_result(self) -> bool:
        """Whether this event answers a tool call."""
        m = self.message
        return m is not None and m.role == "tool" and bool(m.tool_call_id)

    def is_tool_call(self) -> bool:
        """Whether this event is an assistant message that calls tools."""
        m = self.message
        return m is not None and m.role == "assistant" and bool(m.tool_calls)

    def is_final_response(self) -> bool:
        """A complete assistant answer that ends a request (no tool calls, no error)."""
        m = self.message
        return (
            m is not None
            and m.role == "assistant"
            and not m.tool_calls
            and not self.partial
            and self.done
            and self.error is None
        )

    def has_valid_content(self) -> bool:
        """Whether the message carries text or tool calls (an empty reply carries neither).

        A tool result is valid when empty: a tool that returned nothing still answers its call
        (tau-bench's ``think``), and a request that dropped it would orphan the call.
        """
        m = self.message
        if m is None:
            return False
        return bool(m.content) or bool(m.tool_calls) or (m.role == "tool" and bool(m.tool_call_id))

    def qualifies(self) -> bool:
        """Whether a runner persists this event: a state delta, or a complete valid response."""
        if self.partial or self.object == OBJ_CHUNK:
            return False
        if self.state_delta:
            return True
        return self.error is None and self.done and self.has_valid_content()

    def to_dict(self) -> dict[str, Any]:
        """The stored form: every field, messages and usage as dicts."""
        out = {name: getattr(self, name) for name in _event_fields()}
        out["choices"] = [m.to_dict() for m in self.choices]
        out["usage"] = self.usage.to_dict() if self.usage else None
        return out

    def to_json(self) -> str:
        """The stored form as JSON (keys sorted, so equal events serialise equally)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        """The event from its stored form; unknown keys (from a newer version) are ignored."""
        kwargs = dict(data)
        kwargs["choices"] = [Message.from_dict(m) for m in data.get("choices") or ()]
        kwargs["usage"] = Usage.from_dict(data.get("usage"))
        kwargs["state_delta"] = dict(data.get("state_delta") or {})
        kwargs["metadata"] = dict(data.get("metadata") or {})
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in kwargs.items() if k in known})

    @classmethod
    def from_json(cls, text: str) -> Event:
        """The event from :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))

    def copy_with(self, **changes: Any) -> Event:
        """A shallow copy with fields replaced; the original is untouched (copy-on-write)."""
        return replace(self, **changes)


def user_event(text: str, *, author: str = "user", invocation_id: str = "", request_id: str = "",
               filter_key: str = "", timestamp: float | None = None) -> Event:
    """A user-input event, the first event of every run."""
    return Event(
        author=author,
        choices=[Message.user(text)],
        object=OBJ_USER,
        invocation_id=invocation_id,
        request_id=request_id,
        filter_key=filter_key,
        timestamp=time.time() if timestamp is None else timestamp,
    )


@functools.cache
def _event_fields() -> tuple[str, ...]:
    """The names of :class:`Event`'s fields, in order (computed once: ``fields()`` is slow)."""
    return tuple(f.name for f in fields(Event))


#: Characters of a string beyond which :func:`dumps_in_pieces` encodes it in pieces of this many.
JSON_PIECE = 64 * 1024


def dumps_in_pieces(value: Any, *, sort_keys: bool = False, separators: tuple[str, str] = (", ", ": ")) -> str:
    """``json.dumps(value, ensure_ascii=False, sort_keys=..., separators=...)``, the same text, with
    each string past :data:`JSON_PIECE` characters encoded a piece at a time. ``json.dumps`` holds
    the interpreter lock for the whole text it encodes (a 4 MB string: tens of milliseconds under
    load); between pieces (well under a millisecond each) another thread, the event loop's, can run.
    """
    out: list[str] = []
    _encode(value, out, sort_keys, separators)
    return "".join(out)


def _encode(value: Any, out: list[str], sort_keys: bool, separators: tuple[str, str]) -> None:
    item_sep, key_sep = separators
    if not has_string_over(value, JSON_PIECE):
        out.append(json.dumps(value, ensure_ascii=False, sort_keys=sort_keys, separators=separators))
    elif isinstance(value, str):
        out.append('"')
        for start in range(0, len(value), JSON_PIECE):  # escaping is per character: the pieces join exactly
            out.append(json.dumps(value[start:start + JSON_PIECE], ensure_ascii=False)[1:-1])
        out.append('"')
    elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
        out.append("{")
        for i, key in enumerate(sorted(value) if sort_keys else value):
            out.append(item_sep if i else "")
            out.append(json.dumps(key, ensure_ascii=False) + key_sep)
            _encode(value[key], out, sort_keys, separators)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            out.append(item_sep if i else "")
            _encode(item, out, sort_keys, separators)
        out.append("]")
    else:  # a mapping with keys json.dumps converts: rare, encoded whole
        out.append(json.dumps(value, ensure_ascii=False, sort_keys=sort_keys, separators=separators))


def has_string_over(value: Any, limit: int) -> bool:
    """Whether ``value`` (JSON-like: dicts, lists, tuples) holds a string of more than ``limit``
    characters. A loop over a stack, not a recursion of generators: it runs for every event a
    ledger stores, and an event of the serve proxy has a few dozen values.
    """
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if len(node) > limit:
                return True
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return False


#: A place in a JSON-like value: the keys and list indices from its top.
JSONPath = tuple[Any, ...]


def take_long_strings(value: Any, limit: int, out: list[tuple[JSONPath, str]], path: JSONPath = ()) -> Any:
    """``value`` with each string of more than ``limit`` characters replaced by ``None`` and appended
    to ``out`` with its path (from ``path``). Containers on the way to a taken string are new ones
    (a tuple becomes a list); the rest, ``value``'s own, are returned as they are, never changed.
    """
    if isinstance(value, str):
        if len(value) > limit:
            out.append((path, value))
            return None
        return value
    if isinstance(value, dict):
        taken = len(out)
        items = {k: take_long_strings(v, limit, out, (*path, k)) for k, v in value.items()}
        return items if len(out) > taken else value
    if isinstance(value, (list, tuple)):
        taken = len(out)
        elements = [take_long_strings(v, limit, out, (*path, i)) for i, v in enumerate(value)]
        return elements if len(out) > taken else value
    return value


def put_at(root: Any, path: JSONPath, value: Any) -> None:
    """Set the place ``path`` of ``root`` (a non-empty path of keys and indices) to ``value``."""
    target = root
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
