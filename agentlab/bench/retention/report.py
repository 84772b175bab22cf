"""What the retention commands print besides their tables: the cache table, the price and the notes.

Shared by ``retention <benchmark>`` (:mod:`agentlab.bench.cli.retention`) and ``retention
trajectories`` (:mod:`agentlab.bench.retention.trajectory_report`, which the ``trajectories`` task
also calls), so neither the task nor this package reaches up into the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from agentlab.bench.retention.questions import FRACTION_TRIGGERED_PEERS, PEER_TRIGGER_FRACTION
from agentlab.bench.usage import UsageError
from agentlab.model.prices import PriceFileError, no_price_note, price_for

#: The model whose price the cost columns use when ``--price-model`` is not given, per cache profile.
DEFAULT_PRICE_MODEL: dict[str, str | None] = {"openai": "gpt-4.1", "anthropic": "claude-sonnet-4-5", "none": None}


def format_cache_table(summaries: Sequence[Any]) -> str:
    """The cache table: one line per arm, means per case (cost columns only when the summaries have a price)."""
    w = max([28, *(len(s.arm) for s in summaries)])
    priced = all("net_cost_usd" in s.extra for s in summaries)
    money = f" {'raw $':>9s} {'net $':>9s}" if priced else ""
    lines = [f"{'arm':{w}s} {'raw':>8s} {'cached':>8s} {'uncached':>8s} {'written':>8s} {'busts':>6s} "
             f"{'hit':>5s}{money}"]
    for s in summaries:
        e = s.extra
        cost = f" {e['raw_cost_usd']:9.5f} {e['net_cost_usd']:9.5f}" if priced else ""
        lines.append(f"{s.arm:{w}s} {e['raw_tokens']:8.0f} {e['cached_tokens']:8.0f} {e['uncached_tokens']:8.0f} "
                     f"{e['cache_write_tokens']:8.0f} {e['cache_busts']:6.1f} {e['cache_hit_rate']:5.2f}{cost}")
    return "\n".join(lines) + "\n"


def write_fraction_note(out: TextIO, arms: Any, settings: Any) -> None:
    """The line naming the peers whose absolute trigger runs at a fraction of the budget here (none: nothing)."""
    fractioned = [n for n in FRACTION_TRIGGERED_PEERS if n not in settings and any(a.startswith(n) for a in arms)]
    if fractioned:
        out.write(f"({', '.join(fractioned)}: trigger at {PEER_TRIGGER_FRACTION} of the budget, not the source's "
                  "absolute 100,000 tokens)\n")


def active_profile(cache_profile: str, price_model: str | None) -> str | None:
    """The cache profile the cost columns use: ``None`` (no cache table) for ``none`` without a price model."""
    return None if cache_profile == "none" and price_model is None else cache_profile


def resolve_price(cache_profile: str, price_model: str | None) -> tuple[Any, str | None, str]:
    """(the price or ``None``, the model priced, one line saying which price the costs use)."""
    model = price_model if price_model is not None else DEFAULT_PRICE_MODEL[cache_profile]
    source = "--price-model" if price_model is not None else f"the {cache_profile} profile's default"
    if not model:
        return None, None, "no price model: cost columns omitted (--price-model MODEL to add them)"
    try:
        price = price_for(model)
    except PriceFileError as exc:
        raise UsageError(f"{exc}; fix data/prices.toml") from None
    if price is None:
        return None, model, no_price_note(model)
    return price, model, f"costs priced as {price.describe()} ({source}); input only, no output tokens"


def stored_note(db: Path | None, counts: dict[str, int]) -> str:
    """The end of a command's last line: how many rows each table of ``db`` got, or that nothing was stored.

    ``counts`` maps each table to its rows, the measure's own table first.
    """
    kept = [(table, n) for table, n in counts.items() if n]
    if not kept:
        return "; nothing stored"
    (table, n), *rest = kept
    return f"; {n} rows stored in {db} (table {table})" + "".join(f" and {m} in table {t}" for t, m in rest)


def write_ending(out: TextIO, skipped: dict[str, str], wall: float, db: Path | None, counts: dict[str, int]) -> None:
    """A retention command's last lines: the arms it skipped (and why), then its time and what it stored."""
    if skipped:
        out.write("skipped (they need a model; this command calls none):\n")
        w = max(len(name) for name in skipped)
        out.write("".join(f"  {name:{w}s}  {reason}\n" for name, reason in skipped.items()))
    out.write(f"measured in {wall:.1f} s{stored_note(db, counts)}\n")
