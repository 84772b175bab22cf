"""Shared builders for summary tests: a session ledger of realistic turns, and slow models."""

from __future__ import annotations

import asyncio
import itertools

from agentlab.events import Event, Message, ToolCall, user_event
from agentlab.model.base import ModelInfo, ModelRequest, ModelResponse, Usage
from agentlab.session.inmemory import InMemorySessionService

_clock = itertools.count(1)


def ts() -> float:
    # strictly increasing timestamps, so ledger order and time order agree
    return 1_700_000_000.0 + next(_clock)


def user(text: str, req: str, filter_key: str = "") -> Event:
    return user_event(text, invocation_id=req, request_id=req, filter_key=filter_key, timestamp=ts())


def answer(text: str, req: str, filter_key: str = "") -> Event:
    return Event(author="agent", choices=[Message.assistant(text)], invocation_id=req, request_id=req,
                 filter_key=filter_key, timestamp=ts())


def call(name: str, call_id: str, req: str, args: str = "{}", extra_ids: tuple[str, ...] = ()) -> Event:
    calls = [ToolCall(call_id, name, args)] + [ToolCall(i, name, args) for i in extra_ids]
    return Event(author="agent", choices=[Message.assistant("", calls)], invocation_id=req, request_id=req,
                 timestamp=ts())


def result(name: str, call_id: str, content: str, req: str) -> Event:
    return Event(author="agent", object="tool.response", choices=[Message.tool(call_id, name, content)],
                 invocation_id=req, request_id=req, timestamp=ts())


async def seeded(svc: InMemorySessionService, events: list[Event], session_id: str = "s"):
    session = await svc.create_session("app", "u", session_id)
    for e in events:
        await svc.append_event(session, e)
    return session


def turns(n: int, start: int = 0, words: int = 8) -> list[Event]:
    """``n`` user/answer pairs with distinct, greppable texts."""
    out: list[Event] = []
    for i in range(start, start + n):
        filler = " ".join(f"w{i}x{j}" for j in range(words))
        out.append(user(f"question-{i} {filler}", f"r{i}"))
        out.append(answer(f"answer-{i} {filler}", f"r{i}"))
    return out


class GatedModel:
    """A summary model that waits on a gate and records how many calls overlap."""

    def __init__(self, reply: str = "gated summary", window: int = 8192, block_when: str = "") -> None:
        self.info = ModelInfo("gated", window)
        self.reply = reply
        self.block_when = block_when
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests: list[ModelRequest] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if not self.block_when or self.block_when in request.messages[-1].content:
                await self.gate.wait()
            else:
                await asyncio.sleep(0)
        finally:
            self.in_flight -= 1
        return ModelResponse(message=Message.assistant(f"{self.reply} #{len(self.requests)}"), usage=Usage(),
                             model="gated")

    async def stream(self, request):  # pragma: no cover - not used by the summariser
        raise NotImplementedError
