"""Composition agents: a chain, a parallel fan-out, a cycle, and a sub-agent behind a tool.

Each is an :class:`~agentlab.core.Agent` (an Invocation in, an Event stream out), so the Runner
drives a composition exactly as it drives one :class:`~agentlab.runtime.LLMAgent`, persists the
same qualifying events, and calls the same mechanism hooks (a composition offers the union of its
sub-agents' mechanisms).

**Branches.** A branch is a filter key: the parent's key, ``/``, the branch name
(:func:`~agentlab.core.branch_key`; ADK also puts the forking agent's name in between, which
changes no visibility). Every event a branch writes carries its key (an
event a sub-agent left without one, or with a key outside the branch, is given the branch's key)
and names it in ``metadata["branch"]``. A branch's model view is the history before the fork plus
its own events, never a sibling's: :func:`~agentlab.core.in_filter`, which is the visibility rule
of Google ADK's events' ``branch``. Read at

* github.com/google/adk-python, commit ``7c670f638bc17374ceb08740bdd057e55c9c2e12`` (the snapshot
  fetched): ``src/google/adk/flows/llm_flows/contents.py``, ``_is_event_belongs_to_branch`` — "event
  belongs to a branch when event.branch is a prefix of the invocation branch" (a plain string
  prefix there), and ``src/google/adk/agents/parallel_agent.py``, ``_create_branch_ctx_for_sub_agent``
  (a parallel sub-agent's branch is ``<parent branch>.<agent>.<sub-agent>``);
* ``google-adk==2.13.0`` (the test peer): ``flows/llm_flows/context/_contents.py``, the same function,
  now whole segments (``inv_path == evt_path or inv_path.is_descendant_of(evt_path)``).

agentlab follows the segment rule (a view ``a/b`` does not see a branch ``a/bc``), the separator
is ``/``. ``tests/policies/test_adk_branch.py`` checks the agreement case by case.

**Fork and join markers.** A :class:`ParallelAgent` writes, on the parent's key, a state event
``branch:<key> = "open"`` for each branch before it starts them and ``"joined"`` once all have
finished. The full-session summary's cascade rule reads them (:mod:`agentlab.summary.render`):
it advances only over events whose branches have joined.

**Merge order.** A parallel fan-out yields its branches' events in the order they are produced;
when several are ready at the same moment, in the order the sub-agents were declared. A branch
does not move on until the Runner has taken (and persisted) its last event, so each branch's next
request sees its own previous event (ADK's ``_merge_agent_run`` guarantee). Within one branch the
order is the branch's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from agentlab.core.invocation import Agent, Invocation
from agentlab.core.mechanism import ContextMechanism, branch_key
from agentlab.core.tools import ToolContext, function_declaration
from agentlab.events import OBJ_STATE, Event, Message, ToolCall, user_event

__all__ = ["AgentTool", "ChainAgent", "CycleAgent", "ParallelAgent", "fork_invocation", "mechanisms_of", "on_branch"]

T = TypeVar("T")

#: What a cycle's ``until`` gets: the invocation (its session's state) and the iteration's events.
Condition = Callable[[Invocation, list[Event]], bool | Awaitable[bool]]


def fork_invocation(inv: Invocation, agent: Agent, filter_key: str | None = None, *,
                    message: Message | None = None, user_input: Event | None = None,
                    new_run: bool = False) -> Invocation:
    """A work order for ``agent`` inside ``inv``'s run: same session, services, options, cancel flag.

    ``filter_key`` is the branch it runs on (default: the parent's). ``new_run`` gives it an id of
    its own (a sub-agent behind a tool answers its own request unit); ``user_input`` is then the
    input event it answers.
    """
    child = Invocation(
        app_name=inv.app_name, user_id=inv.user_id, session=inv.session, session_service=inv.session_service,
        agent=agent, message=message or inv.message, options=inv.options,
        filter_key=inv.filter_key if filter_key is None else filter_key,
        user_event=user_input if user_input is not None else inv.user_event, services=inv.services,
        cancelled=inv.cancelled)
    if not new_run:
        child.id = inv.id
    return child


def mechanisms_of(agents: Sequence[Any]) -> list[ContextMechanism]:
    """The sub-agents' context mechanisms, each once, in declaration order (for the Runner's hooks)."""
    seen: list[ContextMechanism] = []
    for agent in agents:
        listed = getattr(agent, "context_mechanisms", None)
        for mechanism in (listed() if listed is not None else []):
            if not any(mechanism is m for m in seen):
                seen.append(mechanism)
    return seen


def on_branch(event: Event, key: str) -> Event:
    """``event`` carrying ``key`` (or a key below it) and naming its branch in its metadata."""
    if not (event.filter_key == key or event.filter_key.startswith(key + "/")):
        event.filter_key = key
    event.metadata.setdefault("branch", event.filter_key)
    return event


class _Composite:
    """What every composition shares: a name, checked sub-agents, their mechanisms, a state event."""

    kind = "composition"

    def __init__(self, name: str, agents: Sequence[Agent]) -> None:
        agents = list(agents)
        if not agents:
            raise ValueError(f"a {self.kind} needs at least one sub-agent")
        names = [a.name for a in agents]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"a {self.kind}'s sub-agents need distinct names (they name branches): "
                             f"{', '.join(dupes)} repeated")
        self.name = name
        self.agents = agents

    def context_mechanisms(self) -> list[ContextMechanism]:
        """The sub-agents' mechanisms, each once."""
        return mechanisms_of(self.agents)

    def _state(self, inv: Invocation, delta: dict[str, Any], **meta: Any) -> Event:
        return Event(author=self.name, object=OBJ_STATE, invocation_id=inv.id, request_id=inv.request_id,
                     filter_key=inv.filter_key, state_delta=delta, metadata={**meta, "branch": inv.filter_key})


