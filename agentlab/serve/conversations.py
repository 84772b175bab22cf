"""The proxy's conversation table: the live conversations, their ledgers, and how a request meets one.

A conversation is found (or made) per call, held in memory while calls use it, evicted when idle
beyond a bound and reloaded from the database when it comes back. Its ledger is written in the
background in order (each write after the one before), and :meth:`ConversationTable.bring_up_to_date`
decides how a request relates to it (its *ledger mode*, see :mod:`agentlab.serve.proxy`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlab.events import OBJ_COMPLETION, OBJ_TOOL_RESPONSE, OBJ_USER, Event, Usage, new_id
from agentlab.model import tokens
from agentlab.serve.carry import carry_summaries, covered_events, held_back, rewritten_users
from agentlab.serve.counting import MessageCounter
from agentlab.serve.recovery import APP_NAME
from agentlab.serve.rewrites import TipIndex, carry_across_rewrite, kept_run
from agentlab.serve.store import ServeStore
from agentlab.serve.wire import to_message, to_wire
from agentlab.session.base import Session, Summary
from agentlab.session.duckdb import DuckDBSessionService

__all__ = ["APP_NAME", "MAX_CONVERSATION_BYTES", "Conversation", "ConversationTable", "LedgerUpdate", "event_size"]

#: Default bytes of ledger text the idle conversations kept in memory may hold (``--max-conversation-bytes``).
MAX_CONVERSATION_BYTES = 256 * 1024 * 1024

log = logging.getLogger(__name__)


def _failed(write: asyncio.Future[None]) -> bool:
    """``write`` is over and did not succeed."""
    return write.done() and (write.cancelled() or write.exception() is not None)


@dataclass
class Conversation:
    """What the server keeps in memory about one conversation (the ledger itself is durable)."""

    tenant: str
    id: str
    session: Session
    #: Chain hash of each ledger message, in ledger order.
    chain: list[str]
    #: Request unit of the latest user turn.
    unit: str
    #: The ledger as this server knows it: the session's events plus the writes still in flight.
    events: list[Event] = field(default_factory=list)
    #: The latest ledger write (the ledger keeps the order of writes: see ``ConversationTable.write``).
    last_write: asyncio.Future[None] | None = None
    #: The session that ``last_write`` appends to when that write was queued at once (not chained).
    queued_to: Session | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: (chain hash, cumulative tokens) of the previous call's client and upstream messages.
    last_client: list[tuple[str, int]] = field(default_factory=list)
    last_upstream: list[tuple[str, int]] = field(default_factory=list)
    #: Request-body hashes of calls already answered (a repeat of one is a retry).
    answered: set[str] = field(default_factory=set)
    summary_task: asyncio.Task[Any] | None = None
    #: Calls holding this object (from finding the conversation to their end): never evicted meanwhile.
    users: int = 0
    #: The session is not stored yet: the next ledger write creates it (in the same commit).
    unborn: bool = False
    #: User messages at the ledger's tip kept out of its summaries: how many the client rewrote at
    #: its latest branch (0 until it branches; see :mod:`agentlab.serve.carry`). Kept in memory
    #: only: a reloaded conversation summarises up to its tip until it branches again.
    holdback: int = 0
    #: Bytes of text its in-memory ledger holds (what :attr:`ConversationTable.max_bytes` bounds).
    size: int = 0

    def summary_view(self) -> Session:
        """The durable ledger the summariser reads: the session less the part held back."""
        return held_back(self.session, self.holdback)

    def evictable(self) -> bool:
        """No call uses it, no ledger write or summary is pending: it can be reloaded from disk as it is."""
        return (self.users == 0 and not self.lock.locked() and (self.last_write is None or self.last_write.done())
                and (self.summary_task is None or self.summary_task.done()))


@dataclass
class LedgerUpdate:
    """How one request met its conversation's ledger."""

    #: ``append``, ``repeat``, ``replay`` or ``branch``.
    mode: str
    #: The events appended for the request's new messages.
    appended: list[Event]
    #: The background write of those events.
    written: asyncio.Future[None]
    #: The ledger event of the request's latest message (the projection's current input).
    current: Event
    #: The ledger up to ``current``, writes in flight included (what the projection reads).
    view: Session
    #: On a branch: the ledger events of the new session that the summary carried from the
    #: previous one covers (0 when none could be carried, and for every other mode).
    reused_events: int = 0
    #: What the call row's ``arm_note`` should say about this update ("" for nothing).
    note: str = ""


