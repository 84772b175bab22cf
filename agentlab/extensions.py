"""The user's own modules — arms, mechanisms, benchmarks — loaded by the bench, the notebooks and the proxy.

A policy, an arm or a whole benchmark written outside the package registers itself when its module
is imported (``register_arm(...)``, ``@register``). ``$AGENTLAB_EXTENSIONS`` names those modules,
comma-separated; every entry point of agentlab that looks an arm or a benchmark up calls
:func:`load_extensions` first, so the same module is seen by ``python -m agentlab.bench``, by a
notebook and by ``python -m agentlab.serve``.

An entry is either a module name (``my_policy``, ``lab.policies``), imported as usual — from the
current directory, ``PYTHONPATH`` or an installed package — or the path of a ``.py`` file
(``policies/my_policy.py``, absolute or relative to the current directory), imported from that
file whatever the current directory, so a module need not sit in the folder the command runs from.

A module that cannot be imported is an :class:`ExtensionError` whose message is one line naming
the entry, the variable and the fix; the CLIs print it as their ``error:`` line. A module that
imports but raises is reported the same way, with the exception's own message.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

#: The variable that names the user's modules (comma-separated module names or ``.py`` paths).
EXTENSIONS_ENV = "AGENTLAB_EXTENSIONS"

class ExtensionError(ValueError):
    """A module named in ``$AGENTLAB_EXTENSIONS`` could not be loaded."""


def extension_entries(environ: dict[str, str] | None = None) -> list[str]:
    """The entries the environment names, in order, each once (:data:`EXTENSIONS_ENV` first)."""
    env = os.environ if environ is None else environ
    entries: list[str] = []
    for variable in (EXTENSIONS_ENV,):
        for entry in (part.strip() for part in env.get(variable, "").split(",")):
            if entry and entry not in entries:
                entries.append(entry)
    return entries


def _variable_of(entry: str) -> str:
    for variable in (EXTENSIONS_ENV,):
        if entry in (part.strip() for part in os.environ.get(variable, "").split(",")):
            return "$" + variable
    return "$" + EXTENSIONS_ENV


def _is_path(entry: str) -> bool:
    return entry.endswith(".py") or os.sep in entry or "/" in entry


def _load_file(entry: str) -> str:
    path = Path(entry).expanduser().resolve()
    if not path.is_file():
        raise ExtensionError(f"extension file {entry!r} named in {_variable_of(entry)} does not exist "
                             f"(looked for {path}); give the path of a .py file, or a module name")
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return name
    if not name.isidentifier():
        raise ExtensionError(f"extension file {entry!r} named in {_variable_of(entry)}: {path.name!r} is not a "
                             "valid module name; rename it to letters, digits and underscores")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ExtensionError(f"extension file {entry!r} named in {_variable_of(entry)} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ExtensionError(f"extension file {entry!r} named in {_variable_of(entry)} failed on import: "
                             f"{type(exc).__name__}: {exc}") from exc
    return name


def _load_module(entry: str) -> str:
    try:
        importlib.import_module(entry)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (entry == exc.name or entry.startswith(exc.name + ".")):
            raise ExtensionError(
                f"extension module {entry!r} named in {_variable_of(entry)} was not found; check the spelling, "
                "run from the folder that holds it or add that folder to PYTHONPATH, or give the path of its "
                ".py file instead") from exc
        raise ExtensionError(f"extension module {entry!r} named in {_variable_of(entry)} failed on import: "
                             f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        raise ExtensionError(f"extension module {entry!r} named in {_variable_of(entry)} failed on import: "
                             f"{type(exc).__name__}: {exc}") from exc
    return entry


def load_extensions() -> list[str]:
    """Import every module the environment names (once each) and return their module names.

    Idempotent: a module already in ``sys.modules`` is not imported again (one removed from it
    is), and a change of the variable between calls loads the new entries. Raises
    :class:`ExtensionError` for the first entry that cannot be loaded; the entries before it stay
    loaded.
    """
    return [_load_file(entry) if _is_path(entry) else _load_module(entry) for entry in extension_entries()]
