"""A client that rewrites the head of its own history: found again, and carried across the rewrite.

Some clients (aider among them) drop their oldest turns from time to time and put a summary of
their own in their place ("I spoke to you previously about ..."), keeping the latest turns as they
were. Such a request shares no prefix with the conversation's ledger beyond the system message, so
the prefix rule (:mod:`agentlab.serve.conversation_keys`) cannot find it and it would start a new
conversation, leaving behind every summary the proxy made of it. Two rules carry it across:

* **Find** (:class:`TipIndex`): the proxy remembers, per tenant, the last two messages of each
  conversation's ledger (the message answered and the answer). A request that no prefix matches
  and that holds those two messages one after the other, with something after them, is that
  conversation's next turn (``key_source`` ``rewrite``), when the ledger's tail it keeps
  (:func:`kept_run`) is at least those two messages long. The index is in memory: after a restart
  a rewrite is found again from the next answer on.
* **Carry** (:func:`carry_across_rewrite`): the conversation branches to a new session seeded
  with the request, as for any other divergence. A summary of the old session whose boundary lies
  in the kept tail (or on the last message the client dropped) covers everything the client's own
  summary stands for and some of what it kept; it is copied into the new session with its boundary
  on the matching new event, but only when it is shorter than what it then replaces there (the
  client's head and the kept messages up to the boundary). Otherwise nothing is carried and the
  call row's ``arm_note`` says so: the request goes on as the client sent it (the arm may still
  summarise the new session later, as for any conversation).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agentlab.events import Event
from agentlab.model import tokens
from agentlab.session.base import Summary, SummaryBoundary

#: Conversations whose tips the index remembers (least recently answered dropped).
MAX_TIPS = 100_000
#: How far from the end of a request a conversation's tip is looked for (in messages).
TIP_SEARCH = 16
#: Roles that are not history (the projection keeps them as the instruction).
INSTRUCTION_ROLES = ("system", "developer")


def tip_key(tenant: str, question: str, answer: str) -> str:
    """The index key of two consecutive messages (canonical texts) of ``tenant``."""
    return hashlib.sha256(f"{tenant}\x00{question}\x00{answer}".encode()).hexdigest()[:32]


class TipIndex:
    """Each conversation's last two ledger messages, per tenant: how a rewritten request finds it."""

    def __init__(self, max_tips: int = MAX_TIPS) -> None:
        self.max_tips = max_tips
        self._tips: OrderedDict[str, str] = OrderedDict()
        self._key_of: dict[tuple[str, str], str] = {}

    def note(self, tenant: str, conversation_id: str, question: str, answer: str) -> None:
        """The ledger of ``conversation_id`` now ends with ``question`` then ``answer`` (canonical texts)."""
        old = self._key_of.pop((tenant, conversation_id), None)
        if old is not None:
            self._tips.pop(old, None)
        key = tip_key(tenant, question, answer)
        self._tips[key] = conversation_id
        self._tips.move_to_end(key)
        self._key_of[(tenant, conversation_id)] = key
        while len(self._tips) > self.max_tips:
            _, dropped = self._tips.popitem(last=False)
            self._key_of.pop((tenant, dropped), None)

    def find(self, tenant: str, canon: Sequence[str]) -> tuple[str, int] | None:
        """``(conversation id, i)`` when ``canon[i - 1], canon[i]`` are a conversation's tip and the
        request goes on after them (``i`` < the last index); the latest such ``i`` wins.
        """
        return self.find_keys(tip_keys(tenant, canon))

    def find_keys(self, keys: Sequence[tuple[int, str]]) -> tuple[str, int] | None:
        """:meth:`find` of the :func:`tip_keys` of a request (hashed elsewhere when it is large)."""
        for i, key in keys:
            found = self._tips.get(key)
            if found is not None:
                return found, i
        return None


def tip_keys(tenant: str, canon: Sequence[str]) -> list[tuple[int, str]]:
    """The ``(i, key)`` that :meth:`TipIndex.find` looks up, latest first: the keys of the pairs
    ``canon[i - 1], canon[i]`` in the last :data:`TIP_SEARCH` messages but the last one. Up to 16
    hashes of two messages each: a 60 MB request's hashes take the event loop's thread a few hundred
    milliseconds, so the proxy hashes a large one in a worker thread (the hashing gives the lock back).
    """
    return [(i, tip_key(tenant, canon[i - 1], canon[i]))
            for i in range(len(canon) - 2, max(0, len(canon) - 2 - TIP_SEARCH), -1)]


def kept_run(request_canon: Sequence[str], tip: int, ledger_canon: Sequence[str]) -> int:
    """How many messages the request keeps of the ledger's tail: the longest run ending at request
    index ``tip`` that equals the ledger's last messages, in order.
    """
    run = 0
    while (run <= tip and run < len(ledger_canon)
           and request_canon[tip - run] == ledger_canon[len(ledger_canon) - 1 - run]):
        run += 1
    return run


@dataclass(frozen=True)
class RewriteCarry:
    """What crossing one rewrite carried: the summaries (by filter key) and the new events they cover,
    or why nothing was (``note``).
    """

    summaries: dict[str, Summary]
    covered: int
    note: str


def carry_across_rewrite(summaries: Mapping[str, Summary], old_events: Sequence[Event],
                         new_events: Sequence[Event], old_start: int, new_start: int,
                         summary_tokens: Callable[[str], int] = tokens.count_text) -> RewriteCarry:
    """The summaries of the old session worth carrying into the new one across a client's rewrite.

    ``old_events[old_start:]`` (the old ledger's kept tail) are ``new_events[new_start:...]``; the new
    events before ``new_start`` are the client's own head (system messages and its summary). A summary
    qualifies when its boundary event is in the kept tail or is the last old event before it, and
    it pays: its text has fewer tokens than the non-instruction new events it would replace.
    """
    carried: dict[str, Summary] = {}
    covered = 0
    notes: list[str] = []
    position = {e.id: i for i, e in enumerate(old_events)}
    for key, summary in summaries.items():
        boundary = summary.boundary
        if boundary is None or not boundary.last_event_id or not summary.text.strip():
            continue
        i = position.get(boundary.last_event_id)
        if i is None or i < old_start - 1:
            notes.append(f"the summary ends {old_start - 1 - (i or 0)} messages before what the client kept")
            continue
        j = new_start + (i - old_start)
        if j < 0 or j >= len(new_events):
            continue
        replaced = sum(e.token_count or 0 for e in new_events[:j + 1] if e.role not in INSTRUCTION_ROLES)
        cost = summary_tokens(summary.text)
        if cost >= replaced:
            notes.append(f"the summary ({cost} tokens) is longer than what it would replace ({replaced})")
            continue
        new = new_events[j]
        carried[key] = Summary(text=summary.text, updated_at=summary.updated_at, topics=summary.topics,
                               boundary=SummaryBoundary(filter_key=boundary.filter_key, cutoff_at=new.timestamp,
                                                        last_event_id=new.id, version=boundary.version))
        covered = max(covered, j + 1)
    if carried:
        return RewriteCarry(carried, covered, "")
    why = "; ".join(notes) or "the conversation had no summary yet"
    return RewriteCarry({}, 0, f"client rewrite: the conversation goes on, nothing carried ({why}); "
                               "sent as the client sent it")
