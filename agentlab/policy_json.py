"""Typed, validated JSON round-trip shared by every policy and settings dataclass.

A policy (``SummaryPolicy``, ``RecallPolicy`` …) or a benchmark's own settings section is a frozen
dataclass: each field is one knob, its default is the default, its ``#:`` comment its doc, and
``__post_init__`` holds the checks. The functions here turn such a dataclass into JSON and back
with the *declared* types enforced, so a settings file, a ``--set`` flag and a stored run config
all go through one door: a wrong key or a wrong type is an error that names the field, never a
value silently stored as the wrong thing.

Any dataclass works (e.g. :class:`agentlab.model.base.GenerationConfig`, which does not use the
mixin); :class:`PolicyJSON` just offers the functions as methods.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from dataclasses import fields
from typing import Any, Literal, TypeVar, Union

P = TypeVar("P", bound="PolicyJSON")
D = TypeVar("D")

#: Words a ``--set`` value may use for "no value" on a field that accepts ``None``.
NONE_WORDS = frozenset({"none", "null"})


class FieldError(ValueError):
    """A value does not fit its field (unknown name or wrong type); the message names the field."""


# ------------------------------------------------------------------------------------ mixin


class PolicyJSON:
    """Mixin for frozen policy dataclasses: ``to_dict``/``from_dict`` and ``to_json``/``from_json``.

    Tuples become JSON lists; a field declared as a tuple is turned back into a tuple on the way
    in, so ``from_dict(p.to_dict()) == p``. Unknown fields and values of the wrong type are a
    :class:`FieldError` naming the field and the valid ones, not ignored.
    """

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-shaped (tuples as lists)."""
        return to_dict(self)

    def to_json(self) -> str:
        """Canonical JSON of :meth:`to_dict` (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls: type[P], data: dict[str, Any]) -> P:
        """The instance of ``data``'s fields (missing ones take their defaults), types checked."""
        return from_dict(cls, data)

    @classmethod
    def from_json(cls: type[P], text: str) -> P:
        """The instance stored by :meth:`to_json`."""
        return cls.from_dict(json.loads(text))


# -------------------------------------------------------------------------------- functions


