"""Coherence measures: how much of an original context a broken one still carries.

Every measure maps ``(original, final, embedder_id)`` to a float in [0, 1]; an
unchanged context scores exactly 1.0 and an empty result 0.0. Registered by name
in :data:`MEASURES` (the env config key ``coherence``):

``recall`` (the default)
    Sentence recall in the style of BERTScore. The original's units are split into
    sentences (:func:`ctxsim.sentences.split_sentences`; code and log
    lines are one sentence each). Each original sentence scores

    * 1 when the result holds it verbatim (as one of its own sentences);
    * otherwise ``clip((s - b) / (1 - b), 0, 1)``, where ``s`` is its cosine with
      its most similar sentence of the result (the configured embedder) and ``b``
      is the context's chance level: the token-weighted ``BASELINE_QUANTILE``
      (0.75) quantile, over the original's sentences, of each one's cosine with
      its most similar *other* sentence of the original (capped at
      ``MAX_BASELINE``). Three quarters of the original find no better match
      elsewhere in the same context (generated and real contexts repeat their
      phrasing: same templates, same file names), so a match no better than ``b``
      is what text of the same kind gets by chance, and scores 0.

    Coherence is the token-weighted mean of the sentence scores (weights: cl100k
    tokens of each sentence, counted once per occurrence). Dropping units lowers it
    by about their share of the tokens; a summary that keeps a unit's sentences
    (extractive summaries quote them) or its key terms earns them back in part.

``centroid``
    The measure ctxsim used first: the cosine of the two contexts' token-weighted
    mean unit embeddings (:func:`ctxsim.relevance.similarity`). It barely moves
    when units leave (0.97 with half the units dropped); it stays for comparisons
    and as design 001's similarity check inside ``summarize_old`` and
    ``discard_low_rel``.

numpy only (it runs where the deployed policy computes rewards). Cost: the
original's sentences, their embeddings, their pairwise similarities and ``b``
are computed once per (original, embedder) and kept in an LRU bounded by their
bytes (:data:`ORIGINALS`: every original an env draws from keeps its data between
episodes, as the env keeps the contexts); scoring a result then takes the known
sentence rows of each unit the original also has, splits its other units (cached
by content), looks their sentences up and embeds only the sentences the original
did not have (the embedders cache rows by content).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, describe_value
from .model import ContextState
from .cache import LRUCache
from .relevance import SparseRows, embed_sparse, get_embedder, joined_products, select_rows, similarity
from .sentences import split_sentences
from .tokens import count_tokens

DEFAULT_MEASURE = "recall"
#: the chance level b: this token-weighted quantile of the original's best
#: other-sentence cosines, capped so that a near-perfect match always scores above 0
BASELINE_QUANTILE = 0.75
MAX_BASELINE = 0.9
#: originals whose sentence data is kept, and the bytes they may hold (an episode scores many
#: results of one original, and an env draws the same originals again: a median default-spec
#: context's data is about 0.8 MB, its largest about 6 MB, mostly the gram)
ORIGINALS_KEPT = 4096
ORIGINALS_BYTES = 256 * 2**20
#: cost of one joined pair of sparse entries in multiply-adds of a dense product (measured order)
JOIN_COST = 16


@dataclass(frozen=True)
class OriginalSentences:
    """What :func:`recall` needs of an original context, computed once.

    ``texts``: its distinct sentences; ``weights``: tokens of each (float64, every
    occurrence counted); ``index``: text -> row; ``unit_rows``: a unit's content ->
    the rows of its sentences (a result keeps most of the original's units whole, and
    their sentences are then found without splitting them again); ``gram``: (n, n)
    float32 cosines between the sentences; ``rows``: their embeddings; ``baseline``:
    the chance level ``b`` (module docstring).
    """

    texts: tuple[str, ...]
    weights: np.ndarray
    index: dict[str, int]
    unit_rows: dict[str, np.ndarray]
    rows: SparseRows
    gram: np.ndarray
    baseline: float

    @property
    def nbytes(self) -> int:
        """The bytes of its arrays (what bounds :data:`ORIGINALS`)."""
        arrays = (self.weights, self.gram, self.rows.rows, self.rows.cols, self.rows.values, *self.unit_rows.values())
        return sum(a.nbytes for a in arrays)


ORIGINALS: LRUCache[tuple[str, str], OriginalSentences] = LRUCache(
    ORIGINALS_KEPT, weigh=lambda data: data.nbytes, max_weight=ORIGINALS_BYTES)


def sentences_of(state: ContextState) -> list[str]:
    """Every sentence of ``state``'s units, in order (repeats kept)."""
    return [s for unit in state.units for s in split_sentences(unit.content)]


def cosines(a: SparseRows, b: SparseRows) -> np.ndarray:
    """(len a, len b) float64 dot products of two batches of unit-norm rows.

    Sparse rows (hashed) are joined on their shared columns
    (:func:`~ctxsim.relevance.joined_products`); dense ones (MiniLM) are multiplied;
    whichever touches fewer numbers."""
    na, nb = a.shape[0], b.shape[0]
    if not na or not nb:
        return np.zeros((na, nb))
    pairs = int(np.bincount(b.cols, minlength=b.shape[1])[a.cols].sum())
    if pairs * JOIN_COST > na * nb * a.shape[1]:
        return a.dense().astype(np.float64) @ b.dense().astype(np.float64).T
    return joined_products(a, b)


