"""Token prices per model, read from ``data/prices.toml``, and the net cost of a request sequence.

Every price in the file names the page it was read on and the day (see the file's header). A
model the file does not list has no price: :func:`price_for` returns ``None`` and the callers
print token columns only, saying so once (:func:`no_price_note`). No price is ever guessed.

The net cost of a sequence under a cache profile (:func:`net_cost`), in USD:

    (uncached - written) x input  +  cached x cached_input  +  written x cache_write  +  output x output

where ``written`` is the cache-write tokens the profile bills (0 for OpenAI, whose writes are free),
all per million tokens. The raw cost (:func:`raw_cost`) prices every prompt token as uncached input.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentlab.model.prompt_caching import CacheTotals

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: The price file in the repository.
PRICES_FILE = Path(__file__).resolve().parents[2] / "data" / "prices.toml"
PER_TOKENS = 1_000_000


@dataclass(frozen=True)
class Price:
    """One model's prices, USD per million tokens, with where and when they were read."""

    model: str
    input: float
    cached_input: float
    #: ``None`` where the provider bills no cache write (OpenAI).
    cache_write: float | None
    output: float
    source_kind: str
    sources: tuple[str, ...]
    read_on: str

    def describe(self) -> str:
        """One line: the model, its prices and its source (a secondary source is said to be one)."""
        write = "" if self.cache_write is None else f", cache write {self.cache_write}"
        kind = "" if self.source_kind == "provider" else f" ({self.source_kind} source)"
        return (f"{self.model}: input {self.input}, cached input {self.cached_input}{write}, output {self.output} "
                f"USD per 1M tokens, read {self.read_on} on {self.sources[0]}{kind}")


class PriceFileError(ValueError):
    """The price file is malformed (the message names the model and field)."""


def _price(model: str, raw: dict[str, Any]) -> Price:
    try:
        return Price(model=model, input=float(raw["input"]), cached_input=float(raw["cached_input"]),
                     cache_write=None if raw.get("cache_write") is None else float(raw["cache_write"]),
                     output=float(raw["output"]), source_kind=str(raw["source_kind"]),
                     sources=tuple(str(s) for s in raw["sources"]), read_on=str(raw["read_on"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise PriceFileError(f"models.{model} in the price file: missing or bad field {exc}; every model needs "
                             "input, cached_input, output, source_kind, sources and read_on") from None


def load_prices(path: Path = PRICES_FILE) -> dict[str, Price]:
    """Every model of the price file (model name -> :class:`Price`)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PriceFileError(f"cannot read the price file {path}: {exc}") from None
    prices = {model: _price(model, raw) for model, raw in data.get("models", {}).items()}
    for p in prices.values():
        if not p.sources:
            raise PriceFileError(f"models.{p.model} in {path}: no source page; a price needs the page it was read on")
    return prices


def price_for(model: str | None, path: Path = PRICES_FILE) -> Price | None:
    """The price of ``model``, or ``None`` when the file does not list it (or no model is named)."""
    return None if not model else load_prices(path).get(model)


def no_price_note(model: str | None) -> str:
    """The one line printed when a model has no price."""
    return f"no price for {model or 'an unnamed model'} in data/prices.toml: cost columns omitted"


def net_cost(cache: CacheTotals, price: Price, output_tokens: int = 0) -> float:
    """USD of ``cache`` (and ``output_tokens``) at ``price`` (formula in the module docstring)."""
    written = cache.cache_write_tokens
    if written and price.cache_write is None:
        raise PriceFileError(f"{price.model} has no cache_write price but the cache profile bills {written} "
                             "written tokens; use the provider's profile for this model")
    write_price = price.cache_write or 0.0
    usd = ((cache.uncached_tokens - written) * price.input + cache.cached_tokens * price.cached_input
           + written * write_price + output_tokens * price.output)
    return usd / PER_TOKENS


def raw_cost(prompt_tokens: int, price: Price, output_tokens: int = 0) -> float:
    """USD of ``prompt_tokens`` all billed as uncached input (and ``output_tokens``)."""
    return (prompt_tokens * price.input + output_tokens * price.output) / PER_TOKENS


__all__ = ["PRICES_FILE", "Price", "PriceFileError", "load_prices", "net_cost", "no_price_note", "price_for",
           "raw_cost"]
