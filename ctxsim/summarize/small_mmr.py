"""Maximal marginal relevance over a few candidates in plain Python floats.

:meth:`~ctxsim.summarize.extractive.ExtractiveSummarizer._mmr` ranks a tier's
candidates with numpy; a tier of a handful (the rules, the items an earlier summary
carried) costs it a dozen array calls and a join for a few numbers. :func:`small_mmr`
ranks such a group with the same float64 operations in the same order, so the ranking
is the same to the bit: the scores divided by the top one, ``λ·rel − (1−λ)·(largest
similarity to those picked, 0 before any)``, first maximum first, and each similarity
summed as :func:`~ctxsim.relevance.embedder.joined_products` sums it (the products of
the first row's entries, in their stored order, with the second row's entry of the
same column, from 0.0). Only for finite scores (a NaN orders differently in numpy).
"""

from __future__ import annotations

import math

import numpy as np

from ..relevance import SparseRows

#: the largest group :func:`small_mmr` ranks (beyond it numpy's fixed cost pays)
SMALL_GROUP = 8


def small_mmr(members: np.ndarray, scores: np.ndarray, batch: SparseRows, sizes: np.ndarray, tokens: float,
              lam: float) -> list[int] | None:
    """The members (indices, ascending) by MMR until ``tokens`` are ranked, then the
    rest by score (ties: input order); None when a score is not finite."""
    s = scores[members].tolist()
    if not all(map(math.isfinite, s)):
        return None
    ids = members.tolist()
    m = len(ids)
    by_score = sorted(range(m), key=s.__getitem__, reverse=True)  # stable: ties keep input order
    if m < 2 or lam >= 1.0 or tokens <= 0:
        return [ids[k] for k in by_score]
    top = max(s)
    rel = [x / top for x in s] if top > 0 else s
    gain = [lam * r for r in rel]
    penalty = 1 - lam
    size_of = sizes[members].tolist()
    rows = _rows(batch, members)
    value = gain[:]
    picked: list[int] = []
    taken = [False] * m
    while len(picked) < m and tokens > 0:
        k = max(range(m), key=value.__getitem__)  # the first maximum; a picked one is -inf
        picked.append(ids[k])
        taken[k] = True
        tokens -= size_of[k]
        if len(picked) >= m - 1 or tokens <= 0:
            break  # the one left (if any) comes next either way
        cols, values, _ = rows[k]
        for j in range(m):
            entries = rows[j][2]
            total = 0.0
            for col, v in zip(cols, values):
                w = entries.get(col)
                if w is not None:
                    total += v * w
            value[j] = min(value[j], gain[j] - penalty * total)
        value[k] = -math.inf
    return picked + [ids[k] for k in by_score if not taken[k]]


def _rows(batch: SparseRows, members: np.ndarray) -> list[tuple[list[int], list[float], dict[int, float]]]:
    """(columns, values, column -> value) of each member's row, in stored order (float32
    values as exact Python floats)."""
    bounds = np.searchsorted(batch.rows, np.concatenate([members, members + 1])).tolist()
    m = len(members)
    out = []
    for a, b in zip(bounds[:m], bounds[m:]):
        cols, values = batch.cols[a:b].tolist(), batch.values[a:b].tolist()
        out.append((cols, values, dict(zip(cols, values))))
    return out