def original_sentences(original: ContextState, embedder_id: str) -> OriginalSentences:
    """The sentence data of ``original`` (cached per original and embedder)."""
    key = (original.fingerprint, embedder_id)
    found = ORIGINALS.get(key)
    if found is not None:
        return found
    # each distinct unit split once; its sentences' rows kept for the units a result shares
    split = {content: split_sentences(content) for content in dict.fromkeys(u.content for u in original.units)}
    index: dict[str, int] = {}
    occurrences: list[int] = []
    for unit in original.units:
        for text in split[unit.content]:
            row = index.setdefault(text, len(index))
            occurrences.append(row)
    texts = tuple(index)
    # tokens of every occurrence: a distinct sentence's count times its occurrences (exact integers)
    weights = (np.bincount(np.array(occurrences, dtype=np.intp), minlength=len(texts))
               * np.array([count_tokens(t) for t in texts], dtype=np.float64))
    unit_rows = {content: np.array([index[t] for t in sentences], dtype=np.intp) for content, sentences in split.items()}
    rows = embed_sparse(get_embedder(embedder_id), texts)
    # cast, then clip in place: the same numbers (both are monotone, 0 and 1 are exact in float32)
    gram = cosines(rows, rows).astype(np.float32)
    np.clip(gram, 0.0, 1.0, out=gram)
    found = OriginalSentences(texts, weights, index, unit_rows, rows, gram, _baseline(gram, weights))
    ORIGINALS.put(key, found)
    return found


def _baseline(gram: np.ndarray, weights: np.ndarray) -> float:
    """The chance level: the token-weighted ``BASELINE_QUANTILE`` of each sentence's
    best cosine with another sentence (0 for fewer than two sentences)."""
    if len(weights) < 2:
        return 0.0
    others = gram.copy()
    np.fill_diagonal(others, 0.0)
    best = others.max(axis=1).astype(np.float64)
    order = np.argsort(best, kind="stable")
    cumulative = np.cumsum(weights[order])
    level = best[order][np.searchsorted(cumulative, cumulative[-1] * BASELINE_QUANTILE)]
    return float(min(level, MAX_BASELINE))


def _found(data: OriginalSentences, final: ContextState) -> tuple[np.ndarray | None, list[str]]:
    """(which of the original's sentences ``final`` holds verbatim, as a bool per row, or
    None when ``final`` has no sentence at all; the distinct sentences of ``final`` the
    original lacks, in order of first appearance, so results reproduce).

    A unit the original also has contributes its known rows; any other unit is split
    and its sentences are looked up."""
    parts: list[np.ndarray] = []
    single: list[int] = []
    new: dict[str, None] = {}
    any_sentence = False
    for unit in final.units:
        rows = data.unit_rows.get(unit.content)
        if rows is not None:
            any_sentence = any_sentence or rows.size > 0
            parts.append(rows)
            continue
        for text in split_sentences(unit.content):
            any_sentence = True
            row = data.index.get(text)
            if row is None:
                new[text] = None
            else:
                single.append(row)
    if not any_sentence:
        return None, []
    kept = np.zeros(len(data.texts), dtype=bool)
    if parts:
        kept[np.concatenate(parts)] = True
    kept[single] = True
    return kept, list(new)


def recall(original: ContextState, final: ContextState, embedder_id: str) -> float:
    """Token-weighted, chance-rescaled recall of ``original``'s sentences in ``final``."""
    if original.fingerprint == final.fingerprint:
        return 1.0
    data = original_sentences(original, embedder_id)
    total = float(data.weights.sum())
    if total == 0.0:
        return 1.0
    kept, new = _found(data, final)
    if kept is None:
        return 0.0
    missing = np.flatnonzero(~kept)
    if not missing.size:
        return 1.0
    best = np.zeros(missing.size)
    if kept.any():
        # the best cosine of each missing sentence with a kept one: the gram's rows of the
        # missing sentences, the columns of the others zeroed (every cosine is >= 0)
        similar = data.gram[missing]
        similar *= kept
        best = similar.max(axis=1).astype(np.float64)
    if new:
        missing_rows = select_rows(data.rows, missing)
        new_rows = embed_sparse(get_embedder(embedder_id), new)
        best = np.maximum(best, cosines(missing_rows, new_rows).max(axis=1))
    b = data.baseline
    scores = np.clip((best - b) / (1.0 - b), 0.0, 1.0)
    carried = float(data.weights[kept].sum()) + float(data.weights[missing] @ scores)
    return min(1.0, carried / total)


def centroid(original: ContextState, final: ContextState, embedder_id: str) -> float:
    """Cosine of the token-weighted mean unit embeddings of both contexts, in [0, 1]."""
    if original.fingerprint == final.fingerprint:
        return 1.0
    if not final.units or not original.units:
        return 0.0
    return float(
        similarity(
            [u.content for u in original.units],
            [u.token_count for u in original.units],
            [u.content for u in final.units],
            [u.token_count for u in final.units],
            get_embedder(embedder_id),
        )
    )


Measure = Callable[[ContextState, ContextState, str], float]
MEASURES: dict[str, Measure] = {"recall": recall, "centroid": centroid}


def get_measure(name: str) -> Measure:
    """The measure registered as ``name`` (ConfigError naming the known ones)."""
    measure = MEASURES.get(name) if isinstance(name, str) else None
    if measure is None:
        raise ConfigError(f"unknown coherence measure {describe_value(name)}; known: {sorted(MEASURES)}", key="coherence")
    return measure
