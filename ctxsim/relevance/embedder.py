"""The embedder interface and the cached base every built-in embedder extends.

:class:`Embedder` is the protocol (texts to float32 rows of unit L2 norm);
:class:`CachedEmbedder` caches rows per text content in a bounded LRU, keeps the rows
of each block of texts it embedded as one (:meth:`CachedEmbedder.embed_blocks`), and
remembers each text's :func:`~ctxsim.relevance.cosine_to_query` score against each query
and its last :func:`~ctxsim.relevance.document_embedding` results; :class:`SparseRows` and
:class:`RowSimilarity` are the sparse forms they exchange. The registry and the
similarity helpers built on them are in :mod:`ctxsim.relevance`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from itertools import accumulate
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from ..cache import LRUCache

#: (query, text) scores of cosine_to_query a cached embedder remembers (it starts over
#: when full): every state of a context scores its units against the same task, and
#: most units of a state are those of the state before it
QUERY_COSINES = 200_000
#: blocks of texts (:meth:`CachedEmbedder.embed_blocks`) whose packed rows a cached embedder keeps
BLOCKS_KEPT = 16_384
#: document_embedding results a cached embedder remembers (a context's original and
#: the results of breaking it, compared one by one)
DOCUMENT_MEMO = 64
#: one non-zero entry of a cached row: its column and value
_ENTRY = np.dtype([("col", "<i4"), ("value", "<f4")])
#: a join of at least this many products goes through scipy's sparse product when scipy
#: is installed (the ``lab`` extra). Measured on the sentences of real sessions: at
#: 90,000 products the two cost the same (about 0.9 ms), at 240,000 scipy takes 0.43 of
#: numpy's time, at 1.1 million 0.34; below, building scipy's matrices costs more
SPARSE_MIN_PRODUCTS = 100_000


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
    def empty(cls, n: int, dim: int) -> SparseRows:
        """``n`` zero rows of ``dim`` columns (no entries)."""
        return cls((n, dim), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32))

    @classmethod
    def from_dense(cls, matrix: np.ndarray) -> SparseRows:
        rows, cols = np.nonzero(matrix)
        return cls(matrix.shape, rows.astype(np.int64), cols.astype(np.int32), matrix[rows, cols].astype(np.float32))

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape, dtype=np.float32)
        out[self.rows, self.cols] = self.values
        return out

    def row_offsets(self) -> np.ndarray:
        """Where each row's entries start, and the end: ``n + 1`` offsets (int64; the
        ``indptr`` of a CSR matrix)."""
        return np.searchsorted(self.rows, np.arange(self.shape[0] + 1))

    def split(self, k: int) -> tuple[SparseRows, SparseRows]:
        """(rows ``0 .. k - 1``, rows ``k ..`` numbered from 0): the two parts of a batch
        embedded together (a query with the texts it is scored against)."""
        at = int(np.searchsorted(self.rows, k))
        dim = self.shape[1]
        return (SparseRows((k, dim), self.rows[:at], self.cols[:at], self.values[:at]),
                SparseRows((self.shape[0] - k, dim), self.rows[at:] - k, self.cols[at:], self.values[at:]))

    def dot(self, vector: np.ndarray) -> np.ndarray:
        """Each row's dot product with a dense (dim,) vector, float64 (n,)."""
        weights = self.values.astype(np.float64) * vector[self.cols]
        return np.bincount(self.rows, weights=weights, minlength=self.shape[0])

    def weighted_sum(self, weights: np.ndarray) -> np.ndarray:
        """Σ weights[i] · row i, float64 (dim,)."""
        products = self.values.astype(np.float64) * weights[self.rows]
        return np.bincount(self.cols, weights=products, minlength=self.shape[1])


