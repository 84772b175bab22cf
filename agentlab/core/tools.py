"""Tools the model can call. ``FunctionTool`` turns a typed Python function into one.

:func:`function_declaration` and :func:`check_arguments` are the one way a tool's declaration is
written and the model's arguments are checked: ``FunctionTool`` uses them, and so do the tools
whose schema is written out by hand (recall's ``session_search`` / ``session_load``, memory's
``memory_search``) — those keep their hand-written declarations byte for byte, because a changed
declaration changes every request's call-cache key.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, Union, get_args, get_origin, runtime_checkable

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation


@dataclass
class ToolContext:
    """What a tool may know about the run that called it."""

    invocation: Invocation
    tool_call_id: str
    tool_name: str


@runtime_checkable
class Tool(Protocol):
    """Something the model can call: a declaration for the request, and the call itself."""

    name: str
    description: str

    def declaration(self) -> dict[str, Any]:
        """The chat-completions ``tools`` entry for this tool."""
        ...

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        """Run with the model's arguments; the result goes back as text (see ``render_tool_result``)."""
        ...


def function_declaration(name: str, description: str, properties: dict[str, Any],
                         required: list[str]) -> dict[str, Any]:
    """The chat-completions ``tools`` entry of a function tool (key order fixed: it is hashed)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def check_arguments(tool_name: str, arguments: dict[str, Any], allowed: Iterable[str],
                    required: Iterable[str] = ()) -> None:
    """Refuse arguments the declaration does not name, and missing required ones (a ``ValueError``).

    The message names the tool, the offending arguments and the allowed ones, so the model can
    correct its call from the tool result alone.
    """
    allowed = set(allowed)
    unknown = sorted(set(arguments) - allowed)
    if unknown:
        raise ValueError(f"unknown argument(s) for {tool_name}: {', '.join(unknown)} "
                         f"(allowed: {', '.join(sorted(allowed)) or 'none'})")
    missing = [p for p in required if p not in arguments]
    if missing:
        raise ValueError(f"missing required argument(s) for {tool_name}: {', '.join(missing)}")


def int_argument(name: str, value: Any) -> int | None:
    """A tool's integer argument: ``None`` when absent or empty, else ``int(value)``.

    Models send numbers as strings at times, so ``"3"`` is accepted; a boolean or anything
    ``int`` refuses is a ``ValueError`` naming the argument and the value given.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def render_tool_result(value: Any) -> str:
    """Tool results travel as text: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_for(annotation: Any) -> dict[str, Any]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if annotation in _PRIMITIVES:
        return {"type": _PRIMITIVES[annotation]}
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Literal:
        values = list(args)
        kind = _PRIMITIVES.get(type(values[0]), "string")
        return {"type": kind, "enum": values}
    if origin in (Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            return _schema_for(non_null[0])
        return {"anyOf": [_schema_for(a) for a in non_null]}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple):
        item = _schema_for(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    return {"type": "string"}


def _docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-argument descriptions."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    head, _, rest = doc.partition("\nArgs:\n")
    params: dict[str, str] = {}
    current = None
    for line in rest.splitlines():
        m = re.match(r"^\s{2,}(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
        if m:
            current = m.group(1)
            params[current] = m.group(2).strip()
        elif current and line.startswith(" " * 6):
            params[current] += " " + line.strip()
        elif line.strip() and not line.startswith(" "):
            break
    return head.strip(), params


class FunctionTool:
    """A tool made from a (sync or async) function with type hints and a docstring.

    A parameter annotated ``ToolContext`` receives the calling context and is hidden from the
    model. Parameters without defaults are required.
    """

    def __init__(self, fn: Callable[..., Any] | Callable[..., Awaitable[Any]], *, name: str | None = None,
                 description: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        summary, param_docs = _docstring_parts(fn.__doc__ or "")
        self.description = description or summary or self.name
        hints = typing.get_type_hints(fn)
        self._context_param: str | None = None
        properties: dict[str, Any] = {}
        required: list[str] = []
        for pname, param in inspect.signature(fn).parameters.items():
            annotation = hints.get(pname, param.annotation)
            if annotation is ToolContext or ToolContext in get_args(annotation):
                self._context_param = pname
                continue
            schema = _schema_for(annotation)
            if pname in param_docs:
                schema["description"] = param_docs[pname]
            properties[pname] = schema
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        self.parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}

    def declaration(self) -> dict[str, Any]:
        """The declaration built from the function's signature and docstring."""
        return function_declaration(self.name, self.description, self.parameters["properties"],
                                    self.parameters["required"])

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        """Check the arguments against the signature, then call the function (awaited if async)."""
        check_arguments(self.name, arguments, self.parameters["properties"], self.parameters["required"])
        kwargs = dict(arguments)
        if self._context_param:
            kwargs[self._context_param] = ctx
        result = self.fn(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


def tool(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """Decorator form of :class:`FunctionTool`."""
    if fn is None:
        return lambda f: FunctionTool(f, **kwargs)
    return FunctionTool(fn, **kwargs)


__all__ = ["FunctionTool", "Tool", "ToolContext", "check_arguments", "function_declaration", "int_argument",
           "render_tool_result", "tool"]
