"""A graph's typed state: each key declared with its type and the rule that merges writes to it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Key", "StateSchema", "append", "merge", "replace", "total"]

Reducer = Callable[[Any, Any], Any]


def replace(old: Any, new: Any) -> Any:
    """The write wins (the default rule)."""
    return new


def append(old: Any, new: Any) -> Any:
    """Lists concatenate (a single value is appended); fan-out writes keep their arrival order."""
    return [*(old or []), *(new if isinstance(new, list) else [new])]


def merge(old: Any, new: Any) -> Any:
    """Dicts merge, the write's keys winning."""
    return {**(old or {}), **new}


def total(old: Any, new: Any) -> Any:
    """Numbers add up."""
    return (old or 0) + new


@dataclass(frozen=True)
class Key:
    """One state key: its Python type (checked on every write), its merge rule, its initial value."""

    type: type | tuple[type, ...] = object
    reducer: Reducer = replace
    default: Any = None


@dataclass(frozen=True)
class StateSchema:
    """The keys a graph's state may hold. A node writing an undeclared key, or a value of the
    wrong type, is refused with one line naming the node, the key and the declared keys/type.
    """

    keys: Mapping[str, Key] = field(default_factory=dict)

    def initial(self) -> dict[str, Any]:
        """Every key at its default (copied, so runs never share a mutable default)."""
        return {name: copy.deepcopy(key.default) for name, key in self.keys.items()}

    def apply(self, state: dict[str, Any], delta: Mapping[str, Any], node: str) -> dict[str, Any]:
        """``state`` with ``delta`` merged by each key's rule (a new dict; ``state`` is untouched)."""
        out = dict(state)
        for name, value in delta.items():
            key = self.keys.get(name)
            if key is None:
                raise ValueError(f"node {node!r} wrote the undeclared state key {name!r}; "
                                 f"declare it in the StateSchema (declared: {', '.join(sorted(self.keys)) or 'none'})")
            merged = key.reducer(out.get(name), value)
            if key.type is not object and merged is not None and not isinstance(merged, key.type):
                raise TypeError(f"node {node!r} wrote {type(merged).__name__} to state key {name!r}, "
                                f"declared {getattr(key.type, '__name__', key.type)}")
            out[name] = merged
        return out
