"""Paired statistics for the comparison tables: bootstrap intervals, signed-rank tests, Pareto set.

Every comparison in the report is *paired*: a variant and its baseline answered the same cases, so
the unit of resampling is the case, and the test looks at per-case differences. Three statistics:

* **mean difference** (quality loss: ``mode − baseline`` per case; token savings: the per-case
  savings, which already is a paired quantity against the baseline's tokens);
* **recovery**, a ratio of means ``(mean(recovered) − mean(lossy)) / (mean(baseline) − mean(lossy))``;
  its interval resamples the (baseline, lossy, recovered) triples together;
* the **Pareto set** of (token savings, quality loss) points.

Intervals come from :func:`scipy.stats.bootstrap` (``paired=True``, percentile method, a fixed
seed, :data:`N_RESAMPLES` resamples), p-values from :func:`scipy.stats.wilcoxon` (two-sided
signed-rank test of the per-case differences against 0). The percentile method is used rather than
BCa because BCa needs a jackknife that is undefined for the tiny, tie-heavy samples a smoke test
produces, and a method that silently returns NaN on half the rows helps nobody.

When a statistic cannot be computed, the value is ``None`` and ``note`` says why (fewer than two
pairs, every difference zero, a zero denominator in some resamples); nothing raises.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

#: Fixed seed of every bootstrap in the report (stored in each row's ``stats_seed``).
DEFAULT_SEED = 20261201
#: Bootstrap resamples per interval.
N_RESAMPLES = 2000
CONFIDENCE = 0.95
BOOTSTRAP_METHOD = "percentile"


@dataclass(frozen=True)
class PairedResult:
    """One paired comparison: point estimate, 95 % interval, p-value, and how it was made."""

    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n_pairs: int
    method: str
    seed: int
    note: str | None = None

    def as_columns(self) -> dict[str, Any]:
        """The row columns the derived tables carry (``stats_method``, ``stats_seed``, ``stats_note``)."""
        row = asdict(self)
        return {"ci_low": row["ci_low"], "ci_high": row["ci_high"], "p_value": row["p_value"],
                "n_pairs": row["n_pairs"], "stats_method": row["method"], "stats_seed": row["seed"],
                "stats_note": row["note"]}


def _clean(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


def _method(statistic: str, test: str) -> str:
    return (f"{statistic}; paired bootstrap {BOOTSTRAP_METHOD} {int(CONFIDENCE * 100)}% CI, "
            f"{N_RESAMPLES} resamples; {test}")


def wilcoxon_p(differences: Sequence[float] | np.ndarray) -> tuple[float | None, str | None]:
    """Two-sided Wilcoxon signed-rank p-value of ``differences`` against 0, or ``(None, reason)``.

    Zero differences are dropped (``zero_method='wilcox'``), as the classic test does; so a sample
    whose differences are all zero has no test, and says so.
    """
    d = np.asarray(differences, dtype=float)
    if len(d) < 2:
        return None, f"{len(d)} pair(s): a paired test needs at least 2"
    if np.all(d == 0):
        return None, "every paired difference is 0: no test (no difference observed)"
    if np.count_nonzero(d) < 2:
        return None, "fewer than 2 non-zero paired differences: no test"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small-sample warnings: the note below says the sample size
        result = sps.wilcoxon(d, zero_method="wilcox", alternative="two-sided")
    return _clean(result.pvalue), None


def _bootstrap(data: tuple[np.ndarray, ...], statistic: Callable[..., Any], seed: int) -> tuple[float | None, float | None, str | None]:
    n = len(data[0])
    if n < 2:
        return None, None, f"{n} pair(s): an interval needs at least 2"
    if all(np.all(column == column[0]) for column in data):
        # Every case identical on every side: each resample gives the same statistic.
        value = _clean(statistic(*data, axis=-1))
        return value, value, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples surface as NaN, handled below
        result = sps.bootstrap(data, statistic, paired=True, vectorized=True, n_resamples=N_RESAMPLES,
                               confidence_level=CONFIDENCE, method=BOOTSTRAP_METHOD,
                               rng=np.random.default_rng(seed))
    low, high = _clean(result.confidence_interval.low), _clean(result.confidence_interval.high)
    if low is None or high is None:
        return None, None, "the statistic is undefined in some resamples (a zero denominator): no interval"
    return low, high, None


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def mean_with_ci(values: Sequence[float], *, seed: int = DEFAULT_SEED) -> PairedResult:
    """Mean of per-case paired values (e.g. per-case token savings) with its interval and a test vs 0."""
    x = np.asarray(values, dtype=float)
    estimate = _clean(float(np.mean(x))) if len(x) else None
    low, high, why_ci = _bootstrap((x,), _mean, seed)
    p, why_p = wilcoxon_p(x)
    return PairedResult(estimate, low, high, p, len(x),
                        _method("mean of per-case values", "Wilcoxon signed-rank vs 0, two-sided"), seed,
                        "; ".join(r for r in (why_ci, why_p) if r) or None)


def paired_difference(baseline: Sequence[float], other: Sequence[float], *, seed: int = DEFAULT_SEED) -> PairedResult:
    """Mean of ``other − baseline`` over paired cases, its interval, and the signed-rank p-value."""
    b = np.asarray(baseline, dtype=float)
    o = np.asarray(other, dtype=float)
    if b.shape != o.shape:
        raise ValueError(f"paired samples differ in length: {len(b)} vs {len(o)}")
    estimate = _clean(float(np.mean(o - b))) if len(b) else None

    def diff(bs: np.ndarray, os_: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(os_ - bs, axis=axis)

    low, high, why_ci = _bootstrap((b, o), diff, seed)
    p, why_p = wilcoxon_p(o - b)
    return PairedResult(estimate, low, high, p, len(b),
                        _method("mean paired difference", "Wilcoxon signed-rank, two-sided"), seed,
                        "; ".join(r for r in (why_ci, why_p) if r) or None)


def recovery_ratio(baseline: Sequence[float], lossy: Sequence[float], recovered: Sequence[float], *,
                   seed: int = DEFAULT_SEED) -> PairedResult:
    """``(mean(recovered) − mean(lossy)) / (mean(baseline) − mean(lossy))`` over paired triples.

    The interval resamples whole triples; the p-value tests recovered against lossy per case (is
    anything won back at all), since the ratio itself has no signed-rank analogue.
    """
    b, lo, r = (np.asarray(v, dtype=float) for v in (baseline, lossy, recovered))
    if not (b.shape == lo.shape == r.shape):
        raise ValueError("recovery triples differ in length")

    def ratio(bs: np.ndarray, ls: np.ndarray, rs: np.ndarray, axis: int = -1) -> np.ndarray:
        gap = np.mean(bs, axis=axis) - np.mean(ls, axis=axis)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(gap == 0, np.nan, (np.mean(rs, axis=axis) - np.mean(ls, axis=axis)) / gap)

    estimate = _clean(float(ratio(b, lo, r))) if len(b) else None
    notes = []
    if len(b) and estimate is None:
        notes.append("baseline and lossy means are equal: no loss to recover")
    low, high, why_ci = _bootstrap((b, lo, r), ratio, seed)
    p, why_p = wilcoxon_p(r - lo)
    notes += [r_ for r_ in (why_ci, why_p) if r_]
    return PairedResult(estimate, low, high, p, len(b),
                        _method("ratio of means", "Wilcoxon signed-rank of recovered vs lossy, two-sided"), seed,
                        "; ".join(notes) or None)


#: Coordinates closer than this are equal on the frontier (means over different case counts differ
#: in the last bits).
PARETO_TOLERANCE = 1e-9


def pareto_front(savings: Sequence[float | None], losses: Sequence[float | None]) -> list[bool]:
    """Which points are on the frontier: no other point saves at least as much and loses at most
    as much, being strictly better in one of the two. Points with a missing coordinate are off it.
    """
    def snap(v: float | None) -> float | None:
        if v is None or not math.isfinite(v):
            return None
        return round(v / PARETO_TOLERANCE) * PARETO_TOLERANCE

    points = [(snap(s), snap(q)) for s, q in zip(savings, losses, strict=True)]
    flags = []
    for i, (s, q) in enumerate(points):
        if s is None or q is None:
            flags.append(False)
            continue
        dominated = any(
            j != i and s2 is not None and q2 is not None and s2 >= s and q2 <= q and (s2 > s or q2 < q)
            for j, (s2, q2) in enumerate(points)
        )
        flags.append(not dominated)
    return flags
