"""A bounded, thread-safe least-recently-used map (the process caches of ctxsim), and
a dict memo that starts over when full (the per-piece tables of hot loops).

Embedding rows (:mod:`ctxsim.relevance`), summaries (:mod:`ctxsim.summarize`), and
the contexts, settings and conversations the environments and the long-horizon
session keep between steps all live in an :class:`LRUCache`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from .errors import ConfigError, describe_value

__all__ = ["LRUCache", "Memo"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """At most ``maxsize`` entries; a lookup refreshes its entry, an insertion past
    the bound evicts the least recently used one. ``hits`` and ``misses`` count
    lookups. ``None`` is never stored (it means "missing").

    With ``weigh`` (a value's size, e.g. its bytes) and ``max_weight``, the entries'
    total weight is bounded too: an insertion evicts the least recently used entries
    until the rest weigh at most ``max_weight`` (the newest entry always stays)."""

    def __init__(self, maxsize: int, *, weigh: Callable[[V], float] | None = None, max_weight: float | None = None):
        if maxsize < 1:
            raise ConfigError(f"cache maxsize must be >= 1, got {describe_value(maxsize)}", key="maxsize")
        if (weigh is None) != (max_weight is None) or (max_weight is not None and max_weight <= 0):
            raise ConfigError(f"give weigh and a positive max_weight together, got max_weight={describe_value(max_weight)}",
                              key="max_weight")
        self.maxsize = maxsize
        self.max_weight = max_weight
        self._weigh = weigh
        self._weights: dict[K, float] = {}
        self.weight = 0.0
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._get(key)

    def get_many(self, keys: Iterable[K]) -> list[V | None]:
        """:meth:`get` of each key in order, under one acquisition of the lock."""
        keys = list(keys)
        with self._lock:
            data, refresh = self._data, self._data.move_to_end
            found = [data.get(key) for key in keys]
            hits = 0
            for key, value in zip(keys, found):
                if value is not None:  # an identity test: a value may be an array, which == would compare
                    refresh(key)
                    hits += 1
            self.hits += hits
            self.misses += len(found) - hits
            return found

    def _get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: K, value: V) -> None:
        self.put_many(((key, value),))

    def put_many(self, items: Iterable[tuple[K, V]]) -> None:
        """:meth:`put` of each (key, value) in order, under one acquisition of the lock."""
        with self._lock:
            data, refresh = self._data, self._data.move_to_end
            for key, value in items:
                if key in data:
                    refresh(key)
                data[key] = value  # a new key goes last: the most recent
                if self._weigh is not None:
                    weight = self._weigh(value)
                    self.weight += weight - self._weights.get(key, 0.0)
                    self._weights[key] = weight
                while len(data) > self.maxsize or (len(data) > 1 and self.max_weight is not None
                                                   and self.weight > self.max_weight):
                    evicted, _ = data.popitem(last=False)
                    self.weight -= self._weights.pop(evicted, 0.0)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._weights.clear()
            self.weight = 0.0
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is held (neither a hit nor a miss, and its recency unchanged)."""
        return key in self._data


class Memo(dict):
    """A dict that computes a missing value with ``fn`` (a hit is one C-level dict
    lookup, several times cheaper than an ``lru_cache`` call) and starts over
    empty when it holds ``maxsize`` entries."""

    def __init__(self, fn: Callable, maxsize: int):
        super().__init__()
        self.fn, self.maxsize = fn, maxsize

    def __missing__(self, key):
        if len(self) >= self.maxsize:
            self.clear()
        value = self[key] = self.fn(key)
        return value
