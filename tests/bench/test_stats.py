"""Intervals and p-values against values computed independently of :mod:`agentlab.bench.scoring.stats`.

The bootstrap is checked against a direct numpy resampling of case indices with the same seed (a
paired bootstrap draws whole cases); the Wilcoxon p-values against the exact null distribution
counted by hand (all 2^n sign patterns are equally likely under the null).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from agentlab.bench.scoring import stats

BASELINE = np.array([0.2, 0.5, 0.1, 0.9, 0.4, 0.3, 0.7, 0.6, 0.2, 0.8])
MODE = np.array([0.1, 0.5, 0.3, 0.6, 0.2, 0.3, 0.4, 0.7, 0.0, 0.5])


def numpy_percentile_ci(statistic, columns: tuple[np.ndarray, ...], seed: int) -> tuple[float, float]:
    """Resample case indices with replacement, N_RESAMPLES times, and take the 2.5 / 97.5 percentiles."""
    n = len(columns[0])
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, n, (stats.N_RESAMPLES, n))
    values = np.array([statistic(*(c[i] for c in columns)) for i in indices])
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def exact_wilcoxon_p(differences: list[float]) -> float:
    """Two-sided exact signed-rank p-value by enumerating every sign pattern (no ties, no zeros)."""
    ranks = np.argsort(np.argsort(np.abs(differences))) + 1
    w_plus = sum(r for r, d in zip(ranks, differences, strict=True) if d > 0)
    total = ranks.sum()
    observed = min(w_plus, total - w_plus)
    extreme = 0
    for signs in itertools.product([0, 1], repeat=len(ranks)):
        w = sum(r for r, s in zip(ranks, signs, strict=True) if s)
        if min(w, total - w) <= observed:
            extreme += 1
    return extreme / 2 ** len(ranks)


def test_paired_difference_interval_matches_a_numpy_resampling_loop() -> None:
    result = stats.paired_difference(BASELINE, MODE, seed=7)
    low, high = numpy_percentile_ci(lambda b, m: np.mean(m - b), (BASELINE, MODE), seed=7)
    assert result.estimate == pytest.approx(np.mean(MODE - BASELINE))
    assert (result.ci_low, result.ci_high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))
    assert result.ci_low < result.estimate < result.ci_high
    assert result.n_pairs == 10 and result.seed == 7 and "2000 resamples" in result.method
    # A different seed draws different resamples (the seed is really used).
    other = stats.paired_difference(BASELINE, MODE, seed=8)
    assert (other.ci_low, other.ci_high) != (result.ci_low, result.ci_high)


def test_mean_interval_and_recovery_ratio_interval_match_numpy() -> None:
    savings = np.array([0.9, 0.75, 0.8, 0.95, 0.6, 0.7])
    result = stats.mean_with_ci(savings, seed=3)
    assert (result.ci_low, result.ci_high) == tuple(pytest.approx(v, abs=1e-12)
                                                    for v in numpy_percentile_ci(np.mean, (savings,), seed=3))
    base = np.array([1.0, 0.8, 0.9, 0.7, 1.0, 0.6])
    lossy = np.array([0.2, 0.1, 0.4, 0.3, 0.0, 0.2])
    recovered = np.array([0.6, 0.5, 0.4, 0.6, 0.7, 0.3])
    ratio = stats.recovery_ratio(base, lossy, recovered, seed=11)
    expected = (recovered.mean() - lossy.mean()) / (base.mean() - lossy.mean())
    assert ratio.estimate == pytest.approx(expected)
    low, high = numpy_percentile_ci(lambda b, lo, r: (r.mean() - lo.mean()) / (b.mean() - lo.mean()),
                                    (base, lossy, recovered), seed=11)
    assert (ratio.ci_low, ratio.ci_high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))


def test_wilcoxon_p_values_by_hand() -> None:
    # All five differences positive: only 2 of the 32 sign patterns are as extreme -> 2/32.
    assert stats.paired_difference([0] * 5, [1, 2, 3, 4, 5]).p_value == pytest.approx(0.0625)
    # One negative of rank 2: W- = 2; patterns with min(W+, W-) <= 2: {}, {1}, {2} and mirrors -> 6/32.
    assert stats.wilcoxon_p([1, -2, 3, 4, 5])[0] == pytest.approx(6 / 32)
    # A tie-free sample of seven against the full enumeration of its 128 sign patterns.
    tie_free = [0.11, -0.23, 0.35, 0.42, -0.05, 0.61, 0.77]
    assert stats.wilcoxon_p(tie_free)[0] == pytest.approx(exact_wilcoxon_p(tie_free))


def test_degenerate_samples_give_null_with_a_reason_not_an_error() -> None:
    single = stats.paired_difference([0.5], [0.2])
    assert single.ci_low is None and single.p_value is None and "at least 2" in (single.note or "")
    equal = stats.paired_difference([0.1, 0.4, 0.9], [0.1, 0.4, 0.9])
    assert equal.estimate == 0.0 and equal.p_value is None and "every paired difference is 0" in (equal.note or "")
    assert (equal.ci_low, equal.ci_high) == (0.0, 0.0)
    empty = stats.paired_difference([], [])
    assert empty.estimate is None and empty.n_pairs == 0
    no_gap = stats.recovery_ratio([0.5, 0.5], [0.5, 0.5], [0.7, 0.9])
    assert no_gap.estimate is None and "no loss to recover" in (no_gap.note or "")
    with pytest.raises(ValueError):
        stats.paired_difference([1, 2], [1])


def test_pareto_front() -> None:
    savings = [0.9, 0.8, 0.5, 0.95, None, 0.8]
    losses = [0.2, 0.1, 0.3, 0.25, 0.0, 0.1 + 1e-15]
    # 0.5/0.3 is dominated by 0.8/0.1; the missing point is off; two equal points both stay.
    assert stats.pareto_front(savings, losses) == [True, True, False, True, False, True]
