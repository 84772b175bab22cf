"""The context window of each model name the proxy's clients use, read from the upstream's own
model list: the one route an OpenAI-compatible upstream declares for it.

``GET <upstream>/models`` is the route a client can already reach through the proxy (``/v1/models``),
so resolving a window sends the upstream key nowhere else (no llama.cpp ``/props``, Ollama
``/api/show`` or LM Studio ``/api/v0/models`` probes: a model's own resolver tries those, the
proxy never does). The list is fetched at most once per :data:`LISTING_INTERVAL` seconds per
upstream, whatever the number of model names; a name it does not state gets the known window of a
hosted model of that name, else :data:`FALLBACK_WINDOW`, and the source says which. At most
``max_names`` names are remembered (least recently used dropped). ``--context-window`` turns all
of it off.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from agentlab.model.base import ModelInfo
from agentlab.model.openai_compat import known_context_window

#: Window assumed for the arm's triggers when neither ``--context-window`` nor the upstream states one.
FALLBACK_WINDOW = 8192
#: Seconds between two fetches of the upstream's model list (a name it lacks waits for the next one).
LISTING_INTERVAL = 300.0
#: Fields of a model-list entry that state its window (vLLM, OpenRouter / LM Studio, some gateways).
WINDOW_FIELDS = ("max_model_len", "context_length", "context_window")

#: Fetches the upstream's ``/models`` body (``None`` when it could not be had).
Fetch = Callable[[], Awaitable[bytes | None]]


def window_in_listing(listing: Any, name: str) -> tuple[int, str] | None:
    """(window, field) that a ``/models`` body states for model ``name``, else ``None``."""
    items = listing.get("data") if isinstance(listing, dict) else listing
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("id") == name:
            for key in WINDOW_FIELDS:
                value = item.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value, key
    return None


class UpstreamWindows:
    """Windows by model name, from one upstream's model list (see the module docstring)."""

    def __init__(self, max_names: int = 64, interval: float = LISTING_INTERVAL) -> None:
        self.max_names = max_names
        self.interval = interval
        self._windows: OrderedDict[str, ModelInfo] = OrderedDict()
        self._listing: Any = None
        self._listed_at: float | None = None
        self._lock = asyncio.Lock()
        #: Fetches of the model list so far.
        self.fetches = 0

    async def of(self, name: str, fetch: Fetch) -> ModelInfo:
        """The window of ``name`` (the list fetched first when it is due)."""
        info = self._windows.get(name)
        if info is not None and info.context_window_source.startswith("server:"):
            self._windows.move_to_end(name)
            return info
        async with self._lock:
            now = time.monotonic()
            if self._listed_at is None or now - self._listed_at >= self.interval:
                self._listed_at = now
                self.fetches += 1
                raw = await fetch()
                try:
                    self._listing = json.loads(raw) if raw else None
                except (ValueError, UnicodeDecodeError):
                    self._listing = None
            elif info is not None:  # not in the list, and the list is not due again: as it was
                self._windows.move_to_end(name)
                return info
            found = window_in_listing(self._listing, name)
            if found is not None:
                info = ModelInfo(name, found[0], f"server:/models {found[1]}")
            else:
                known = known_context_window(name)
                info = (ModelInfo(name, known, "known-model table") if known is not None
                        else ModelInfo(name, FALLBACK_WINDOW, "agentlab-serve fallback"))
            self._windows[name] = info
            self._windows.move_to_end(name)
            while len(self._windows) > self.max_names:
                self._windows.popitem(last=False)
            return info