def to_dict(obj: Any) -> dict[str, Any]:
    """Every field of the dataclass instance ``obj``, JSON-shaped (tuples as lists)."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def from_dict(cls: type[D], data: typing.Mapping[str, Any]) -> D:
    """``cls(**data)`` with unknown names and wrong types refused by :class:`FieldError`.

    The dataclass's own checks (``__post_init__``) then run as usual and raise what they raise.
    """
    declared = field_names(cls)
    unknown = sorted(set(data) - set(declared))
    for old in unknown:
        if old in renamed_fields(cls):
            raise FieldError(f"{cls.__name__}.{old} was renamed to {renamed_fields(cls)[old]}; "
                             f"give {renamed_fields(cls)[old]} instead")
    if unknown:
        raise FieldError(f"{cls.__name__} got unknown field(s): {', '.join(unknown)}; "
                         f"valid fields: {', '.join(sorted(declared))}")
    values = {name: check_value(cls, name, value) for name, value in data.items()}
    return cls(**values)


def renamed_fields(cls: type[Any]) -> typing.Mapping[str, str]:
    """Old name → new name of the fields a policy renamed (its ``RENAMED_FIELDS``): refused with the new name."""
    return typing.cast(typing.Mapping[str, str], getattr(cls, "RENAMED_FIELDS", {}))


def field_names(cls: type[Any]) -> list[str]:
    """The settable field names of a dataclass, in declaration order."""
    return [f.name for f in fields(cls) if f.init]


def check_value(cls: type[Any], name: str, value: Any) -> Any:
    """``value`` as field ``name`` of ``cls`` holds it (a list becomes a tuple, an int a float).

    A value of the wrong type is a :class:`FieldError`; a field whose declared type is not one of
    the plain JSON shapes (``bool``, ``int``, ``float``, ``str``, ``Literal``, ``X | None``, a
    tuple or list of those) is passed through for the dataclass to check.
    """
    return _check(_hints(cls).get(name, Any), value, name)


def parse_value_text(cls: type[Any], name: str, raw: str) -> Any:
    """The value of field ``name`` written as text (a ``--set`` value), by the field's declared type.

    ``true``/``false`` for booleans; ``none``/``null`` (or nothing) for a field that accepts
    ``None``; lists as a TOML array (``[1, 4]``, ``["a", "b"]``) or comma-separated (``1,4``).
    """
    return _parse(_hints(cls).get(name, Any), raw, name)


# ---------------------------------------------------------------------------------- private


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """The resolved field types of ``cls`` (cached per class)."""
    if cls not in _HINTS:
        try:
            _HINTS[cls] = typing.get_type_hints(cls)
        except Exception:  # an annotation only importable under TYPE_CHECKING: the class checks it
            _HINTS[cls] = {f.name: Any for f in fields(cls)}
    return _HINTS[cls]


def _optional_inner(tp: Any) -> tuple[Any, bool]:
    """(the type without ``None``, whether ``None`` is allowed)."""
    origin = typing.get_origin(tp)
    if origin is Union or (sys.version_info >= (3, 10) and origin is types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        allows_none = len(args) < len(typing.get_args(tp))
        inner = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007 - built at run time
        return inner, allows_none
    return tp, False


def _describe(tp: Any) -> str:
    inner, allows_none = _optional_inner(tp)
    origin = typing.get_origin(inner)
    if inner is bool:
        text = "true or false"
    elif inner is int:
        text = "an integer"
    elif inner is float:
        text = "a number"
    elif inner is str:
        text = "a string"
    elif origin is Literal:
        text = "one of " + ", ".join(str(a) for a in typing.get_args(inner))
    elif origin in (tuple, list):
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        text = "a list" + (f" of {_describe(args[0]).removeprefix('an ').removeprefix('a ')}s" if args else "")
    else:
        text = "a value"
    return text + (" or none" if allows_none else "")


def _check(tp: Any, value: Any, name: str) -> Any:
    if tp is Any:
        return value
    inner, allows_none = _optional_inner(tp)
    if value is None:
        if allows_none:
            return None
        raise FieldError(f"{name} must be {_describe(tp)}; got none")
    origin = typing.get_origin(inner)
    wrong = FieldError(f"{name} must be {_describe(tp)}; got {value!r}")
    if inner is bool:
        if not isinstance(value, bool):
            raise wrong
        return value
    if inner is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong
        return value
    if inner is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong
        return float(value)
    if inner is str:
        if not isinstance(value, str):
            raise wrong
        return value
    if origin is Literal:
        if value not in typing.get_args(inner):
            raise wrong
        return value
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise wrong
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        item_type = args[0] if len(args) == 1 or (origin is tuple and Ellipsis in typing.get_args(inner)) else Any
        try:
            items = [_check(item_type, v, name) for v in value]
        except FieldError:
            raise wrong from None
        return tuple(items) if origin is tuple else items
    return value  # a richer type: the dataclass checks it


def _parse(tp: Any, raw: str, name: str) -> Any:
    inner, allows_none = _optional_inner(tp)
    text = raw.strip()
    if allows_none and (text.lower() in NONE_WORDS or not text):
        return None
    origin = typing.get_origin(inner)
    if inner is bool:
        if text.lower() not in ("true", "false"):
            raise FieldError(f"{name} must be {_describe(tp)}; got {raw!r}")
        return text.lower() == "true"
    if inner is int:
        try:
            return int(text)  # exact, however large (a seed); float() would round past 2**53
        except ValueError:
            pass
        try:
            number = float(text)  # "1e3" or "4.0" name an integer too
        except ValueError:
            number = float("nan")
        if not number.is_integer() or abs(number) >= 2**53:
            raise FieldError(f"{name} must be {_describe(tp)}; got {raw!r}")
        return int(number)
    if inner is float:
        try:
            return float(text)
        except ValueError:
            raise FieldError(f"{name} must be {_describe(tp)}; got {raw!r}") from None
    if origin in (tuple, list):
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        item_type = args[0] if args else Any
        parts = _list_items(text, name)  # a malformed list is its own error
        try:
            items = [_parse(item_type, item, name) for item in parts]
        except FieldError:
            raise FieldError(f"{name} must be {_describe(tp)}; got {raw!r}") from None
        return tuple(items) if origin is tuple else items
    if origin is Literal or inner is str or tp is Any:
        value: Any = raw
        if origin is Literal:
            choices = typing.get_args(inner)
            matches = [c for c in choices if str(c) == text]
            if not matches:
                raise FieldError(f"{name} must be {_describe(tp)}; got {raw!r}")
            value = matches[0]
        return value
    return raw


def _list_items(text: str, name: str) -> list[str]:
    """The items of a list value: a TOML array (``[1, 4]``, ``["a", "b"]``) or ``1,4``.

    A bracketed value that is not valid TOML (``[CM, SI]``, bare words) is split on commas inside
    the brackets, so either spelling works.
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    if text.startswith("["):
        if not text.endswith("]"):
            raise FieldError(f"{name}: a list must end with ']', got {text!r} (e.g. [1,4])")
        try:
            parsed = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            text = text[1:-1]
        else:
            if any(isinstance(item, list | dict) for item in parsed):
                raise FieldError(f"{name}: nested lists or tables are not settings, got {text!r}") from None
            return [str(item).lower() if isinstance(item, bool) else str(item) for item in parsed]
    return [p.strip() for p in text.split(",") if p.strip()]


def is_dataclass_type(obj: Any) -> bool:
    """Whether ``obj`` is a dataclass class (not an instance)."""
    return isinstance(obj, type) and dataclasses.is_dataclass(obj)


__all__ = [
    "FieldError",
    "PolicyJSON",
    "check_value",
    "field_names",
    "from_dict",
    "is_dataclass_type",
    "parse_value_text",
    "to_dict",
]
