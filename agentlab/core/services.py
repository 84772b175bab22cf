"""The typed service registry a run reaches its services through (``inv.services.get(MemoryService)``).

A Runner (or :func:`agentlab.core.project`) holds one registry; every Invocation it builds points
to it. Mechanisms register what they own when the Runner opens (:meth:`ContextMechanism.open`) —
the summary mechanism its worker — and look services up by type in their hooks, so neither the
Runner nor the Invocation carries a slot per mechanism.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from agentlab.model.base import ModelRequest
from agentlab.session.base import Session

T = TypeVar("T")


@runtime_checkable
class SummaryService(Protocol):
    """Something that can advance a session's rolling summary now (the 70 % pressure path asks it).

    The summary mechanism registers its worker under this type; another mechanism that needs a
    synchronous summary (compaction's pressure path) looks it up here instead of importing it.
    """

    async def summarize(self, session: Session, filter_key: str = "", force: bool = False, *,
                        context_window: int | None = None, parent_request: ModelRequest | None = None,
                        idle_seconds: float | None = None) -> bool:
        """Update the summary of ``filter_key``; ``True`` iff its boundary advanced."""
        ...


class ServiceRegistry:
    """Services by type: exact registered type first, then any registered service that is an instance.

    ``add(service)`` registers under the service's own class (and ``as_type`` when given);
    ``get(T)`` returns the service registered under ``T``, else the first one (in registration
    order) for which ``isinstance(service, T)`` holds — so a runtime-checkable protocol such as
    ``MemoryService`` finds any backend. Services added with ``owned=True`` are closed (their
    ``close()``, awaited when it is a coroutine) by :meth:`aclose`, newest first.
    """

    def __init__(self) -> None:
        self._by_type: dict[type, Any] = {}
        self._order: list[Any] = []
        self._owned: list[Any] = []
        self._named: dict[str, Any] = {}

    def add(self, service: T, *, as_type: type | None = None, owned: bool = False, replace: bool = True,
            name: str | None = None) -> T:
        """Register ``service``; with ``replace=False`` an existing entry for the type is kept.

        ``name`` also files it under a label (:meth:`named`), for a mechanism that must tell its own
        service from another of the same type; code that wants a service of a type uses :meth:`get`.
        """
        if name is not None and (replace or name not in self._named):
            self._named[name] = service
        keys = [type(service)] + ([as_type] if as_type is not None else [])
        for key in keys:
            if replace or key not in self._by_type:
                self._by_type[key] = service
        if all(s is not service for s in self._order):
            self._order.append(service)
        if owned and all(s is not service for s in self._owned):
            self._owned.append(service)
        return service

    def named(self, name: str) -> Any:
        """The service filed under ``name`` (see :meth:`add`), or ``None``."""
        return self._named.get(name)

    def remove(self, service_type: type) -> None:
        """Forget the service :meth:`get` finds for ``service_type``, under every type and name (no longer closed here)."""
        service = self.get(service_type)
        if service is None:
            return
        self._by_type = {k: v for k, v in self._by_type.items() if v is not service}
        self._named = {k: v for k, v in self._named.items() if v is not service}
        self._order = [s for s in self._order if s is not service]
        self._owned = [s for s in self._owned if s is not service]

    def get(self, service_type: type[T]) -> T | None:
        """The service of ``service_type`` (see the class docstring), or ``None``."""
        found = self._by_type.get(service_type)
        if found is not None:
            return cast(T, found)
        for service in self._order:
            try:
                if isinstance(service, service_type):
                    return service
            except TypeError:  # a protocol that is not runtime-checkable: exact registrations only
                return None
        return None

    def require(self, service_type: type[T]) -> T:
        """Like :meth:`get`, but a missing service is a clear error naming the type."""
        found = self.get(service_type)
        if found is None:
            raise LookupError(f"no {service_type.__name__} is registered for this run")
        return found

    def __contains__(self, service_type: type) -> bool:
        return self.get(service_type) is not None

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._order))

    async def aclose(self) -> None:
        """Close the owned services, newest first (a service without ``close`` is skipped)."""
        owned, self._owned = list(reversed(self._owned)), []
        for service in owned:
            close = getattr(service, "close", None)
            if close is None:
                continue
            result = close()
            if hasattr(result, "__await__"):
                await result


__all__ = ["ServiceRegistry", "SummaryService"]