def column_order(cols: np.ndarray, dim: int, counts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the stable order of entries by column, where each column's entries start in it:
    ``dim + 1`` offsets). Columns below 2**16 are sorted as uint16 (numpy sorts those by
    radix: the same order, sooner), and the offsets are the running counts of the
    columns (``counts``, each column's entries, when the caller has them)."""
    order = np.argsort(cols.astype(np.uint16) if dim <= 1 << 16 else cols, kind="stable")
    ptr = np.zeros(dim + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=dim) if counts is None else counts, out=ptr[1:])
    return order, ptr


@lru_cache(maxsize=1)
def scipy_sparse() -> Any:
    """``scipy.sparse`` when installed (imported on the first large join), else None."""
    try:
        from scipy import sparse
    except ImportError:  # the core install: numpy alone
        return None
    return sparse


def concatenated_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices ``starts[i] .. starts[i] + lengths[i] - 1`` of every ``i``, one range
    after the other (int64), without a Python loop."""
    return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))


def joined_products(a: SparseRows, b: SparseRows) -> np.ndarray:
    """(len a, len b) float64 dot products of two sparse batches, joined on their
    shared columns (never densified). Each cell adds the products of its ``a`` row's
    entries in their stored order, so a cell is the same number however many other
    rows either batch holds (:meth:`RowSimilarity.to_row` and
    :meth:`RowSimilarity.among` agree bit for bit).

    A join of :data:`SPARSE_MIN_PRODUCTS` products or more is scipy's sparse product
    when scipy is installed: its row-by-row product adds each cell's products in the
    same order, the order of the ``a`` row's entries, so the numbers are the same to
    the bit (a test compares the two on real contexts), several times sooner on long
    inputs."""
    na, nb = a.shape[0], b.shape[0]
    counts = np.bincount(b.cols, minlength=b.shape[1])
    if int(counts[a.cols].sum()) >= SPARSE_MIN_PRODUCTS and scipy_sparse() is not None:
        return sparse_products(a, b)
    order, ptr = column_order(b.cols, b.shape[1], counts)
    b_rows, b_values = b.rows[order], b.values[order].astype(np.float64)
    starts = ptr[a.cols]
    lengths = ptr[a.cols + 1] - starts
    index = concatenated_ranges(starts, lengths)  # the b entries sharing each a entry's column
    owner = np.repeat(np.arange(len(a.cols)), lengths)
    cells = a.rows[owner] * nb + b_rows[index]
    products = a.values[owner].astype(np.float64) * b_values[index]
    return np.bincount(cells, weights=products, minlength=na * nb).reshape(na, nb)


def sparse_products(a: SparseRows, b: SparseRows) -> np.ndarray:
    """:func:`joined_products` computed by scipy's sparse product (scipy required): the
    rows as CSR matrices of float64 values, ``a @ b.T``, made dense."""
    sparse = scipy_sparse()

    def csr(batch: SparseRows) -> Any:
        return sparse.csr_matrix((batch.values.astype(np.float64), batch.cols, batch.row_offsets()), shape=batch.shape)

    left = csr(a)
    right = left if b is a else csr(b)
    return (left @ right.T).toarray()


def select_rows(batch: SparseRows, which: np.ndarray) -> SparseRows:
    """The rows ``which`` (sorted) of a batch, renumbered 0..len(which)-1."""
    position = np.full(batch.shape[0], -1, dtype=np.int64)
    position[which] = np.arange(which.size)
    keep = position[batch.rows] >= 0
    return SparseRows((which.size, batch.shape[1]), position[batch.rows[keep]], batch.cols[keep], batch.values[keep])


class RowSimilarity:
    """Dot products of one row of a :class:`SparseRows` batch with every row.

    Builds a column index on the first :meth:`to_row`; each query then touches only
    the entries that share a column with the row (a few hundred for a hashed
    sentence). :meth:`among` gives the products within a few rows in one join.
    """

    def __init__(self, batch: SparseRows):
        self.batch = batch
        self._index: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def _column_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._index is None:
            batch = self.batch
            dim = batch.shape[1]
            order, col_ptr = column_order(batch.cols, dim)
            self._index = (batch.row_offsets(), batch.rows[order],
                           batch.values[order].astype(np.float64), col_ptr)
        return self._index

    def to_row(self, k: int) -> np.ndarray:
        """float64 (n,): the dot product of row ``k`` with each row."""
        row_ptr, col_rows, col_values, col_ptr = self._column_index()
        a, b = row_ptr[k], row_ptr[k + 1]
        cols, values = self.batch.cols[a:b], self.batch.values[a:b].astype(np.float64)
        starts = col_ptr[cols]
        lengths = col_ptr[cols + 1] - starts
        index = concatenated_ranges(starts, lengths)  # the entries of the row's columns
        weights = col_values[index] * np.repeat(values, lengths)
        return np.bincount(col_rows[index], weights=weights, minlength=self.batch.shape[0])

    def among(self, members: np.ndarray) -> np.ndarray:
        """float64 (m, m) for the rows ``members`` (sorted): row ``i`` equals
        ``to_row(members[i])[members]`` bit for bit, for the cost of one join."""
        rows = select_rows(self.batch, members)
        return joined_products(rows, rows)


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
        # each text's cosine_to_query score against each query (a Python float)
        self._query_cosines: dict[tuple[str, str], float] = {}
        # the entries of each block of texts embed_blocks was given: each row's count, the columns, the values
        self._blocks: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
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
            bounds = computed.row_offsets() * _ENTRY.itemsize
            rows = [packed[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
            distinct.update(zip(missing, rows))
            self._cache.put_many(zip(missing, rows))
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

    def embed_blocks(self, blocks: Sequence[tuple[str, ...]]) -> SparseRows:
        """:meth:`embed_sparse` of the texts of ``blocks``, block after block: the same rows.

        Each distinct block's entries are kept (up to :data:`BLOCKS_KEPT` blocks; then the
        memo starts over), so a batch made of blocks seen before is a few joins of arrays,
        however many texts they hold: the sentences of a unit, which recur in every state
        that keeps the unit. The rows of new blocks are looked up and computed together by
        :meth:`embed_sparse` (its ``hits`` and ``misses`` count them; a block found here
        counts neither)."""
        memo = self._blocks
        found = list(map(memo.get, blocks))
        if any(entry is None for entry in found):
            missing = list(dict.fromkeys(block for block, entry in zip(blocks, found) if entry is None))
            computed = self.embed_sparse([text for block in missing for text in block])
            offsets = computed.row_offsets()
            counts = np.diff(offsets)
            rows = [0, *accumulate(map(len, missing))]  # where each block's rows start, and the end
            entries = offsets[rows].tolist()  # where its entries start, and the end
            new = {block: (counts[rows[k]:rows[k + 1]], computed.cols[entries[k]:entries[k + 1]],
                           computed.values[entries[k]:entries[k + 1]]) for k, block in enumerate(missing)}
            if len(memo) + len(new) > BLOCKS_KEPT:
                memo.clear()
            memo.update(new)
            if len(missing) == len(blocks):  # every block new and distinct: the batch as computed
                return computed
            found = [new[block] if entry is None else entry for block, entry in zip(blocks, found)]
        if not found:
            return SparseRows.empty(0, self.dim)
        counts, cols, values = zip(*found)
        counts = np.concatenate(counts)
        return SparseRows((len(counts), self.dim), np.repeat(np.arange(len(counts), dtype=np.int64), counts),
                          np.concatenate(cols), np.concatenate(values))

    def cache_info(self) -> dict[str, int]:
        """Cache statistics: hits, misses (texts looked up) and current size."""
        return {"hits": self._cache.hits, "misses": self._cache.misses, "size": len(self._cache)}

    def clear_cache(self) -> None:
        self._cache.clear()
        self._query_cosines.clear()
        self._blocks.clear()
        self._recent_documents.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, dim={self.dim})"
