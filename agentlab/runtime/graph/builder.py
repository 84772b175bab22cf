"""Declaring a state graph in Python and compiling it: the checks that refuse a malformed graph.

``compile()`` raises :class:`GraphError` whose message has one line per problem:

* an edge, join or route source naming an **unknown node**;
* a **conditional route to an undeclared target**;
* an **unreachable node** (no path from ``START``);
* a node with **no path to the end** (``END`` cannot be reached from it);
* a **join that can never fire**: one of its sources is unreachable, or two of its sources lie on
  different targets of one conditional route that is not on a cycle (a pass takes one target, so
  both can never finish in the same pass).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.runtime.graph.nodes import FunctionNode, Node
from agentlab.runtime.graph.state import StateSchema

__all__ = ["END", "START", "CompiledGraph", "GraphError", "Join", "Route", "StateGraph"]

START = "__start__"
END = "__end__"

Router = Callable[[dict[str, Any]], str]


class GraphError(ValueError):
    """A graph that cannot run as declared: one line per problem."""


@dataclass(frozen=True)
class Route:
    """A conditional route: after ``source``, ``router(state)`` returns a label, mapped to a target."""

    source: str
    router: Router
    targets: Mapping[str, str]


@dataclass(frozen=True)
class Join:
    """``target`` fires once every one of ``sources`` has finished (since it last fired)."""

    sources: tuple[str, ...]
    target: str

    @property
    def id(self) -> str:
        """A stable name for the join (its sources and target)."""
        return f"{'+'.join(self.sources)}->{self.target}"


class StateGraph:
    """A graph under construction: nodes, edges, conditional routes, fan-out and joins.

    Several edges out of one node fan out (their targets run in the same step, at once); a join
    waits for all its sources. ``START`` and ``END`` are the entry and the exit.
    """

    def __init__(self, schema: StateSchema) -> None:
        self.schema = schema
        self.nodes: dict[str, Node] = {}
        self.edges: list[tuple[str, str]] = []
        self.routes: list[Route] = []
        self.joins: list[Join] = []

    def add_node(self, name: str, node: Node | Callable[[dict[str, Any]], Any]) -> StateGraph:
        """Declare a node (a plain callable becomes a :class:`FunctionNode`)."""
        if name in (START, END) or not name.strip() or "/" in name:
            raise GraphError(f"{name!r} cannot name a node: use a non-empty name without '/' other than START/END")
        if name in self.nodes:
            raise GraphError(f"node {name!r} is declared twice")
        self.nodes[name] = node if isinstance(node, Node) else FunctionNode(node)
        return self

    def add_edge(self, source: str, target: str) -> StateGraph:
        """After ``source``, run ``target`` (several edges from one source fan out)."""
        self.edges.append((source, target))
        return self

    def add_route(self, source: str, router: Router, targets: Mapping[str, str] | Sequence[str]) -> StateGraph:
        """After ``source``, go where ``router(state)`` says: a label of ``targets`` (a list maps to itself)."""
        mapping = dict(targets) if isinstance(targets, Mapping) else {t: t for t in targets}
        self.routes.append(Route(source, router, mapping))
        return self

    def add_join(self, sources: Iterable[str], target: str) -> StateGraph:
        """Run ``target`` once all ``sources`` have finished."""
        self.joins.append(Join(tuple(sources), target))
        return self

    def compile(self) -> CompiledGraph:
        """Check the graph (see the module docstring) and freeze it; :class:`GraphError` lists each problem."""
        problems = self._problems()
        if problems:
            raise GraphError("\n".join(problems))
        return CompiledGraph(self.schema, dict(self.nodes), tuple(self.edges), tuple(self.routes), tuple(self.joins))

    # -------------------------------------------------------------------------------- checks

    def _successors(self, restrict: tuple[Route, str] | None = None) -> dict[str, set[str]]:
        """Every possible next step of each node (``restrict``: one route taking one target only)."""
        succ: dict[str, set[str]] = {n: set() for n in (START, END, *self.nodes)}
        for source, target in self.edges:
            succ.setdefault(source, set()).add(target)
        for route in self.routes:
            targets: Iterable[str] = route.targets.values()
            if restrict is not None and route is restrict[0]:
                targets = [restrict[1]]
            succ.setdefault(route.source, set()).update(targets)
        for join in self.joins:
            for source in join.sources:
                succ.setdefault(source, set()).add(join.target)
        return succ

    @staticmethod
    def _reach(succ: Mapping[str, set[str]], start: str) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in succ.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    def _problems(self) -> list[str]:
        known = {START, END, *self.nodes}
        problems: list[str] = []
        for source, target in self.edges:
            for name in (source, target):
                if name not in known:
                    problems.append(f"unknown node {name!r} in edge {source!r} -> {target!r}")
            if target == START or source == END:
                problems.append(f"edge {source!r} -> {target!r}: nothing enters START or leaves END")
        for route in self.routes:
            if route.source not in known:
                problems.append(f"unknown node {route.source!r} as the source of a conditional route")
            for label, target in route.targets.items():
                if target not in known or target == START:
                    problems.append(f"conditional route from {route.source!r} ({label!r}) to an undeclared target "
                                    f"{target!r}; declare the node or fix the route")
        for join in self.joins:
            for name in (*join.sources, join.target):
                if name not in known:
                    problems.append(f"unknown node {name!r} in join {join.id}")
        if problems:
            return problems
        succ = self._successors()
        reachable = self._reach(succ, START)
        if not succ[START]:
            problems.append("no edge leaves START: add_edge(START, <first node>)")
        for name in self.nodes:
            if name not in reachable:
                problems.append(f"unreachable node {name!r}: no path from START reaches it")
        preds: dict[str, set[str]] = {n: set() for n in succ}
        for source, targets in succ.items():
            for target in targets:
                preds.setdefault(target, set()).add(source)
        reaches_end = self._reach(preds, END)
        for name in self.nodes:
            if name in reachable and name not in reaches_end:
                problems.append(f"node {name!r} has no path to END")
        problems.extend(self._dead_joins(succ, reachable))
        return problems

    def _dead_joins(self, succ: Mapping[str, set[str]], reachable: set[str]) -> list[str]:
        problems: list[str] = []
        for join in self.joins:
            missing = [s for s in join.sources if s not in reachable]
            if missing:
                problems.append(f"join {join.id} can never fire: {', '.join(map(repr, missing))} never runs")
                continue
            for route in self.routes:
                if route.source in self._reach_from_successors(succ, route.source):
                    continue  # on a cycle: a later pass may take the other target
                by_target = {t: self._reach(self._successors((route, t)), START) for t in set(route.targets.values())}
                taken = [{t for t, seen in by_target.items() if s in seen} for s in join.sources]
                clash = next(((a, b) for i, a in enumerate(join.sources) for j, b in enumerate(join.sources)
                              if i < j and not (taken[i] & taken[j])), None)
                if clash is not None:
                    problems.append(f"join {join.id} can never fire: {clash[0]!r} and {clash[1]!r} lie on different "
                                    f"targets of the route after {route.source!r}, which takes one")
                    break
        return problems

    def _reach_from_successors(self, succ: Mapping[str, set[str]], node: str) -> set[str]:
        seen: set[str] = set()
        for nxt in succ.get(node, ()):
            seen |= self._reach(succ, nxt)
        return seen


@dataclass(frozen=True)
class CompiledGraph:
    """A checked graph, ready for :class:`~agentlab.runtime.graph.GraphAgent`."""

    schema: StateSchema
    nodes: Mapping[str, Node]
    edges: tuple[tuple[str, str], ...]
    routes: tuple[Route, ...]
    joins: tuple[Join, ...]

    def next_after(self, node: str, state: dict[str, Any]) -> list[str]:
        """The nodes (or ``END``) that follow ``node`` by its edges and its route, in declaration order."""
        out = [t for s, t in self.edges if s == node]
        for route in self.routes:
            if route.source == node:
                label = route.router(dict(state))
                if label not in route.targets:
                    raise GraphError(f"the route after {node!r} returned {label!r}, not one of its declared targets "
                                     f"({', '.join(map(repr, route.targets))})")
                out.append(route.targets[label])
        return out

    def edge_list(self) -> list[tuple[str, str, str]]:
        """Every edge as ``(source, target, kind)``; kind is ``edge``, ``route:<label>`` or ``join``."""
        out = [(s, t, "edge") for s, t in self.edges]
        out += [(r.source, t, f"route:{label}") for r in self.routes for label, t in r.targets.items()]
        out += [(s, j.target, "join") for j in self.joins for s in j.sources]
        return out
