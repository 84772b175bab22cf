"""Benchmark facts the settings and the store need, and the one way they reach the task registry.

A benchmark's facts live on its :class:`~agentlab.bench.tasks.Task` class: which mode plays which
part in the comparison tables (:class:`ModeRoles`, ``Task.mode_roles``) and which answer calls its
published report counts as a case's tokens (``Task.published_token_rule``). The settings loader
and the results store sit *below* the task registry (the registry imports them), so they do not
import it back: :mod:`agentlab.bench.tasks` hands its registry to this module when it is imported
(:func:`use_registry`), and :func:`registered_roles`, :func:`registered_token_rules` and
:func:`registered_task` read the registered classes through it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: The summary benchmarks' rule: the provider usage of the last answer call of each run
#: (docs/sources.md#summary-benchmark-metrics). A recall run's search and load rounds are not
#: added up, only the final prompt, which already carries the tool results.
LAST_ANSWER_CALL = "last_answer_call"
#: Every answer call of the case. MT-Bench-101's published totals sum the turns (one answer call
#: each, no tools); LoCoMo's Tokens/QA and Calls/QA count every call of a question (e.g. 3 calls
#: and 17,182 tokens per question for two memory_search passes, docs/sources.md#locomo-results).
SUM_ANSWER_CALLS = "sum_answer_calls"
TOKEN_RULES = (LAST_ANSWER_CALL, SUM_ANSWER_CALLS)


@dataclass(frozen=True)
class ModeRoles:
    """Which mode plays which part in the quality-loss and recovery tables."""

    #: Full-context mode every other mode is compared with (quality loss, token savings).
    baseline: str
    #: The mode that loses information (summary); ``None`` when the benchmark has none.
    lossy: str | None = None
    #: The mode that wins it back (summary + recall); recovery = (recovered − lossy)/(baseline − lossy).
    recovered: str | None = None


#: ``discover()``: every task class by name (importing the task modules); may raise for a broken module.
_discover: Callable[[], Mapping[str, Any]] | None = None
#: The task classes registered so far (no import), for when discovery fails.
_registered: Callable[[], Mapping[str, Any]] | None = None


def use_registry(discover: Callable[[], Mapping[str, Any]], registered: Callable[[], Mapping[str, Any]]) -> None:
    """Called by :mod:`agentlab.bench.tasks` on import: where the task classes are found."""
    global _discover, _registered
    _discover, _registered = discover, registered


def _task_classes() -> Mapping[str, Any]:
    """Every registered task class; those registered so far (with a warning) when a task module fails to load.

    The fallback keeps stored results reportable when one task module is broken, and says so.
    """
    if _discover is None or _registered is None:
        return {}  # agentlab.bench's __init__ imports the registry, so this is only a half-imported package
    try:
        return _discover()
    except Exception as exc:  # a broken task module must not prevent reporting stored results
        warnings.warn(f"a task module failed to load ({type(exc).__name__}: {exc}); the derived tables use "
                      "the tasks registered before it", RuntimeWarning, stacklevel=3)
        return _registered()


def registered_roles() -> dict[str, ModeRoles]:
    """Benchmark → its mode roles, for every registered task that declares them."""
    return {name: cls.mode_roles for name, cls in sorted(_task_classes().items()) if cls.mode_roles is not None}


def registered_token_rules() -> dict[str, str]:
    """Benchmark → the published token rule, for every registered task that declares one."""
    return {name: cls.published_token_rule for name, cls in sorted(_task_classes().items())
            if getattr(cls, "published_token_rule", None)}


def registered_so_far(name: str) -> Any:
    """The task class registered as ``name`` without importing any task module (``None`` if not yet)."""
    return (_registered() if _registered is not None else {}).get(name)


def registered_task(name: str) -> Any:
    """The task class registered as ``name`` (``LookupError`` naming the known ones if none)."""
    classes = _task_classes()
    if name not in classes:
        raise LookupError(f"unknown benchmark {name!r}; known benchmarks: {', '.join(sorted(classes)) or 'none'}")
    return classes[name]