class ChainAgent(_Composite):
    """Runs its sub-agents one after the other on the parent's branch.

    Each sees what the earlier ones wrote (they share the filter key), as ADK's ``SequentialAgent``.
    An error event stops the chain (``stop_on_error=False`` carries on).
    """

    kind = "chain"

    def __init__(self, name: str, agents: Sequence[Agent], *, stop_on_error: bool = True) -> None:
        super().__init__(name, agents)
        self.stop_on_error = stop_on_error

    async def run(self, inv: Invocation) -> AsyncIterator[Event]:
        """Run each sub-agent in turn and yield its events."""
        for agent in self.agents:
            failed = False
            async for event in agent.run(fork_invocation(inv, agent)):
                failed = failed or bool(event.error)
                yield event
            if inv.cancelled.is_set() or (failed and self.stop_on_error):
                return


class ParallelAgent(_Composite):
    """Runs its sub-agents at once, each on a branch of its own (see the module docstring).

    Before the branches start it writes one fork marker per branch, and after the last one
    finishes a join: the markers ``branch:<key> = "joined"`` and, with ``report=True`` (the
    default), one assistant event on the parent's key listing each branch's final answer — the
    only part of the branches the parent's view then shows. ``state["join:<name>"]`` holds the
    same answers by branch name.
    """

    kind = "parallel fan-out"

    def __init__(self, name: str, agents: Sequence[Agent], *, report: bool = True) -> None:
        super().__init__(name, agents)
        self.report = report

    def branch_keys(self, parent_key: str) -> list[str]:
        """The filter key of each sub-agent's branch under ``parent_key``: the parent's key, ``/``, its name."""
        return [branch_key(parent_key, a.name) for a in self.agents]

    async def run(self, inv: Invocation) -> AsyncIterator[Event]:
        """Fork, merge the branches' events as they come (declared order on ties), join."""
        keys = self.branch_keys(inv.filter_key)
        yield self._state(inv, {f"branch:{k}": "open" for k in keys}, fork=keys)
        streams = [a.run(fork_invocation(inv, a, k)) for a, k in zip(self.agents, keys, strict=True)]
        finals: dict[str, str] = {}
        async for index, event in merge_streams(streams):
            event = on_branch(event, keys[index])
            if event.is_final_response() and event.filter_key == keys[index]:
                finals[self.agents[index].name] = event.text
            yield event
        yield self._state(inv, {f"branch:{k}": "joined" for k in keys}, join=keys)
        if self.report and finals:
            text = "\n\n".join(f"[{name}] {finals[name]}" for name in (a.name for a in self.agents) if name in finals)
            yield Event(author=self.name, choices=[Message.assistant(text)], invocation_id=inv.id,
                        request_id=inv.request_id, filter_key=inv.filter_key,
                        state_delta={f"join:{self.name}": finals}, metadata={"join": keys, "branch": inv.filter_key})


