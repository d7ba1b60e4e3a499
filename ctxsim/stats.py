"""Aggregate statistics, rliable style: interquartile mean and stratified bootstrap CIs.

Scores are arranged as a (contexts × tasks) matrix — here seeds × scenarios — or,
for a policy trained several times, a (contexts × runs × tasks) array. The IQM is
the mean of the middle 50 % of all scores; its confidence interval comes from a
stratified bootstrap that resamples *within* each task (so every scenario keeps its
weight): the contexts, and independently the training runs (two levels, so five
runs that act alike do not pass for five times as many contexts); percentile
method.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all values (the mean of the middle 50 %)."""
    flat = np.sort(np.asarray(scores, dtype=float).ravel())
    n = flat.size
    if n == 0:
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
    (contexts × runs × tasks) array whose contexts and runs are resampled
    independently within each task; ``statistic`` gets each resample as a
    (contexts·runs × tasks) matrix. One run draws exactly what a matrix does."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim == 1:
        scores = scores[:, None]
    if scores.ndim == 2:
        scores = scores[:, None, :]
    contexts, runs, tasks = scores.shape
    rng = np.random.default_rng(seed)
    task = np.arange(tasks)
    stats = np.empty(reps)
    context_idx = rng.integers(0, contexts, size=(reps, contexts, tasks))
    run_idx = rng.integers(0, runs, size=(reps, runs, tasks)) if runs > 1 else np.zeros((reps, 1, tasks), dtype=int)
    for r in range(reps):
        sample = scores[context_idx[r][:, None, :], run_idx[r][None, :, :], task]
        stats[r] = statistic(sample.reshape(contexts * runs, tasks))
    alpha = (1 - confidence) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def paired_difference_ci(
    a: np.ndarray, b: np.ndarray, *, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of ``a − b`` (paired, contexts × tasks or contexts × runs × tasks) with
    its stratified bootstrap CI."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    lo, hi = stratified_bootstrap_ci(diff, lambda m: float(np.mean(m)), reps=reps, confidence=confidence, seed=seed)
    return float(np.mean(diff)), lo, hi


def normalized_score(reward: np.ndarray, random_reward: np.ndarray, oracle_reward: np.ndarray) -> np.ndarray:
    """``(R − R_random) / (R_oracle − R_random)``; 1 where the oracle gains nothing over random."""
    reward, lo, hi = (np.asarray(x, dtype=float) for x in (reward, random_reward, oracle_reward))
    span = hi - lo
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.abs(span) > 1e-9, (reward - lo) / span, 1.0)
    return out
