"""A large request's parsed body handed from the parsing process back to the proxy in pieces.

The proxy parses a large body in a worker process (the JSON decoder holds the interpreter lock
for the whole parse). Returned through the process pool as one object, the parsed body was
unpickled on the proxy's side in one ``pickle.loads``: tens of megabytes of strings decoded in
one call holding the lock, during which the event loop could not run. Instead the worker
(:func:`parse_to_pieces`) writes the body into a shared memory block as

* the body without its messages, pickled; the messages, pickled a group of at most
  :data:`PICKLE_PIECE` bytes at a time;
* every string of at least :data:`LARGE_STRING` characters, taken out of what is pickled, as
  UTF-8 (``surrogatepass``: a lone surrogate escaped in the JSON survives), with the path where
  it goes;

and returns only the small :class:`Handoff` (the block's name and where each piece is).
:func:`rebuild` (run in a worker thread) then makes the same object as ``json.loads`` one piece at
a time: no call over one group of messages or :data:`DECODE_PIECE` bytes of one string, so the
lock passes to the event loop between pieces. The block is unlinked once read (or on failure).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.shared_memory import SharedMemory
from typing import Any

from agentlab.events import JSONPath, put_at, take_long_strings
from agentlab.serve.wire import parse_shared

__all__ = ["DECODE_PIECE", "LARGE_STRING", "PICKLE_PIECE", "Handoff", "discard", "pack", "parse_to_pieces",
           "rebuild"]

#: Strings of at least this many characters go over as UTF-8 bytes, not pickled with the rest.
LARGE_STRING = 64 * 1024
#: Bytes of pickled messages (at most, past the first message of a group) unpickled at once.
PICKLE_PIECE = 1 << 20
#: Bytes of one large string's UTF-8 decoded at once.
DECODE_PIECE = 1 << 20

@dataclass(frozen=True)
class Handoff:
    """Where the pieces of one parsed body are in the shared memory block ``name``.

    ``top`` is the pickle of the body without ``messages``; ``groups`` the pickles of lists of
    consecutive messages; ``strings`` the large strings (their path from the top of the body, and
    their UTF-8 bytes), each an ``(offset, length)`` in the block.
    """

    name: str
    top: tuple[int, int]
    groups: tuple[tuple[int, int], ...]
    strings: tuple[tuple[JSONPath, int, int], ...]


def pack(body: dict[str, Any]) -> tuple[list[bytes], Handoff]:
    """The pieces of a parsed request ``body`` (its ``messages`` a list; the pieces' bytes in order)
    and a :class:`Handoff` naming no block yet (``name`` empty; offsets into the pieces joined end
    to end).
    """
    large: list[tuple[JSONPath, str]] = []
    # ``messages`` keeps its place (None until rebuilt): the keys' order is the client's.
    rest = {k: None if k == "messages" else take_long_strings(v, LARGE_STRING - 1, large, (k,))
            for k, v in body.items()}
    pieces: list[bytes] = []
    offset = 0

    def add(data: bytes) -> tuple[int, int]:
        nonlocal offset
        pieces.append(data)
        offset += len(data)
        return offset - len(data), len(data)

    top = add(pickle.dumps(rest, protocol=pickle.HIGHEST_PROTOCOL))
    groups: list[tuple[int, int]] = []
    group: list[Any] = []
    size = 0
    for i, m in enumerate(body["messages"]):
        m = take_long_strings(m, LARGE_STRING - 1, large, ("messages", i))
        one = len(pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL))
        if group and size + one > PICKLE_PIECE:
            groups.append(add(pickle.dumps(group, protocol=pickle.HIGHEST_PROTOCOL)))
            group, size = [], 0
        group.append(m)
        size += one
    groups.append(add(pickle.dumps(group, protocol=pickle.HIGHEST_PROTOCOL)))
    strings = tuple((path, *add(text.encode("utf-8", "surrogatepass"))) for path, text in large)
    return pieces, Handoff("", top, tuple(groups), strings)


def parse_to_pieces(name: str, size: int, max_messages: int | None = None) -> tuple[Handoff | None, tuple[Any, ...]]:
    """:func:`~agentlab.serve.wire.parse_shared` of the body in block ``name``, its result written
    into a new shared memory block (for the worker process; ``(None, error)`` as ``parse_shared``).
    """
    body, error = parse_shared(name, size, max_messages)
    if body is None:
        return None, error
    pieces, handoff = pack(body)
    del body
    total = sum(len(p) for p in pieces)
    block = SharedMemory(create=True, size=max(1, total))
    try:
        buffer = block.buf
        assert buffer is not None
        at = 0
        for piece in pieces:
            buffer[at:at + len(piece)] = piece
            at += len(piece)
        del buffer
    except BaseException:
        block.close()
        block.unlink()
        raise
    block.close()  # the proxy unlinks it once read (or discard() on failure)
    return Handoff(block.name, handoff.top, handoff.groups, handoff.strings), ()


def _decode(view: memoryview) -> Iterator[str]:
    """The UTF-8 ``view`` decoded :data:`DECODE_PIECE` bytes at a time (cut on character boundaries)."""
    start, end = 0, len(view)
    while start < end:
        stop = min(start + DECODE_PIECE, end)
        while stop < end and view[stop] & 0xC0 == 0x80:  # a continuation byte: not a character's start
            stop -= 1
        yield str(view[start:stop], "utf-8", "surrogatepass")
        start = stop


def rebuild(handoff: Handoff) -> dict[str, Any]:
    """The body ``handoff`` describes (equal to ``json.loads`` of the request), built one piece at a
    time; the block is unlinked. Meant for a worker thread of the proxy.
    """
    block = SharedMemory(name=handoff.name)
    try:
        view = block.buf
        assert view is not None
        try:
            start, length = handoff.top
            body: dict[str, Any] = pickle.loads(view[start:start + length])
            messages: list[Any] = []
            for start, length in handoff.groups:
                messages.extend(pickle.loads(view[start:start + length]))
            body["messages"] = messages
            for path, start, length in handoff.strings:
                parts = list(_decode(view[start:start + length]))
                put_at(body, path, parts[0] if len(parts) == 1 else "".join(parts))
                del parts
        finally:
            del view  # SharedMemory.close refuses while a view of its buffer lives
    finally:
        block.close()
        block.unlink()
    return body


def discard(handoff: Handoff) -> None:
    """Unlink the block of a handoff that will not be rebuilt."""
    block = SharedMemory(name=handoff.name)
    block.close()
    block.unlink()