def event_size(event: Event) -> int:
    """Bytes of text an event keeps in memory (its message's content and tool-call arguments), roughly."""
    message = event.message
    if message is None:
        return 0
    return len(message.content or "") + sum(len(c.arguments) + len(c.name) for c in message.tool_calls) + 64


def _consume(future: asyncio.Future[None]) -> None:
    """Mark a background write's failure as seen (whoever needs it awaits the future itself)."""
    if not future.cancelled():
        future.exception()


class ConversationTable:
    """The live conversations of one proxy: at most ``max_conversations`` of them, holding at most
    ``max_bytes`` of ledger text, are kept in memory once idle (beyond either bound the least recently
    used idle ones are evicted; their ledger is durable, and they are reloaded when they come back).
    """

    def __init__(self, sessions: DuckDBSessionService, store: ServeStore, counter: MessageCounter,
                 background: set[asyncio.Future[Any]], max_conversations: int,
                 max_bytes: int = MAX_CONVERSATION_BYTES) -> None:
        self.sessions = sessions
        self.store = store
        self.counter = counter
        #: The proxy's background work (awaited by its ``settle``).
        self.background = background
        self.max_conversations = max_conversations
        self.max_bytes = max_bytes
        #: Bytes of ledger text the live conversations hold (the sum of their ``size``).
        self.size = 0
        #: Conversations evicted so far.
        self.evictions = 0
        self.live: OrderedDict[tuple[str, str], Conversation] = OrderedDict()
        #: Each conversation's last two messages: how a client's rewrite of its head finds it.
        self.tips = TipIndex()
        self._lock = asyncio.Lock()

    async def get(self, tenant: str, conversation_id: str, key_source: str) -> Conversation:
        """The conversation (loaded from disk or made), held for one call (``users`` + 1)."""
        key = (tenant, conversation_id)
        async with self._lock:
            conv = self.live.get(key)
            if conv is not None:
                self.live.move_to_end(key)
                conv.users += 1
                return conv
            session_id = await self.store.session_of(tenant, conversation_id)
            session = None
            if session_id is not None:
                session = await self.sessions.get_session(APP_NAME, tenant, session_id)
            created = session is None
            if session is None:
                session = Session(app_name=APP_NAME, user_id=tenant, id=conversation_id)
                self.store.save_conversation(tenant, conversation_id, session.id, key_source)
            chain = [e.metadata["chain"] for e in session.events if "chain" in e.metadata]
            unit = next((e.request_id for e in reversed(session.events) if e.role == "user"), "")
            conv = self.live[key] = Conversation(tenant, conversation_id, session, chain, unit,
                                                 events=list(session.events), users=1, unborn=created,
                                                 size=sum(event_size(e) for e in session.events))
            self.size += conv.size
            if not created:
                self.store.remember(tenant, conversation_id, session.id, chain)
            self.evict()
            return conv

    def release(self, conv: Conversation) -> None:
        """A call is done with ``conv``."""
        conv.users -= 1
        self._evict_if_over()

    def _over(self) -> bool:
        return len(self.live) > self.max_conversations or self.size > self.max_bytes

    def evict(self) -> None:
        """Drop the least recently used idle conversations from memory while over ``max_conversations``
        or ``max_bytes``.
        """
        while self._over():
            key = next((k for k, c in self.live.items() if c.evictable()), None)
            if key is None:
                return  # every one is busy: over the bound until some call ends
            conv = self.live.pop(key)
            self.size -= conv.size
            self.store.forget(*key)
            self.counter.forget(conv.events)
            self.evictions += 1

    def branch(self, conv: Conversation) -> None:
        """Move the conversation to a fresh session (its history diverged from the ledger)."""
        session_id = f"{conv.id}~{uuid.uuid4().hex[:8]}"
        conv.session = Session(app_name=APP_NAME, user_id=conv.tenant, id=session_id)
        conv.chain, conv.unit, conv.events = [], "", []
        self.size -= conv.size
        conv.unborn, conv.size = True, 0
        self.store.save_conversation(conv.tenant, conv.id, session_id, "branch")

    def event(self, conv: Conversation, message: dict[str, Any], chain_hash: str, *, author: str,
              usage: Usage | None = None, token_count: int | None = None) -> Event:
        """The ledger event of one message, added to the conversation's in-memory ledger (see :meth:`write`)."""
        msg = to_message(message)
        if msg.role == "user":
            conv.unit = new_id("unit-")
        obj = OBJ_USER if msg.role == "user" else OBJ_TOOL_RESPONSE if msg.role == "tool" else OBJ_COMPLETION
        metadata: dict[str, Any] = {"chain": chain_hash}
        if message != to_wire(msg):
            # Fields the agentlab message cannot hold (content parts, reasoning, names...): kept, so
            # the message goes upstream again exactly as the client sent it.
            metadata["raw"] = message
        event = Event(author=author, choices=[msg], object=obj, invocation_id=conv.unit, request_id=conv.unit,
                      usage=usage, metadata=metadata,
                      token_count=tokens.count_message(msg) if token_count is None else token_count)
        conv.chain.append(chain_hash)
        conv.events.append(event)
        size = event_size(event)
        conv.size += size
        self.size += size
        return event

    def write(self, conv: Conversation, events: Sequence[Event]) -> asyncio.Future[None]:
        """Append ``events`` to the durable ledger in the background, after the conversation's previous write.

        One write's events go in one group commit, with other conversations' writes of the same
        moment (see ``ServeConfig.ledger_linger``); a new session's row goes in with its first write.
        Callers that need the events durable await the returned future (an error answer does, and
        every answer with ``wait_for_ledger``).
        """
        session, create, conv.unborn = conv.session, conv.unborn, False
        previous = conv.last_write
        if previous is None or (conv.queued_to is session and not _failed(previous)):
            # Queued now, behind the previous append to the same session: the session writer commits
            # one session's appends in order and fails those queued behind a failed one, so a
            # conversation's consecutive turns share group commits instead of each waiting for the
            # last one's (with one client, a ledger that fell further behind at every call).
            task = asyncio.ensure_future(self.sessions.append_events(session, events, create=create))
            self._track(conv, task)
            conv.queued_to = session
            return task

        async def write() -> None:
            await self.sessions.append_events(session, events, create=create)

        return self._after_previous(conv, write())

    def _after_previous(self, conv: Conversation, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """Run ``work`` after the conversation's previous write (which must have succeeded)."""
        previous = conv.last_write

        async def run() -> None:
            if previous is not None:
                try:
                    await previous  # a failed earlier write fails this one too: the ledger never has a gap
                except BaseException:
                    work.close()
                    raise
            await work

        task = asyncio.ensure_future(run())
        self._track(conv, task)
        conv.queued_to = None
        return task

    def _track(self, conv: Conversation, task: asyncio.Future[None]) -> None:
        """Make ``task`` the conversation's latest write, kept until it is done."""
        conv.last_write = task
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        task.add_done_callback(_consume)
        task.add_done_callback(self._evict_if_over)  # a conversation whose write is done may now go

    def _evict_if_over(self, _: Any = None) -> None:
        if self._over():
            self.evict()

    async def bring_up_to_date(self, conv: Conversation, messages: Sequence[dict[str, Any]],
                               chain: Sequence[str], canon: Sequence[str],
                               rewrite_at: int | None = None) -> LedgerUpdate:
        """Append the request's new messages to the ledger (in the background) and say how it met it.

        ``rewrite_at``: the request index of the ledger's last message when the request was found as
        a rewrite of the conversation's head (see :mod:`agentlab.serve.rewrites`).
        """
        if conv.summary_task is not None:
            with contextlib.suppress(Exception):
                await conv.summary_task
            conv.summary_task = None
        shared = 0
        left: tuple[Session, list[Event], int] | None = None  # on a branch: the session left, its ledger, shared
        for a, b in zip(conv.chain, chain, strict=False):
            if a != b:
                break
            shared += 1
        if shared == len(conv.chain):
            mode = "append" if len(chain) > shared else "repeat"
        elif shared == len(chain):
            mode = "replay"
        else:
            mode = "branch"
            left = (conv.session, conv.events, shared)
            self.branch(conv)
            shared = 0
        new = [self.event(conv, messages[i], chain[i], author="client",
                          token_count=self.counter.message_tokens(canon[i], to_message(messages[i])))
               for i in range(shared, len(chain))]
        written = self.write(conv, new)
        reused, note = 0, ""
        if left is not None:
            kept = self._kept(canon, rewrite_at, left[1])
            if kept >= 2 and rewrite_at is not None:
                conv.holdback = rewritten_users(left[1], left[2])
                reused, note = self._carry_rewrite(conv, left[0], left[1], len(left[1]) - kept, rewrite_at - kept + 1)
            else:
                reused = self._carry(conv, *left)
        seen = cut = 0
        for cut, event in enumerate(conv.events, 1):  # noqa: B007 - cut is used after the loop
            seen += "chain" in event.metadata
            if seen == len(chain):
                break
        s = conv.session
        # Up to the current message when the request replays an earlier point.
        view = Session(app_name=s.app_name, user_id=s.user_id, id=s.id, events=conv.events[:cut],
                       state=s.state, summaries=s.summaries, created_at=s.created_at)
        return LedgerUpdate(mode, new, written, conv.events[cut - 1], view, reused, note)

    def _kept(self, canon: Sequence[str], rewrite_at: int | None, old_events: Sequence[Event]) -> int:
        """How many of ``old_events`` (a ledger's tail) the request keeps, ending at ``rewrite_at``."""
        if rewrite_at is None or rewrite_at >= len(canon):
            return 0
        tail = old_events[max(0, len(old_events) - rewrite_at - 1):]
        ledger = [self.counter.canonical_of(e.metadata.get("raw") or self.counter.wire_of(e.message))
                  if e.message is not None else "" for e in tail]
        return kept_run(canon, rewrite_at, ledger)

    def _carry_rewrite(self, conv: Conversation, old: Session, old_events: Sequence[Event], old_start: int,
                       new_start: int) -> tuple[int, str]:
        """Across a client's rewrite of its head: carry the summaries that pay (see
        :func:`carry_across_rewrite`); the new events they cover and the note when none did.
        """
        result = carry_across_rewrite(old.summaries, old_events, conv.events, old_start, new_start)
        if result.summaries:
            self._store_carried(conv, result.summaries)
        return result.covered, result.note

    def _carry(self, conv: Conversation, old: Session, old_events: Sequence[Event], shared: int) -> int:
        """Copy into the conversation's new session the summaries of ``old`` that cover only the
        ``shared`` events the request repeats (written after the new session's first events), and
        hold back what the client rewrote; the events the carried summary covers.
        """
        conv.holdback = rewritten_users(old_events, shared)
        carried = carry_summaries(old.summaries, old_events, conv.events, shared)
        if not carried:
            return 0
        self._store_carried(conv, carried)
        return max(covered_events(s, conv.events) for s in carried.values())

    def _store_carried(self, conv: Conversation, carried: dict[str, Summary]) -> None:
        """Put ``carried`` into the conversation's session, in memory now and durably after its writes."""
        session = conv.session
        session.summaries.update(carried)

        async def write() -> None:
            try:
                for key, summary in carried.items():
                    await self.sessions.write_summary(session, key, summary)
            except Exception as exc:  # in memory it still serves this conversation; the ledger goes on
                log.warning("a summary carried into session %s could not be stored: %s: %s", session.id,
                            type(exc).__name__, exc)

        self._after_previous(conv, write())
