"""ctxsim.lab.stats: the IQM, the stratified and paired bootstrap intervals, Spearman's correlation and its interval."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ctxsim.lab.stats import iqm, paired_difference_ci, rank_correlation_ci, spearman, stratified_bootstrap_ci


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


def test_iqm_is_scipys_trim_mean_of_a_quarter_also_when_the_count_is_not_a_multiple_of_four():
    from scipy.stats import trim_mean

    rng = np.random.default_rng(0)
    for n in range(1, 41):
        x = rng.normal(size=n)
        assert iqm(x) == pytest.approx(trim_mean(x, 0.25), abs=1e-12), n
    assert iqm([1.0, 2.0, 3.0, 4.0, 100.0]) == pytest.approx(3.0)  # one value cut from each end of five
    assert iqm([5.0, 1.0, 100.0, 2.0, 3.0, -50.0, 4.0]) == pytest.approx(3.0)  # 7: one cut from each end
    m = rng.normal(size=(10, 5, 7))
    assert iqm(m) == pytest.approx(trim_mean(m.ravel(), 0.25), abs=1e-12)  # all values, flattened


def test_iqm_of_values_with_a_nan_is_nan_not_the_nan_as_the_largest_value():
    assert np.isnan(iqm([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, float("nan")]))
    assert np.isnan(iqm([]))


def test_stratified_bootstrap_draws_contexts_within_each_task_and_takes_the_percentiles():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(10, 7)) + np.arange(7) * 10  # every task its own range of values
    seen = []

    def statistic(m):
        seen.append(m.copy())
        return float(m.mean())

    lo, hi = stratified_bootstrap_ci(scores, statistic, reps=300, seed=5)
    assert all(m.shape == (10, 7) and all(np.isin(m[:, t], scores[:, t]).all() for t in range(7)) for m in seen)
    idx = np.random.default_rng(5).integers(0, 10, size=(300, 10, 7))  # one draw per task
    means = [scores[idx[r], np.arange(7)].mean() for r in range(300)]
    assert (lo, hi) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])), abs=1e-12)
    assert stratified_bootstrap_ci(scores, iqm) == stratified_bootstrap_ci(scores, iqm)  # seed 0 by default
    assert stratified_bootstrap_ci(scores[:, None, :], iqm) == stratified_bootstrap_ci(scores, iqm)  # one run


def test_bootstrap_runs_that_act_alike_do_not_narrow_the_interval():
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(10, 4))
    alike = np.repeat(scores[:, None, :], 5, axis=1)  # five runs with the same scores
    mean = lambda m: float(m.mean())  # noqa: E731
    assert stratified_bootstrap_ci(alike, mean) == pytest.approx(stratified_bootstrap_ci(scores, mean), abs=1e-12)
    other = rng.normal(size=(10, 4))
    assert paired_difference_ci(alike, other) == pytest.approx(paired_difference_ci(scores, other), abs=1e-12)


def test_paired_difference_draws_the_contexts_once_for_both_sides():
    rng = np.random.default_rng(3)
    base = rng.normal(0, 5, size=(10, 7))  # a large context effect both policies share
    mean, lo, hi = paired_difference_ci(base + 0.3, base)
    assert (mean, lo, hi) == pytest.approx((0.3, 0.3, 0.3), abs=1e-9)  # unpaired draws would spread it by ~±2
    runs = base[:, None, :] + rng.normal(0, 1, size=(1, 4, 1))  # four runs, each shifted on every context
    mean, lo, hi = paired_difference_ci(runs, base[:, None, :])
    assert mean == pytest.approx(runs.mean() - base.mean()) and lo < mean < hi  # the runs' spread is in the interval
    with pytest.raises(ValueError, match="same contexts and tasks"):
        paired_difference_ci(base, base[:9])
