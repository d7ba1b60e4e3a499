"""FastRandom draws what random.Random seeded alike draws, call after call."""

from __future__ import annotations

import random

import pytest

from ctxsim.lab.fast_random import FastRandom

WORDS = [f"word{i}" for i in range(130)]


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**63 + 17])
def test_choice_and_sample_match_the_standard_methods_in_a_mixed_stream(seed):
    plain, fast = random.Random(seed), FastRandom(seed)
    driver = random.Random(seed + 1)  # which call to make next, and on what
    populations = [WORDS, tuple(WORDS[:23]), WORDS[:22], WORDS[:21], WORDS[:3], "abcdefghijklmnopqrstuvwxyz",
                   range(1000), [1, 2, 2, 3], WORDS[:1]]
    for _ in range(3000):
        population = driver.choice(populations)
        call = driver.randrange(4)
        if call == 0:
            assert fast.choice(population) == plain.choice(population)
        elif call == 1:
            k = driver.randint(0, min(8, len(population)))
            assert fast.sample(population, k) == plain.sample(population, k)
        elif call == 2:
            assert fast.randint(1, 500) == plain.randint(1, 500)
        else:
            assert fast.random() == plain.random()
    assert fast.getstate() == plain.getstate()


def test_the_standard_errors_and_fallbacks():
    fast = FastRandom(3)
    with pytest.raises(IndexError):
        fast.choice([])
    with pytest.raises(ValueError):
        fast.sample(WORDS[:3], 4)
    with pytest.raises(TypeError):
        fast.sample({1, 2, 3}, 2)
    plain = random.Random(3)
    assert fast.sample(WORDS, 3, counts=[1] * len(WORDS)) == plain.sample(WORDS, 3, counts=[1] * len(WORDS))
