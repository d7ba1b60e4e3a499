"""Faker's lorem ``sentence``, ``paragraph``, ``words`` and ``word`` without its per-call bookkeeping.

A generated session asks Faker for tens of thousands of short sentences (comments,
docstrings, error messages); most of the cost is Faker's layers (the proxy, a copy of
the word list per call, ``random_elements``' checks, ``choices_distribution``), not
the draws. :class:`FastLorem` makes the same draws on the same ``random.Random`` (the
Faker generator's own, ``generator.random``) in the same order and returns the same
strings as the lorem provider of Faker 40.63.0 (the installed version; the algorithm
has been the same for years) — ``tests/test_fast_lorem.py`` pins the equivalence,
random state after each call included:

- a varied count (``sentence``'s words, ``paragraph``'s sentences) is Faker's
  ``randomize_nb_elements(n, min=1)``: ``n * randint(60, 140) / 100`` truncated, at
  least 1 — one draw of ``getrandbits(7)`` per try until it is below 81;
- one word is ``random.choice`` of the word list (``getrandbits`` until in range);
  several are ``random.choices`` without weights (one ``random()`` each, scaled by the
  list's length and truncated) — Faker takes the first path for exactly one word;
- a sentence is its words, the first in ``str.title`` case, joined by a space, with a
  period; a paragraph is its sentences (6 words each before the variation) joined by
  a space; unique words are ``random.sample`` of the word list.

:func:`lorem_for` gives a :class:`FastLorem` only for a single-locale Faker whose lorem
provider keeps the standard methods and whose random is a plain ``random.Random`` (or
:class:`~ctxsim.lab.fast_random.FastRandom`, which draws alike); otherwise it returns
the Faker itself, which has the same methods.
"""

from __future__ import annotations

import random
from typing import Any

from faker.providers import BaseProvider
from faker.providers.lorem import Provider as LoremProvider

from .fast_random import FastRandom

#: the lorem and base provider methods this module stands in for: a locale overriding
#: any of them keeps its text on Faker
_MIRRORED = ("sentence", "sentences", "paragraph", "words", "word", "get_words_list")
_BASE_MIRRORED = ("randomize_nb_elements", "random_elements", "random_choices", "random_sample")
#: random classes whose choice, choices and sample draw as ``random.Random``'s do
_PLAIN_RANDOMS = (random.Random, FastRandom)
#: ``randint(60, 140)`` is 60 + a draw below 81 (81 needs 7 bits)
_LOW, _SPAN, _SPAN_BITS = 60, 81, 7


class FastLorem:
    """A lorem provider's ``sentence``, ``paragraph``, ``words`` and ``word`` drawing on the
    random its Faker has when this is made (module docstring). A Faker keeps that object
    for life once seeded: ``seed_instance`` reseeds it in place."""

    __slots__ = ("_rng", "_words", "_count", "_bits")

    def __init__(self, provider: LoremProvider):
        self._rng: random.Random = provider.generator.random
        self._words: tuple[str, ...] = tuple(provider.word_list)
        self._count = len(self._words)
        self._bits = self._count.bit_length()

    def _varied(self, number: int) -> int:
        """``randomize_nb_elements(number, min=1)``: number x (60..140)%, truncated, at least 1."""
        draw = self._rng.getrandbits
        r = draw(_SPAN_BITS)
        while r >= _SPAN:
            r = draw(_SPAN_BITS)
        return max(1, int(number * (_LOW + r) / 100))

    def _draw(self, nb: int) -> list[str]:
        """``nb`` words with replacement: one by ``choice``, more (or none) by ``choices``."""
        words = self._words
        if nb == 1:
            n, bits, draw = self._count, self._bits, self._rng.getrandbits
            r = draw(bits)
            while r >= n:
                r = draw(bits)
            return [words[r]]
        n, draw = float(self._count), self._rng.random
        return [words[int(draw() * n)] for _ in range(nb)]

    def words(self, nb: int = 3, unique: bool = False) -> list[str]:
        if not unique:
            return self._draw(nb)
        if nb > self._count:
            raise ValueError("Sample length cannot be longer than the number of unique elements to pick from.")
        return self._rng.sample(self._words, nb)

    def word(self) -> str:
        return self._draw(1)[0]

    def sentence(self, nb_words: int = 6, variable_nb_words: bool = True) -> str:
        if nb_words <= 0:
            return ""
        words = self._draw(self._varied(nb_words) if variable_nb_words else nb_words)
        words[0] = words[0].title()
        return " ".join(words) + "."

    def paragraph(self, nb_sentences: int = 3, variable_nb_sentences: bool = True) -> str:
        if nb_sentences <= 0:
            return ""
        count = self._varied(nb_sentences) if variable_nb_sentences else nb_sentences
        sentence = self.sentence
        return " ".join([sentence() for _ in range(count)])


def lorem_for(fake: Any) -> Any:
    """A :class:`FastLorem` for ``fake`` (a seeded Faker) when it draws its lorem text the
    standard way, else ``fake`` itself (module docstring)."""
    if len(getattr(fake, "factories", ())) > 1:
        return fake  # several locales: Faker picks one per call (with draws of its own)
    provider = getattr(getattr(fake, "sentence", None), "__self__", None)
    if not isinstance(provider, LoremProvider) or type(provider.generator.random) not in _PLAIN_RANDOMS:
        return fake
    if any(getattr(type(provider), name) is not getattr(LoremProvider, name) for name in _MIRRORED) or any(
            getattr(type(provider), name) is not getattr(BaseProvider, name) for name in _BASE_MIRRORED):
        return fake
    if provider.word_connector != " " or provider.sentence_punctuation != ".":
        return fake
    if any(getattr(getattr(fake, name), "__self__", None) is not provider for name in ("paragraph", "words", "word")):
        return fake  # another provider answers one of them
    return FastLorem(provider)
