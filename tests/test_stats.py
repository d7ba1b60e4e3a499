"""Rank statistics of ctxsim.lab.stats: Spearman's correlation and its bootstrap interval."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ctxsim.lab.stats import rank_correlation_ci, spearman


def test_spearman_is_the_rank_correlation_with_average_ranks_and_nan_for_a_constant():
    x = pd.Series([1.0, 2.0, 3.0, 4.0])
    assert spearman(x, x**3) == pytest.approx(1.0)
    assert spearman(x, -x) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [10, 30, 20]) == pytest.approx(0.5)
    # ties take their average rank: ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(np.corrcoef([1, 2.5, 2.5, 4], [1, 2, 3, 4])[0, 1])
    assert np.isnan(spearman(x, pd.Series([0.5] * 4)))
    # one value per row of two matrices
    rows = spearman(np.array([[1, 2, 3], [1, 2, 3]]), np.array([[1, 2, 3], [3, 2, 1]]))
    assert rows == pytest.approx([1.0, -1.0])


def test_rank_correlation_ci_holds_its_estimate_and_narrows_with_more_contexts():
    rng = np.random.default_rng(1)
    truth = np.linspace(-1, 1, 8)  # eight policies, one true ranking on both sides

    def side(contexts: int, noise: float) -> np.ndarray:
        return truth + rng.normal(0, noise, size=(contexts, truth.size))

    rho, lo, hi = rank_correlation_ci(side(12, 1.0), side(12, 1.0), seed=0)
    assert lo <= rho <= hi and -1 <= lo < hi <= 1
    wide = hi - lo
    rho, lo, hi = rank_correlation_ci(side(400, 1.0), side(400, 1.0), seed=0)
    assert lo <= rho <= hi and hi - lo < wide / 2 and lo > 0.8  # the same ranking, seen through less noise
    # unrelated rankings: the interval holds zero
    rho, lo, hi = rank_correlation_ci(side(40, 0.1), rng.normal(0, 1, size=(40, truth.size)), seed=0)
    assert lo < 0 < hi
    # the same draws give the same interval; the estimate is the rank correlation of the means
    a, b = side(10, 0.5), side(15, 0.5)
    assert rank_correlation_ci(a, b, seed=3) == rank_correlation_ci(a, b, seed=3)
    assert rank_correlation_ci(a, b)[0] == pytest.approx(spearman(a.mean(axis=0), b.mean(axis=0)))


def test_rank_correlation_ci_of_sides_that_never_rank_is_nan():
    rho, lo, hi = rank_correlation_ci(np.ones((4, 3)), np.arange(12.0).reshape(4, 3))
    assert np.isnan(rho) and np.isnan(lo) and np.isnan(hi)


def test_rank_correlation_ci_refuses_sides_of_other_policies():
    with pytest.raises(ValueError, match="same policies"):
        rank_correlation_ci(np.zeros((3, 4)), np.zeros((3, 5)))
