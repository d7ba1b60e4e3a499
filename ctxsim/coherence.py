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
did not have (the embedders cache rows by content). A missing sentence's best match
among the kept ones is read from the few cells of its row of the gram that reach the
chance level (a match of at most ``b`` scores 0 whatever it is), and the products of a
sentence the original lacks with the original's sentences are kept for the next result
(:data:`PRODUCTS`: the lines of a summary recur in every later state). Both give the
scores whole rows give, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .errors import ConfigError, describe_value
from .model import ContextState
from .cache import LRUCache
from .relevance import (SparseRows, concatenated_ranges, embed_sparse, get_embedder, joined_products, select_rows,
                        similarity)
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
#: the bytes :data:`PRODUCTS` may hold: of a sentence some results of an original have and
#: the original lacks, its dot products with the original's sentences above the chance
#: level (the results of one original share most such sentences: the lines of a summary
#: recur in every later state)
PRODUCTS_BYTES = 32 * 2**20
#: the share of an original's gram cells at or above its chance level beyond which
#: :attr:`OriginalSentences.similar` is not kept (rows are read whole)
SIMILAR_SHARE = 1 / 16


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
        """The bytes of its arrays (what bounds :data:`ORIGINALS`), :attr:`similar` once made."""
        arrays = (self.weights, self.gram, self.rows.rows, self.rows.cols, self.rows.values, *self.unit_rows.values(),
                  *(self.__dict__.get("similar") or ()))
        return sum(a.nbytes for a in arrays)

    @cached_property
    def similar(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The gram's cells of at least the chance level ``b``, row by row
        (:func:`_similar`); None when they are more than :data:`SIMILAR_SHARE` of the gram
        (sentences hardly alike, ``b`` near 0), where reading whole rows costs less."""
        offsets, cols, values = _similar(self.gram, self.baseline)
        return None if len(cols) > SIMILAR_SHARE * self.gram.size else (offsets, cols, values)


ORIGINALS: LRUCache[tuple[str, str], OriginalSentences] = LRUCache(
    ORIGINALS_KEPT, weigh=lambda data: data.nbytes, max_weight=ORIGINALS_BYTES)
#: (original fingerprint, embedder, sentence) -> (rows, float64 products) of the original's
#: sentences whose dot product with the sentence is above the chance level (:func:`_best_new`)
PRODUCTS: LRUCache[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = LRUCache(
    1 << 20, weigh=lambda cells: cells[0].nbytes + cells[1].nbytes, max_weight=PRODUCTS_BYTES)


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


def _similar(gram: np.ndarray, baseline: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells of ``gram`` of at least ``baseline`` (compared one float32 step below it, so
    that no cell above it in float64 is left out), row by row: (offsets into the other two,
    int64, n + 1; their columns, int32; their cosines, float32). A sentence's best match
    scores only above the chance level, so these are the only cells :func:`recall` reads."""
    n = gram.shape[0]
    level = np.nextafter(np.float32(baseline), np.float32(0.0))
    rows, cols = np.nonzero(gram >= level)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    return offsets, cols.astype(np.int32), gram[rows, cols]


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
    key = (original.fingerprint, embedder_id)
    seen = key in ORIGINALS  # a result of it was scored before
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
    best = _best_kept(data, kept, missing, key if seen else None)
    if new:
        best = np.maximum(best, _best_new(data, original.fingerprint, embedder_id, new, missing))
    b = data.baseline
    scores = np.clip((best - b) / (1.0 - b), 0.0, 1.0)
    carried = float(data.weights[kept].sum()) + float(data.weights[missing] @ scores)
    return min(1.0, carried / total)


def _best_kept(data: OriginalSentences, kept: np.ndarray, missing: np.ndarray, key: tuple[str, str] | None) -> np.ndarray:
    """float64: each missing sentence's best cosine with a kept one, or 0 when none is kept.

    Every cosine is >= 0, so it is the largest of the sentence's row of the gram with the
    other columns zeroed. From an original's second result on (``key``, its key in
    :data:`ORIGINALS`), only the cells of :attr:`OriginalSentences.similar` are read (a few
    a sentence: its own, and those of the sentences much like it): a sentence scores
    ``clip((s - b) / (1 - b), 0, 1)`` of its best match ``s``, 0 for any ``s <= b``, so the
    best cosine where it is above ``b``, else 0 or a cosine of at most ``b``, gives every
    sentence the same score."""
    if not kept.any():
        return np.zeros(missing.size)
    similar = None
    if key is not None:
        made = "similar" not in data.__dict__
        similar = data.similar
        if made and key in ORIGINALS:  # its bytes weighed in the bound
            ORIGINALS.put(key, data)
    if similar is None:
        rows = data.gram[missing]
        rows *= kept
        return rows.max(axis=1).astype(np.float64)
    offsets, cols, values = similar
    starts = offsets[missing]
    lengths = offsets[missing + 1] - starts
    best = np.zeros(missing.size)
    if lengths.any():
        cells = concatenated_ranges(starts, lengths)  # the cells of the missing rows
        hit = kept[cols[cells]]
        np.maximum.at(best, np.repeat(np.arange(missing.size), lengths)[hit], values[cells[hit]])
    return best


def _best_new(data: OriginalSentences, fingerprint: str, embedder_id: str, new: list[str],
              missing: np.ndarray) -> np.ndarray:
    """float64: each missing sentence's best cosine with a sentence of the result the
    original lacks where that is above the chance level ``b``, else 0 (as
    :func:`_best_kept`: the same scores). Of each new sentence, its products with the
    original's sentences above ``b`` are kept (:data:`PRODUCTS`) when :func:`cosines`
    would join them on their shared columns whatever the rows (each row of ``new`` has at
    most dim / JOIN_COST entries, and :func:`~ctxsim.relevance.joined_products` adds a
    cell's products in the same order whichever other rows it joins): then each is the
    same number as in a join of the missing rows alone. Otherwise (a dense embedder) the
    missing rows and the new ones are multiplied as :func:`cosines` does."""
    keys = [(fingerprint, embedder_id, text) for text in new]
    found = PRODUCTS.get_many(keys)  # only sentences whose rows passed the test below
    todo = [i for i, cells in enumerate(found) if cells is None]
    if todo:
        embedder = get_embedder(embedder_id)
        new_rows = embed_sparse(embedder, [new[i] for i in todo])
        if np.diff(new_rows.row_offsets()).max(initial=0) * JOIN_COST > new_rows.shape[1]:
            return cosines(select_rows(data.rows, missing), embed_sparse(embedder, new)).max(axis=1)
        computed = joined_products(data.rows, new_rows)
        for j, i in enumerate(todo):
            rows = np.flatnonzero(computed[:, j] > data.baseline)
            found[i] = (rows, computed[rows, j])
        PRODUCTS.put_many((keys[i], found[i]) for i in todo)
    position = np.full(len(data.texts), -1, dtype=np.int64)
    position[missing] = np.arange(missing.size)
    at = position[np.concatenate([rows for rows, _ in found])]
    best = np.zeros(missing.size)
    np.maximum.at(best, at[at >= 0], np.concatenate([values for _, values in found])[at >= 0])
    return best


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
