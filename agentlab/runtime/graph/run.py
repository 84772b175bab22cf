"""Running a compiled graph as an Agent: node events, a checkpoint after each node, interrupts, resume.

**Steps.** A run starts at ``START``'s successors. The nodes of one step run at once (a fan-out),
each on its own branch (the graph's key, ``/``, the node's name), each reading the state as the
step began. When a node finishes, its writes are merged into the state by each key's rule (in the
order nodes finish), its successors (edges, its route, a join whose sources have all finished)
are added to the next step, and the run is checkpointed. The run ends when a step has no successor
but ``END``, or at ``max_steps`` (an error event).

**Events.** On the graph's key, per node: a start event (``graph:<name>:started`` = the node) and
a finish event whose ``state_delta`` holds the checkpoint (``graph:<name>``) and whose metadata
holds the node's writes (``delta``). The node's own events (a model step, a tool call and its
result, a sub-agent's work) are on the node's branch. The last event states the outcome: the
checkpoint with ``status`` ``done`` (and, with ``output_key``, an assistant answer holding that
key's value), ``interrupted`` or ``failed``.

**Checkpoint and resume.** The checkpoint is session state written by the same event that records
the node's finish, so the Runner persists both together: a run killed (even ``kill -9``) after a
node's finish was persisted resumes at the next node and never re-runs a finished one. A node
killed mid-way has no finish and runs again on resume (a side effect it already made is then made
again: keep side effects at the end of a node, or idempotent). Any next message on the session
resumes a ``running`` or ``failed`` run instead of starting a new one.

**Interrupts.** An :class:`~agentlab.runtime.graph.nodes.Interrupt` node stops the run (checkpoint
``interrupted``) with its question as an assistant message; the next message on the session is the
outside input (an approval): it is written to the interrupt's key and the same run (same
``graph_run`` id) continues.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agentlab.core.invocation import Invocation
from agentlab.core.mechanism import ContextMechanism, branch_key
from agentlab.events import OBJ_ERROR, OBJ_STATE, Event, Message, new_id
from agentlab.runtime.composition import fork_invocation, mechanisms_of, merge_streams, on_branch
from agentlab.runtime.graph.builder import END, START, CompiledGraph, GraphError
from agentlab.runtime.graph.nodes import Delta, Interrupt, NodeContext

__all__ = ["GraphAgent"]

RESUMABLE = ("running", "failed", "interrupted")


class GraphAgent:
    """A compiled graph behind the Agent interface (see the module docstring).

    ``input_key`` receives the run's message text when a run starts (when the schema declares it);
    ``output_key`` names the state key whose value ends the run as an assistant answer.
    """

    def __init__(self, name: str, graph: CompiledGraph, *, input_key: str = "input", output_key: str | None = None,
                 max_steps: int = 100) -> None:
        if output_key is not None and output_key not in graph.schema.keys:
            raise GraphError(f"output_key {output_key!r} is not a state key (declared: {', '.join(graph.schema.keys)})")
        self.name = name
        self.graph = graph
        self.input_key = input_key
        self.output_key = output_key
        self.max_steps = max_steps

    @property
    def checkpoint_key(self) -> str:
        """The session-state key holding this graph's checkpoint."""
        return f"graph:{self.name}"

    def context_mechanisms(self) -> list[ContextMechanism]:
        """The mechanisms of the agents inside model and sub-agent nodes, each once."""
        return mechanisms_of([getattr(n, "agent", None) for n in self.graph.nodes.values()])

    def checkpoint(self, inv_or_state: Invocation | dict[str, Any]) -> dict[str, Any] | None:
        """The stored checkpoint (from an invocation's session state, or a state dict), if any."""
        state = inv_or_state.session.state if isinstance(inv_or_state, Invocation) else inv_or_state
        found = state.get(self.checkpoint_key)
        return dict(found) if isinstance(found, dict) else None

    # ------------------------------------------------------------------------------------ run

    async def run(self, inv: Invocation) -> AsyncIterator[Event]:
        """Start a run, or resume the session's unfinished one (see the module docstring)."""
        cp = self.checkpoint(inv)
        resume_input: str | None = None
        if cp is not None and cp.get("status") in RESUMABLE:
            if cp["status"] == "interrupted":
                resume_input = inv.message.content
            cp["status"] = "running"
            yield self._state(inv, cp, phase="run_resume")
        else:
            state = self.graph.schema.initial()
            if self.input_key in self.graph.schema.keys:
                state = self.graph.schema.apply(state, {self.input_key: inv.message.content}, START)
            cp = {"run": new_id("graph-"), "status": "running", "step": 0, "state": state,
                  "frontier": _unique(self.graph.next_after(START, state)), "done": [], "next": [],
                  "arrived": {}, "interrupt": None}
            yield self._state(inv, cp, phase="run_start")
        async for event in self._steps(inv, cp, resume_input):
            yield event

    async def _steps(self, inv: Invocation, cp: dict[str, Any], resume_input: str | None) -> AsyncIterator[Event]:
        while True:
            if all(n in cp["done"] for n in cp["frontier"]):
                cp["frontier"] = [n for n in _unique(cp["next"]) if n != END]
                cp["done"], cp["next"] = [], []
                cp["step"] += 1
                if not cp["frontier"]:
                    break
                if cp["step"] > self.max_steps:
                    cp["status"] = "failed"
                    yield self._error(inv, cp, f"the graph ran {self.max_steps} steps without reaching END "
                                               "(raise max_steps, or fix a route that loops)")
                    return
            todo = [n for n in cp["frontier"] if n not in cp["done"]]
            waiting = [n for n in todo if isinstance(self.graph.nodes[n], Interrupt)
                       and not (resume_input is not None and cp.get("interrupt") == n)]
            runnable = [n for n in todo if n not in waiting]
            if runnable:
                async for event in self._run_nodes(inv, cp, runnable, resume_input):
                    yield event
                    if event.object == OBJ_ERROR:
                        return
                resume_input = None
            if waiting:
                node = waiting[0]
                interrupt = self.graph.nodes[node]
                assert isinstance(interrupt, Interrupt)
                cp["status"], cp["interrupt"] = "interrupted", node
                question = interrupt.question(cp["state"])
                yield Event(author=self.name, choices=[Message.assistant(question)], invocation_id=inv.id,
                            request_id=inv.request_id, filter_key=inv.filter_key,
                            state_delta={self.checkpoint_key: _copy(cp)},
                            metadata={"graph": self.name, "graph_run": cp["run"], "interrupt": node,
                                      "branch": inv.filter_key})
                return
        cp["status"], cp["interrupt"] = "done", None
        yield self._state(inv, cp, phase="run_done", final=cp["state"])
        if self.output_key is not None:
            yield Event(author=self.name, choices=[Message.assistant(str(cp["state"].get(self.output_key) or ""))],
                        invocation_id=inv.id, request_id=inv.request_id, filter_key=inv.filter_key,
                        metadata={"graph": self.name, "graph_run": cp["run"], "branch": inv.filter_key})

    async def _run_nodes(self, inv: Invocation, cp: dict[str, Any], names: list[str],
                         resume_input: str | None) -> AsyncIterator[Event]:
        step_state = dict(cp["state"])
        streams = [self._node_stream(inv, cp, name, step_state, resume_input) for name in names]
        async for index, item in merge_streams(streams):
            name = names[index]
            if isinstance(item, Event):
                yield item
                if item.object == OBJ_ERROR:
                    return
                continue
            try:
                cp["state"] = self.graph.schema.apply(cp["state"], item.values, name)
                following = self.graph.next_after(name, cp["state"])
            except (ValueError, TypeError) as exc:
                cp["status"] = "failed"
                yield self._error(inv, cp, str(exc), node=name)
                return
            for join in self.graph.joins:
                if name in join.sources:
                    arrived = _unique([*cp["arrived"].get(join.id, []), name])
                    if set(arrived) >= set(join.sources):
                        following.append(join.target)
                        arrived = []
                    cp["arrived"][join.id] = arrived
            cp["done"].append(name)
            cp["next"] = _unique([*cp["next"], *following])
            yield self._state(inv, cp, phase="node_finish", node=name, delta=item.values)

    async def _node_stream(self, inv: Invocation, cp: dict[str, Any], name: str, state: dict[str, Any],
                           resume_input: str | None) -> AsyncIterator[Event | Delta]:
        key = branch_key(inv.filter_key, name)
        yield Event(author=self.name, object=OBJ_STATE, invocation_id=inv.id, request_id=inv.request_id,
                    filter_key=inv.filter_key, state_delta={f"{self.checkpoint_key}:started": name},
                    metadata={"graph": self.name, "graph_run": cp["run"], "phase": "node_start", "node": name,
                              "step": cp["step"], "branch": inv.filter_key})
        ctx = NodeContext(name, state, fork_invocation(inv, inv.agent, key), resume_input)
        delta: Delta | None = None
        try:
            async for item in self.graph.nodes[name].execute(ctx):
                if isinstance(item, Delta):
                    delta = item
                    continue
                on_branch(item, key).metadata.setdefault("node", name)
                yield item
        except Exception as exc:  # a failing node is recorded; the run can be resumed (retried)
            cp["status"] = "failed"
            yield self._error(inv, cp, f"node {name!r} failed: {type(exc).__name__}: {exc}", node=name)
            return
        yield delta or Delta()

    # ------------------------------------------------------------------------------------ events

    def _state(self, inv: Invocation, cp: dict[str, Any], **meta: Any) -> Event:
        return Event(author=self.name, object=OBJ_STATE, invocation_id=inv.id, request_id=inv.request_id,
                     filter_key=inv.filter_key, state_delta={self.checkpoint_key: _copy(cp)},
                     metadata={"graph": self.name, "graph_run": cp["run"], "step": cp["step"],
                               "branch": inv.filter_key, **meta})

    def _error(self, inv: Invocation, cp: dict[str, Any], message: str, **meta: Any) -> Event:
        event = self._state(inv, cp, phase="error", **meta)
        event.object, event.error, event.error_code = OBJ_ERROR, message, "graph_error"
        return event


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _copy(cp: dict[str, Any]) -> dict[str, Any]:
    """A snapshot of the checkpoint (the event keeps it; the run goes on mutating its own)."""
    return {**cp, "state": dict(cp["state"]), "frontier": list(cp["frontier"]), "done": list(cp["done"]),
            "next": list(cp["next"]), "arrived": {k: list(v) for k, v in cp["arrived"].items()}}
