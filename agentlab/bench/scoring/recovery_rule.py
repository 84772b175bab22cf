"""When a recovery ratio means something: only a loss can be recovered.

``recovery = (recovered − lossy) / (baseline − lossy)``. Over a negative gap — the lossy run above
the baseline — the ratio has no meaning (LoCoMo bleu1 gave 0.57 with nothing lost); over a gap near
zero it is noise (300 %). So a recovery is reported only when the lossy run scores below the
baseline by more than :data:`RECOVERY_RELATIVE_GAP` of the baseline's mean (and more than
:data:`RECOVERY_GAP`); otherwise it is n/a, with the reason. The league
(:mod:`agentlab.bench.league.play`) and the report's ``recovery`` table
(:data:`agentlab.bench.scoring.queries.RECOVERY_TABLE` and its interval) apply this one rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["RECOVERY_GAP", "RECOVERY_RELATIVE_GAP", "gap_is_a_loss_sql", "no_loss_reason", "recovery_columns"]

#: ``mean(baseline) − mean(lossy)`` at most this, or at most :data:`RECOVERY_RELATIVE_GAP` of the
#: baseline's mean: no loss to recover, recovery is n/a.
RECOVERY_GAP = 1e-9
RECOVERY_RELATIVE_GAP = 0.01


def no_loss_reason(base_mean: float, lossy_mean: float, partner: str) -> str | None:
    """Why there is no recovery to report (``None`` when the lossy run lost enough to recover)."""
    gap = base_mean - lossy_mean
    if gap > max(RECOVERY_GAP, RECOVERY_RELATIVE_GAP * abs(base_mean)):
        return None
    if gap < 0:
        return f"recovery n/a: {partner} scores {-gap:.2g} above the baseline (no loss to recover)"
    return (f"recovery n/a: baseline and {partner} means differ by {gap:.2g}, within "
            f"{RECOVERY_RELATIVE_GAP:.0%} of the baseline's (no loss to recover)")


def gap_is_a_loss_sql(baseline_mean: str, lossy_mean: str) -> str:
    """The same test as :func:`no_loss_reason` as a SQL condition over two mean expressions."""
    return (f"(({baseline_mean}) - ({lossy_mean}) > "
            f"greatest({RECOVERY_GAP!r}, {RECOVERY_RELATIVE_GAP!r} * abs({baseline_mean})))")


def recovery_columns(baseline: Sequence[float], lossy: Sequence[float], recovered: Sequence[float],
                     partner: str) -> dict[str, Any]:
    """:func:`agentlab.bench.scoring.stats.recovery_ratio`'s columns, or its n/a with the reason as ``stats_note``."""
    from agentlab.bench.scoring.stats import recovery_ratio

    result = recovery_ratio(baseline, lossy, recovered).as_columns()
    if baseline:
        why = no_loss_reason(sum(baseline) / len(baseline), sum(lossy) / len(lossy), partner)
        if why is not None:
            result.update(ci_low=None, ci_high=None, stats_note=why)
    return result
