"""FastLorem returns what Faker's lorem provider returns, drawing the same random numbers:
the strings and the random state after every call are compared with a Faker seeded alike."""

from __future__ import annotations

import random

import pytest
from faker import Faker

from ctxsim.lab.fast_lorem import FastLorem, lorem_for
from ctxsim.lab.fast_random import FastRandom


def _pair(seed: int, locale: str = "en_US") -> tuple[Faker, FastLorem, Faker]:
    """(Faker, FastLorem of a second Faker, that Faker), both seeded with ``seed``."""
    faker, other = Faker(locale), Faker(locale)
    faker.seed_instance(seed)
    other.seed_instance(seed)
    lorem = lorem_for(other)
    assert isinstance(lorem, FastLorem)
    return faker, lorem, other


def _same_state(faker: Faker, other: Faker) -> None:
    assert other.random.getstate() == faker.random.getstate()


@pytest.mark.parametrize("seed", [0, 1, 42, 2**63 + 5])
@pytest.mark.parametrize("nb_words", [-1, 0, 1, 2, 3, 4, 6, 8, 10, 12, 14, 25])
@pytest.mark.parametrize("variable", [True, False])
def test_sentence_matches_faker(seed, nb_words, variable):
    faker, lorem, other = _pair(seed)
    for _ in range(40):
        assert lorem.sentence(nb_words=nb_words, variable_nb_words=variable) == \
            faker.sentence(nb_words=nb_words, variable_nb_words=variable)
        _same_state(faker, other)


@pytest.mark.parametrize("seed", [0, 3, 99, 2**40 + 1])
@pytest.mark.parametrize("nb_sentences", [-2, 0, 1, 2, 3, 4, 5, 6, 9])
@pytest.mark.parametrize("variable", [True, False])
def test_paragraph_matches_faker(seed, nb_sentences, variable):
    faker, lorem, other = _pair(seed)
    for _ in range(15):
        assert lorem.paragraph(nb_sentences=nb_sentences, variable_nb_sentences=variable) == \
            faker.paragraph(nb_sentences=nb_sentences, variable_nb_sentences=variable)
        _same_state(faker, other)


@pytest.mark.parametrize("seed", [0, 5, 2**63 + 17])
@pytest.mark.parametrize("nb", [-1, 0, 1, 2, 3, 7, 160])
@pytest.mark.parametrize("unique", [False, True])
def test_words_and_word_match_faker(seed, nb, unique):
    faker, lorem, other = _pair(seed)
    for _ in range(10):
        if unique and nb < 0:
            with pytest.raises(ValueError):
                faker.words(nb=nb, unique=True)
            with pytest.raises(ValueError):
                lorem.words(nb=nb, unique=True)
        else:
            assert lorem.words(nb=nb, unique=unique) == faker.words(nb=nb, unique=unique)
        assert lorem.word() == faker.word()
        _same_state(faker, other)


def test_too_many_unique_words_raise_as_faker_does():
    faker, lorem, other = _pair(0)
    size = len(faker.get_words_list())
    with pytest.raises(ValueError):
        faker.words(nb=size + 1, unique=True)
    with pytest.raises(ValueError):
        lorem.words(nb=size + 1, unique=True)
    _same_state(faker, other)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("locale", ["en_US", "de_DE"])
def test_a_mixed_stream_of_calls_matches_faker(seed, locale):
    """The generators' calls in a random order, interleaved with other Faker draws on the same random."""
    faker, lorem, other = _pair(seed, locale)
    driver = random.Random(seed + 1)
    for _ in range(300):
        call = driver.randrange(5)
        if call == 0:
            n = driver.randint(1, 14)
            assert lorem.sentence(nb_words=n) == faker.sentence(nb_words=n)
        elif call == 1:
            n = driver.randint(1, 6)
            assert lorem.paragraph(nb_sentences=n) == faker.paragraph(nb_sentences=n)
        elif call == 2:
            assert lorem.word() == faker.word()
        elif call == 3:
            n = driver.randint(0, 5)
            assert lorem.words(nb=n) == faker.words(nb=n)
        else:  # a draw of another provider between the lorem calls
            assert other.name() == faker.name()
    _same_state(faker, other)


def test_a_reseeded_faker_keeps_the_random_a_fast_lorem_draws_on():
    fake = Faker("en_US")
    fake.seed_instance(1)
    lorem = lorem_for(fake)
    fake.seed_instance(2)
    fresh = Faker("en_US")
    fresh.seed_instance(2)
    assert [lorem.sentence(nb_words=8) for _ in range(20)] == [fresh.sentence(nb_words=8) for _ in range(20)]


def test_a_fast_random_faker_draws_alike():
    faker, other = Faker("en_US"), Faker("en_US")
    faker.seed_instance(7)
    other.random = FastRandom()
    other.seed_instance(7)
    lorem = lorem_for(other)
    assert isinstance(lorem, FastLorem)
    assert [lorem.paragraph(nb_sentences=3) for _ in range(20)] == [faker.paragraph(nb_sentences=3) for _ in range(20)]
    assert other.random.getstate() == faker.random.getstate()


class _FloatOnlyRandom(random.Random):
    """A random whose randbelow is made from ``random()``: its draws differ from the plain one's."""

    def random(self) -> float:
        return super().random()


def test_fakers_that_draw_otherwise_keep_faker():
    # a multi-locale Faker answers each call from a locale it draws (the shared random
    # decides): whatever that random's state, so whichever locale answers the lookups
    from faker.generator import random as shared

    state = shared.getstate()
    try:
        for seed in range(40):
            several = Faker(["en_US", "de_DE"])
            Faker.seed(seed)
            assert lorem_for(several) is several
    finally:
        shared.setstate(state)
    odd = Faker("en_US")
    odd.random = _FloatOnlyRandom(3)
    assert lorem_for(odd) is odd
