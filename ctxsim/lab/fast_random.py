"""``random.Random`` with cheaper ``choice``, ``sample``, ``randint`` and ``randrange`` for the session generators.

A generated session makes tens of thousands of small draws (a name from a word list,
two words of an identifier, a count); most of their cost is the standard methods'
bookkeeping, not the draws. :class:`FastRandom` draws the same numbers in the same
order and returns the same values as ``random.Random`` seeded alike (Python 3.10 to
3.13 share these algorithms; ``tests/test_fast_random.py`` pins them): ``choice`` is
``seq[randbelow(len(seq))]`` without the extra call; ``sample`` of one item is that
too (the standard method draws ``randbelow(n)`` once for it whether it tracks picks in
a pool or a set), and of at most 5 items from a sequence of more than 21 (where the
standard method tracks the picks in a set) is that loop inlined; ``randint(a, b)`` and ``randrange`` of plain ints with step 1 are
``low + randbelow(width)`` inlined (the standard ``randint`` calls ``randrange``, which
checks and converts its arguments before the one draw). Every other call is the
standard method's. ``randbelow(n)`` is ``getrandbits(n.bit_length())`` until below
``n``: the standard ``_randbelow`` of a generator with ``getrandbits``, which a
subclass overriding only ``random`` would not use.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, TypeVar

_T = TypeVar("_T")
#: the standard ``sample`` tracks picks in a set when the population is longer than this
#: (21 for up to 5 picks: the size of a small set minus that of an empty list)
SET_SAMPLE_MIN = 22
SET_SAMPLE_MAX_K = 5


class FastRandom(random.Random):
    """``random.Random`` whose ``choice``, small ``sample``, ``randint`` and ``randrange`` cost less (module docstring)."""

    def choice(self, seq: Sequence[_T]) -> _T:
        n = len(seq)
        if not n:
            raise IndexError("Cannot choose from an empty sequence")
        bits, draw = n.bit_length(), self.getrandbits
        r = draw(bits)
        while r >= n:
            r = draw(bits)
        return seq[r]

    def sample(self, population: Sequence[_T], k: int, *, counts: Any = None) -> list[_T]:
        n = len(population) if isinstance(population, (list, tuple, str, range)) else -1
        if k == 1 and n > 0 and counts is None:
            return [self.choice(population)]  # one randbelow(n), as the standard method draws
        if counts is not None or not 0 <= k <= SET_SAMPLE_MAX_K or n < SET_SAMPLE_MIN:
            return super().sample(population, k, counts=counts)
        bits, draw = n.bit_length(), self.getrandbits
        selected: set[int] = set()
        result = []
        for _ in range(k):
            j = draw(bits)
            while j >= n or j in selected:
                j = draw(bits)
            selected.add(j)
            result.append(population[j])
        return result

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        if type(start) is int and type(step) is int and step == 1:
            if stop is None:
                low, width = 0, start
            elif type(stop) is int:
                low, width = start, stop - start
            else:
                width = 0
            if width > 0:
                bits, draw = width.bit_length(), self.getrandbits
                r = draw(bits)
                while r >= width:
                    r = draw(bits)
                return low + r
        return super().randrange(start, stop, step)

    def randint(self, a: int, b: int) -> int:
        if type(a) is int and type(b) is int and b >= a:
            width = b - a + 1
            bits, draw = width.bit_length(), self.getrandbits
            r = draw(bits)
            while r >= width:
                r = draw(bits)
            return a + r
        return super().randint(a, b)