async def merge_streams(streams: Sequence[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Yield ``(stream index, event)`` as the streams produce them; ties in stream order.

    A stream is advanced again only after the consumer has taken its previous event (so the
    Runner has persisted it before that branch's next step).
    """
    pending: dict[asyncio.Future[T], int] = {
        asyncio.ensure_future(s.__anext__()): i for i, s in enumerate(streams)}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=pending.__getitem__):
                index = pending.pop(task)
                try:
                    event = task.result()
                except StopAsyncIteration:
                    continue
                yield index, event
                pending[asyncio.ensure_future(streams[index].__anext__())] = index
    finally:
        for task in pending:
            task.cancel()


class CycleAgent(_Composite):
    """Repeats its sub-agents (as a chain, on the parent's branch) until one of three stops.

    After each full pass: ``until(inv, events_of_the_pass)`` true stops it (``"condition"``); an
    event a sub-agent marks ``metadata["escalate"]`` or ``state_delta["escalate"]`` stops it at
    once (``"escalation"``, ADK's ``escalate`` action); ``max_iterations`` passes stop it
    (``"max_iterations"``). The last event says which: a state event
    ``cycle:<name> = {"iterations": n, "stopped_by": ...}``. A cycle with neither ``until`` nor
    ``max_iterations`` is refused (it could only stop by escalation).
    """

    kind = "cycle"

    def __init__(self, name: str, agents: Sequence[Agent], *, max_iterations: int | None = None,
                 until: Condition | None = None, allow_unbounded: bool = False) -> None:
        if max_iterations is not None and max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations}")
        if max_iterations is None and until is None and not allow_unbounded:
            raise ValueError("a cycle needs max_iterations or an until condition "
                             "(or allow_unbounded=True to stop by escalation only)")
        super().__init__(name, agents)
        self.max_iterations = max_iterations
        self.until = until

    async def run(self, inv: Invocation) -> AsyncIterator[Event]:
        """Run passes until the condition, an escalation or the maximum; then state which."""
        iterations = 0
        stopped_by = "cancelled"
        while not inv.cancelled.is_set():
            iterations += 1
            seen: list[Event] = []
            escalated = False
            for agent in self.agents:
                async for event in agent.run(fork_invocation(inv, agent)):
                    seen.append(event)
                    yield event
                    if event.metadata.get("escalate") or event.state_delta.get("escalate"):
                        escalated = True
                        break
                if escalated or inv.cancelled.is_set():
                    break
            if escalated:
                stopped_by = "escalation"
                break
            if self.until is not None:
                verdict = self.until(inv, seen)
                if not isinstance(verdict, bool):
                    verdict = await verdict
                if verdict:
                    stopped_by = "condition"
                    break
            if self.max_iterations is not None and iterations >= self.max_iterations:
                stopped_by = "max_iterations"
                break
        outcome = {"iterations": iterations, "stopped_by": stopped_by}
        yield self._state(inv, {f"cycle:{self.name}": outcome}, cycle=outcome)


class AgentTool:
    """A sub-agent behind a tool: it works on a branch of its own; only its report returns.

    The model calls it with ``{"task": ...}``. The sub-agent runs on the branch
    ``<caller's key>/<tool name>`` (its events are persisted there by the Runner, through the
    calling :class:`~agentlab.runtime.LLMAgent`), starting from a user event carrying the task; its
    final answer is the tool result — the one thing the caller's view gains. The caller must run
    on a branch key of its own (``Runner.run(..., filter_key="main")``): the full-session key
    ``""`` sees every branch, so a caller there would see the sub-agent's work (refused, one line).
    """

    def __init__(self, agent: Agent, *, name: str | None = None, description: str = "") -> None:
        self.agent = agent
        self.name = name or agent.name
        self.description = description or f"Hand a self-contained task to the {agent.name} sub-agent; returns its report."

    def declaration(self) -> dict[str, Any]:
        """The function declaration the model sees: one required string, ``task``."""
        return function_declaration(self.name, self.description, {"task": {
            "type": "string", "description": "the complete task: the sub-agent's report is all that comes back"}},
            ["task"])

    async def call(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Not used: the calling agent streams :meth:`stream_call` instead."""
        raise RuntimeError(f"{self.name} runs a sub-agent: call it from an LLMAgent (it streams its events)")

    async def stream_call(self, inv: Invocation, call: ToolCall) -> AsyncIterator[Event | str]:
        """Yield the sub-agent's events (on its branch), then the report text (a ``str``, last)."""
        if not inv.filter_key:
            raise ValueError(f"the sub-agent tool {self.name!r} isolates nothing under the full-session key '': "
                             "run the caller with a filter key of its own (Runner.run(..., filter_key='main'))")
        task = str(call.parsed_arguments().get("task") or "").strip()
        if not task:
            yield "error: the task is empty; write the complete task in 'task'"
            return
        key = branch_key(inv.filter_key, self.name)
        child = fork_invocation(inv, self.agent, key, message=Message.user(task), new_run=True)
        first = user_event(task, author=inv.agent.name, invocation_id=child.id, request_id=child.request_id,
                           filter_key=key)
        first.metadata["branch"] = key
        child.user_event = first
        yield first
        report = ""
        async for event in self.agent.run(child):
            event = on_branch(event, key)
            if event.is_final_response() and event.filter_key == key:
                report = event.text
            yield event
        yield report or "error: the sub-agent finished without a report"
