"""Aggregate statistics, rliable style: interquartile mean and stratified bootstrap CIs.

Scores are arranged as a (contexts × tasks) matrix — here seeds × scenarios — or,
for a policy trained several times, a (contexts × runs × tasks) array. The IQM is
the mean of the middle 50 % of all scores (``scipy.stats.trim_mean(x, 0.25)`` of the
flattened scores, as rliable: ⌊n/4⌋ values cut from each end); its confidence interval comes from a
stratified bootstrap: the contexts are resampled *within* each task (so every
scenario keeps its weight), and the training runs once per resample, the same runs
for every task (a run is one policy on all scenarios; two levels, so five runs that
act alike do not pass for five times as many contexts); percentile method.

Beside them, Spearman's rank correlation and its bootstrap interval for two sets of
contexts that rank the same policies (:func:`rank_correlation_ci`: do generated
contexts and real sessions order the strategies alike?).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all values (the mean of the middle 50 %): the mean of
    the sorted values with ⌊n/4⌋ cut from each end, ``scipy.stats.trim_mean(x, 0.25)``
    of the flattened values (rliable's IQM), also when n is not a multiple of 4; nan
    for no values or when any value is nan."""
    flat = np.sort(np.asarray(scores, dtype=float).ravel())
    n = flat.size
    if n == 0 or np.isnan(flat[-1]):  # a nan sorts last: it is not a score above all others
        return float("nan")
    lo, hi = int(np.floor(n * 0.25)), int(np.ceil(n * 0.75))
    if hi <= lo:
        return float(flat.mean())
    return float(flat[lo:hi].mean())


def stratified_bootstrap_ci(
    scores: np.ndarray,
    statistic: Callable[[np.ndarray], float] = iqm,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile CI of ``statistic`` over a (contexts × tasks) matrix, or a
    (contexts × runs × tasks) array: contexts resampled within each task, runs once
    per resample for all tasks; ``statistic`` gets each resample as a
    (contexts·runs × tasks) matrix. One run draws exactly what a matrix does."""
    scores = _three_d(scores)
    contexts, runs, tasks = scores.shape
    rng = np.random.default_rng(seed)
    context_idx = rng.integers(0, contexts, size=(reps, contexts, tasks))
    run_idx = _run_draws(rng, runs, reps)
    stats = np.array([statistic(_resample(scores, context_idx[r], run_idx[r]).reshape(contexts * runs, tasks))
                      for r in range(reps)])
    return _percentiles(stats, confidence)


def paired_difference_ci(
    a: np.ndarray, b: np.ndarray, *, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of ``a`` minus mean of ``b`` with its stratified bootstrap CI, for two
    policies on the same contexts: (contexts × tasks) matrices, or (contexts × runs ×
    tasks) arrays whose run counts may differ. Each resample draws the contexts once
    for both sides (the pairing) and each side's runs on their own (two policies'
    training runs are unrelated)."""
    a, b = _three_d(a), _three_d(b)
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[2]:
        raise ValueError(f"paired scores need the same contexts and tasks, got shapes {a.shape} and {b.shape}")
    contexts, runs_a, tasks = a.shape
    rng = np.random.default_rng(seed)
    context_idx = rng.integers(0, contexts, size=(reps, contexts, tasks))
    idx_a, idx_b = _run_draws(rng, runs_a, reps), _run_draws(rng, b.shape[1], reps)
    stats = np.array([_resample(a, context_idx[r], idx_a[r]).mean() - _resample(b, context_idx[r], idx_b[r]).mean()
                      for r in range(reps)])
    lo, hi = _percentiles(stats, confidence)
    return float(a.mean() - b.mean()), lo, hi


def spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman's rank correlation of ``a`` and ``b`` along their last axis (average
    ranks for ties): a float for two vectors, one per row for two matrices; nan
    where one side's values are all tied."""
    ra, rb = (_average_ranks(np.asarray(x, dtype=float)) for x in (a, b))
    ra, rb = ra - ra.mean(axis=-1, keepdims=True), rb - rb.mean(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = (ra * rb).sum(axis=-1) / np.sqrt((ra**2).sum(axis=-1) * (rb**2).sum(axis=-1))
    return rho if rho.ndim else float(rho)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks (1 = smallest) along the last axis, tied values sharing their average rank."""
    return pd.DataFrame(values.reshape(-1, values.shape[-1])).rank(axis=1).to_numpy().reshape(values.shape)


def rank_correlation_ci(
    a: np.ndarray, b: np.ndarray, *, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """Spearman's correlation of the column means of ``a`` and of ``b`` — two (contexts ×
    policies) matrices of the same policies on two sets of contexts — with its bootstrap
    CI: each resample draws each side's contexts on their own (the sets are unrelated),
    one draw for all policies of a side (the policies stay paired), percentile method;
    resamples whose means are all tied on a side are left out (no interval, nan, when
    every one is)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"rank correlation needs two (contexts × policies) matrices of the same policies, got shapes {a.shape} and {b.shape}")
    rng = np.random.default_rng(seed)
    means_a = a[rng.integers(0, a.shape[0], size=(reps, a.shape[0]))].mean(axis=1)
    means_b = b[rng.integers(0, b.shape[0], size=(reps, b.shape[0]))].mean(axis=1)
    rho = spearman(means_a, means_b)
    rho = rho[~np.isnan(rho)]
    lo, hi = _percentiles(rho, confidence) if rho.size else (float("nan"), float("nan"))
    return spearman(a.mean(axis=0), b.mean(axis=0)), lo, hi


def _three_d(scores: np.ndarray) -> np.ndarray:
    """Scores as a (contexts × runs × tasks) array (a vector is one task, a matrix one run)."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim == 1:
        scores = scores[:, None]
    return scores[:, None, :] if scores.ndim == 2 else scores


def _run_draws(rng: np.random.Generator, runs: int, reps: int) -> np.ndarray:
    """(reps × runs) run indices, shared by every task of a resample (no draw for one run)."""
    return rng.integers(0, runs, size=(reps, runs)) if runs > 1 else np.zeros((reps, 1), dtype=int)


def _resample(scores: np.ndarray, contexts: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """scores[contexts[i, t], runs[j], t]: a (contexts × runs × tasks) resample."""
    return scores[contexts[:, None, :], runs[None, :, None], np.arange(scores.shape[2])]


def _percentiles(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1 - confidence) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def normalized_score(reward: np.ndarray, random_reward: np.ndarray, oracle_reward: np.ndarray) -> np.ndarray:
    """``(R − R_random) / (R_oracle − R_random)``; 1 where the oracle gains nothing over random."""
    reward, lo, hi = (np.asarray(x, dtype=float) for x in (reward, random_reward, oracle_reward))
    span = hi - lo
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.abs(span) > 1e-9, (reward - lo) / span, 1.0)
    return out
