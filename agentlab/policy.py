"""JSON round-trip shared by every policy dataclass, so a stored run can rebuild its policies."""

from __future__ import annotations

import json
from dataclasses import Field, fields
from typing import Any, TypeVar

P = TypeVar("P", bound="PolicyJSON")


class PolicyJSON:
    """Mixin for frozen policy dataclasses: ``to_dict``/``from_dict`` and ``to_json``/``from_json``.

    Tuples become JSON lists; a field declared with a tuple default is turned back into a tuple on
    the way in, so ``from_dict(p.to_dict()) == p``. Unknown fields are a clear error, not ignored.
    """

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls: type[P], data: dict[str, Any]) -> P:
        declared = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(declared))
        if unknown:
            raise ValueError(f"{cls.__name__} got unknown field(s): {', '.join(unknown)}")
        values = dict(data)
        for name, value in values.items():
            if isinstance(value, list) and _is_tuple_field(declared[name]):
                values[name] = tuple(value)
        return cls(**values)

    @classmethod
    def from_json(cls: type[P], text: str) -> P:
        return cls.from_dict(json.loads(text))


def _is_tuple_field(f: Field[Any]) -> bool:
    return isinstance(f.default, tuple) or f.default_factory is tuple or str(f.type).startswith("tuple")
