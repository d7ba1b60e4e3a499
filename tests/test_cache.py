"""The bounded LRU map every process cache of ctxsim uses."""

import random

import pytest

from ctxsim.cache import LRUCache
from ctxsim.errors import ConfigError


def test_lru_cache_evicts_least_recently_used():
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    with pytest.raises(ConfigError, match="maxsize"):
        LRUCache(0)


def test_get_many_looks_up_in_order_refreshes_and_counts_each_key():
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get_many(["b", "x", "a"]) == [2, None, 1]
    assert (cache.hits, cache.misses) == (2, 1)
    cache.put("c", 3)  # "a" was refreshed last, so "b" goes
    assert cache.get_many(["a", "b", "c"]) == [1, None, 3]


def test_get_many_takes_any_iterable_of_keys_once():
    cache: LRUCache[str, int] = LRUCache(3)
    for key, value in (("a", 1), ("b", 2), ("c", 3)):
        cache.put(key, value)
    assert cache.get_many(key for key in ("a", "zz", "b")) == [1, None, 2]
    assert (cache.hits, cache.misses) == (2, 1)
    cache.put("d", 4)  # "c" is the least recently used now
    assert cache.get("c") is None and cache.get("a") == 1


def test_get_many_holds_arrays_and_counts_them():
    import numpy as np

    cache: LRUCache[str, np.ndarray] = LRUCache(4)
    cache.put("a", np.zeros(3))
    cache.put("b", np.ones(2))
    found = cache.get_many(["b", "x", "a"])
    assert found[1] is None and found[0].tolist() == [1.0, 1.0] and found[2].tolist() == [0.0, 0.0, 0.0]
    assert (cache.hits, cache.misses) == (2, 1)


def test_a_weight_bound_evicts_the_least_recently_used_until_the_rest_fit():
    cache: LRUCache[str, bytes] = LRUCache(10, weigh=len, max_weight=10)
    cache.put("a", b"xxxx")
    cache.put("b", b"xxxx")
    assert cache.get("a") == b"xxxx" and cache.weight == 8
    cache.put("c", b"xxxx")  # 12 > 10: "b" is the least recently used
    assert cache.get("b") is None and cache.get("a") == b"xxxx" and cache.get("c") == b"xxxx"
    assert cache.weight == 8
    cache.put("a", b"x")  # a replaced value is weighed anew
    assert cache.weight == 5
    cache.put("big", b"x" * 50)  # heavier than the bound alone: the newest entry stays, the rest go
    assert len(cache) == 1 and cache.get("big") is not None and cache.weight == 50
    cache.clear()
    assert len(cache) == 0 and cache.weight == 0


def test_a_weight_bound_needs_its_weigh_function_and_a_positive_bound():
    for kwargs in ({"weigh": len}, {"max_weight": 10}, {"weigh": len, "max_weight": 0}):
        with pytest.raises(ConfigError, match="max_weight"):
            LRUCache(4, **kwargs)


def test_put_many_leaves_what_puts_one_by_one_leave():
    """A batch of puts (repeated keys, values of new weights) evicts as the puts one by one do."""
    rng = random.Random(7)
    for bounds in ({"maxsize": 4}, {"maxsize": 6, "weigh": len, "max_weight": 9}):
        one, many = LRUCache(**bounds), LRUCache(**bounds)
        for _ in range(60):
            items = [(rng.choice("abcdefgh"), "x" * rng.randint(1, 5)) for _ in range(rng.randint(0, 7))]
            for key, value in items:
                one.put(key, value)
            many.put_many(iter(items))
            assert list(many._data.items()) == list(one._data.items())
            assert many.weight == one.weight
