"""Soak (slow, outside ``make test``): a million env steps with random masked actions
on the default spec with its context pool, as training runs it.

Resident memory must not grow: less than 50 MB over the second half of the run,
and over everything after the first tenth. The pool is loaded (or built, the
first time) before the first reading.
Steps/s over time are printed (``pytest -s``). ``CTXSIM_SOAK_STEPS`` shortens the
run; ``python -m benchmarks --only soak --steps N`` measures the same thing.
"""

from __future__ import annotations

import os

import pytest

from benchmarks.environment import rate, run_soak
from benchmarks.targets import SOAK_RSS_MB

STEPS = int(os.environ.get("CTXSIM_SOAK_STEPS", "1000000"))


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_soak_memory_stays_flat():
    soak = run_soak(STEPS, config={"pool": True})
    marks = soak.marks
    assert marks[-1].steps == STEPS and len(marks) >= 10
    for before, after in zip(marks, marks[1:]):
        print(f"steps {after.steps:>9,}  {after.seconds:>8.0f} s  {rate(before, after):>8.1f} steps/s  RSS {after.rss:7.0f} MB")
    print(f"RSS growth: second half {soak.growth_mb:+.1f} MB, after the first tenth {soak.warm_growth_mb:+.1f} MB, "
          f"from the first step {soak.total_growth_mb:+.1f} MB")
    assert all(rate(a, b) > 0 for a, b in zip(marks, marks[1:]))
    assert soak.growth_mb < SOAK_RSS_MB and soak.warm_growth_mb < SOAK_RSS_MB
