"""Long sessions for the compaction explorer: real conversation turns with large tool results interleaved.

A plain conversation has no tool results, and compaction acts only on tool results, so every
n-th request gets a synthetic search call whose result is made of the conversation's own words
(:data:`DEFAULT_TOOL_SIZES` tokens, one in four oversized). The ledger says how many are synthetic.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentlab.events import OBJ_TOOL_RESPONSE, OBJ_USER, Event, Message, ToolCall
from agentlab.model import tokens

if TYPE_CHECKING:
    from agentlab.bench.datasets.locomo import Conversation

#: Sizes (tokens) of the synthetic tool results, used in turn; one in four is oversized.
DEFAULT_TOOL_SIZES = (900, 1600, 2400, 10000)
#: Every n-th request unit gets a synthetic tool call and result.
DEFAULT_TOOL_EVERY = 5


@dataclass(frozen=True)
class Ledger:
    """A long session ready to be projected: its events (token counts set) and the next question."""

    name: str
    events: tuple[Event, ...]
    question: str
    #: How many tool results are synthetic (all of them: the source conversation has none).
    synthetic_tool_results: int = 0
    source: str = ""

    @property
    def tokens(self) -> int:
        """Tokens of every event (their stored counts): the history without any governance."""
        return sum(e.token_count or 0 for e in self.events)

    def describe(self) -> str:
        """One sentence for the notebook: size, how much is synthetic, and the next question."""
        turns = sum(1 for e in self.events if e.role in ("user", "assistant") and not e.is_tool_call())
        tool_tokens = sum(e.token_count or 0 for e in self.events if e.is_tool_result())
        return (f"{self.name}: {len(self.events):,} events ({turns:,} conversation turns from {self.source or 'the source'}, "
                f"{self.synthetic_tool_results} synthetic tool results = {tool_tokens:,} tokens), "
                f"{self.tokens:,} tokens in all. Next question: {self.question!r}")


def _synthetic_payload(target_tokens: int, words: Sequence[str], index: int) -> str:
    """A JSON list of search records of about ``target_tokens`` tokens, made of conversation words."""
    records: list[str] = []
    used = 0
    k = 0
    while used < target_tokens:
        start = (index * 97 + k * 13) % max(1, len(words))
        snippet = " ".join(words[start:start + 24]) or "no text"
        record = json.dumps({"id": f"rec-{index:03d}-{k:04d}", "score": round(1 / (k + 1), 4),
                             "source": f"archive/page-{(index * 7 + k) % 50}", "text": snippet})
        records.append(record)
        used += tokens.count_text(record + ",\n")
        k += 1
    return "[" + ",\n".join(records) + "]"


def ledger_from_turns(turns: Sequence[tuple[str, str, float]], question: str, *, name: str = "session",
                      source: str = "", tool_every: int = DEFAULT_TOOL_EVERY,
                      tool_sizes: Sequence[int] = DEFAULT_TOOL_SIZES) -> Ledger:
    """A ledger from ``(role, text, timestamp)`` turns, ``role`` being ``user`` or ``assistant``.

    A request unit starts at every user turn (assistant turns join the current unit). Every
    ``tool_every``-th unit gets a synthetic tool round before its first assistant turn — a call to
    ``archive_search`` and a result of ``tool_sizes[i % len]`` tokens — and the last completed
    unit (the last with an assistant turn) always gets one, the largest, so that pass 2 has
    something to cut in a protected unit.
    Ids and timestamps are deterministic.
    """
    if tool_every < 1:
        raise ValueError(f"tool_every must be >= 1, got {tool_every}")
    words = " ".join(text for _, text, _ in turns).split()
    # Unit of every turn: a user turn opens one, assistant turns join it (an opening assistant
    # turn is unit 0). The last unit with an assistant turn is the last *completed* one.
    units: list[int] = []
    unit = -1
    for role, _, _ in turns:
        if role not in ("user", "assistant"):
            raise ValueError(f"turn role must be 'user' or 'assistant', got {role!r}")
        if role == "user" or unit < 0:
            unit += 1
        units.append(unit)
    answered = [u for (role, _, _), u in zip(turns, units, strict=True) if role == "assistant"]
    last_completed = answered[-1] if answered else -1

    events: list[Event] = []
    n_tools = 0
    with_tool: set[int] = set()
    last_user_text = ""
    for (role, text, timestamp), unit in zip(turns, units, strict=True):
        request_id = f"req-{unit:04d}"
        if role == "user":
            last_user_text = text
            events.append(Event(author="user", choices=[Message.user(text)], object=OBJ_USER, id=f"ev-{len(events):05d}",
                                request_id=request_id, timestamp=timestamp))
            continue
        if unit not in with_tool and (unit % tool_every == tool_every - 1 or unit == last_completed):
            size = max(tool_sizes) if unit == last_completed else tool_sizes[n_tools % len(tool_sizes)]
            call = ToolCall(id=f"call-{unit:04d}", name="archive_search",
                            arguments=json.dumps({"query": " ".join(last_user_text.split()[:8])}))
            events.append(Event(author="assistant", choices=[Message.assistant("", [call])],
                                id=f"ev-{len(events):05d}", request_id=request_id, timestamp=timestamp))
            events.append(Event(author="assistant", object=OBJ_TOOL_RESPONSE,
                                choices=[Message.tool(call.id, call.name, _synthetic_payload(size, words, n_tools))],
                                id=f"ev-{len(events):05d}", request_id=request_id, timestamp=timestamp))
            n_tools += 1
            with_tool.add(unit)
        events.append(Event(author="assistant", choices=[Message.assistant(text)], id=f"ev-{len(events):05d}",
                            request_id=request_id, timestamp=timestamp))
    for e in events:
        e.token_count = tokens.count_event(e)
    return Ledger(name=name, events=tuple(events), question=question, synthetic_tool_results=n_tools, source=source)


def ledger_from_locomo(conversation: Conversation, *, question_index: int = 0, tool_every: int = DEFAULT_TOOL_EVERY,
                       tool_sizes: Sequence[int] = DEFAULT_TOOL_SIZES) -> Ledger:
    """A ledger from one LoCoMo conversation, the next question being one of its QA items.

    The first speaker is the user, the second the assistant; each turn is timestamped with its
    session date.
    """
    from agentlab.bench.tasks.locomo_history import parse_session_date

    turns: list[tuple[str, str, float]] = []
    base = 1_700_000_000.0
    for session in conversation.sessions:
        start = parse_session_date(session.date_time) or base + session.number * 86_400
        for j, turn in enumerate(session.turns):
            role = "user" if turn.speaker == conversation.speaker_a else "assistant"
            turns.append((role, f"{turn.speaker}: {turn.text}", start + j))
    question = conversation.qa[question_index].question if conversation.qa else "What did we talk about?"
    return ledger_from_turns(turns, question, name=f"LoCoMo {conversation.sample_id}",
                             source=f"LoCoMo {conversation.sample_id} ({len(conversation.sessions)} sessions)",
                             tool_every=tool_every, tool_sizes=tool_sizes)

