"""FastRandom draws what random.Random seeded alike draws, call after call (the random state compared too)."""

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


#: (args of randint) and (args of randrange): small, wide and huge spans, negative bounds, one value
RANDINT_ARGS = [(0, 0), (1, 1), (0, 1), (2, 9), (60, 140), (0, 9999), (-50, -3), (-7, 7), (5, 2**40), (0, 2**70)]
RANDRANGE_ARGS = [(1,), (2,), (6,), (10,), (81,), (2**64,), (0, 1), (3, 17), (-10, -2), (-3, 3), (0, 2**70),
                  (0, 10, 1), (0, 10, 3), (10, 0, -2), (5, 100, 7)]


@pytest.mark.parametrize("seed", [0, 7, 2**63 + 1])
def test_randint_and_randrange_match_the_standard_methods_in_a_mixed_stream(seed):
    plain, fast = random.Random(seed), FastRandom(seed)
    driver = random.Random(seed + 2)
    for _ in range(4000):
        call = driver.randrange(4)
        if call == 0:
            args = driver.choice(RANDINT_ARGS)
            assert fast.randint(*args) == plain.randint(*args)
        elif call == 1:
            args = driver.choice(RANDRANGE_ARGS)
            assert fast.randrange(*args) == plain.randrange(*args)
        elif call == 2:
            assert fast.choice(WORDS) == plain.choice(WORDS)
        else:
            assert fast.random() == plain.random()
        assert fast.getstate() == plain.getstate()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("call", [
    lambda r: r.randint(3, 2), lambda r: r.randint(0, -1), lambda r: r.randrange(0), lambda r: r.randrange(-4),
    lambda r: r.randrange(5, 5), lambda r: r.randrange(6, 2), lambda r: r.randrange(0, 10, 0), lambda r: r.randrange(1.5),
    lambda r: r.randint(0, 2.5), lambda r: r.randrange(3, step=2), lambda r: r.randrange("3"),
])
def test_randint_and_randrange_raise_as_the_standard_methods_do(call):
    plain, fast = random.Random(1), FastRandom(1)
    with pytest.raises(Exception) as standard:
        call(plain)
    with pytest.raises(type(standard.value)):
        call(fast)
    assert fast.getstate() == plain.getstate()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_non_int_arguments_take_the_standard_path():
    plain, fast = random.Random(5), FastRandom(5)
    for args in [(True, 9), (2.0, 7.0), (0, 10.0)]:
        assert fast.randint(*args) == plain.randint(*args)
        assert fast.randrange(*args) == plain.randrange(*args)
    assert fast.randrange(0, 10, 1.0) == plain.randrange(0, 10, 1.0)
    assert fast.getstate() == plain.getstate()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 21, 22, 23, 40, 130])
def test_a_sample_of_one_draws_as_a_choice(size):
    """The standard sample of one item draws randbelow(n) once (pool or set alike): FastRandom
    takes it as a choice, and FakeRepo's one-word identifiers are choices on any random."""
    for population in (WORDS[:size], tuple(WORDS[:size]), "abcdefghijklmnopqrstuvwxyz"[:size], range(size)):
        plain, fast, chooser = random.Random(size), FastRandom(size), random.Random(size)
        for _ in range(200):
            expected = plain.sample(population, 1)
            assert fast.sample(population, 1) == expected == [chooser.choice(population)]
        assert fast.getstate() == plain.getstate() == chooser.getstate()
    with pytest.raises(ValueError):
        FastRandom(0).sample([], 1)
