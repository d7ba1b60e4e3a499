"""``hashed-tfidf``: the default embedder; numpy only, nothing downloaded.

Features of a text:

* word tokens, lowercased; identifiers are split on ``_`` and camelCase
  (``getUserName`` -> ``get user name``); numbers keep their inner ``.``/``,``
  (``3.2.1``, ``1,250`` -> ``1250``); English stop-words and one-character tokens
  are dropped;
* unigrams and bigrams of the remaining tokens, hashed with crc32 (stable across
  processes, unlike Python's ``hash``) into ``DIM`` = 4,096 buckets.

Weight of a feature = sublinear tf (``1 + ln tf``) x idf. The idf is a fixed
background weight, not fitted on the texts being embedded (that would make a
text's vector depend on its batch and defeat the cache). It comes from the one
word-frequency table ctxsim ships: the merge ranks of the cl100k BPE vocabulary,
which was learned from a large web corpus and merges frequent strings first. A
word that is a single cl100k token of rank ``r`` is treated as having Zipf
frequency ~ 1/r, so its idf is ``1 + ln(1 + r / 256)`` (``data``: 2.4,
``budget``: 4.5); a word that needs several tokens is rare, with the rank taken
as ``RARE_RANK`` (idf 7.0). A bigram's idf is the mean of its words'. Without the
cl100k file every idf is 1 (plain hashed tf).

Rows are L2-normalized; a text with no features gives a zero row.
"""

from __future__ import annotations

import math
import re
import struct
import zlib
from functools import lru_cache
from itertools import filterfalse

import numpy as np

from ..cache import Memo
from ..tokens import encoding_available, lone_token
from .chunk_table import CHUNK_PUNCTUATION, ChunkTable
from .embedder import CachedEmbedder, SparseRows

DIM = 1 << 12
RARE_RANK = 100_000
RANK_SCALE = 256.0
_BIGRAM_MIX = np.uint64(0x9E3779B97F4A7C15)
#: one token's features as bytes: its crc32 hash (exact as a double: < 2**32) and idf
_FEATURE = struct.Struct("<dd")
_FEATURE_DTYPE = np.dtype([("hash", "<f8"), ("idf", "<f8")])

STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are aren't as at be because been before being
    below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down
    during each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here
    here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
    just let's me more most mustn't my myself no nor not now of off on once only or other ought our ours
    ourselves out over own same shan't she she'd she'll she's so some such than that that's the their
    theirs them themselves then there there's these they they'd they'll they're they've this those through
    to too under until up us very was wasn't we we'd we'll we're we've were weren't what what's when when's
    where where's which while who who's whom why why's will with won't would wouldn't you you'd you'll
    you're you've your yours yourself yourselves
    """.split()
)

# a number with inner . or , (1,250.00), or a word/identifier: letters and digits,
# ``.digits`` (v3.2.1), an inner apostrophe (don't), ``_`` joins (user_name)
_RAW_TOKEN = re.compile(r"\d+(?:[.,]\d+)+|[^\W_]+(?:\.\d+)*(?:['’][^\W\d_]+)?(?:_+[^\W_]+)*")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _raw_words(raw: str) -> list[str]:
    """Normalized tokens of one raw token (identifier parts, number, word)."""
    if raw[0].isdigit() and not raw.isalnum():
        return [raw.replace(",", "")]
    # ``_`` joins and camelCase boundaries become spaces (no rule looks across a space);
    # only a raw token with an uppercase letter can have a camelCase boundary
    spaced = raw.replace("’", "'").replace("_", " ")
    if not spaced.islower():
        spaced = _CAMEL.sub(" ", spaced)
    return [p for p in spaced.lower().split() if len(p) > 1 and p not in STOP_WORDS]


@lru_cache(maxsize=200_000)
def _split_raw(raw: str) -> tuple[str, ...]:
    """:func:`_raw_words`, cached for :func:`tokenize`."""
    return tuple(_raw_words(raw))


def tokenize(text: str) -> list[str]:
    """The normalized word tokens of ``text`` in order (stop-words removed)."""
    out: list[str] = []
    for raw in _RAW_TOKEN.findall(text):
        out.extend(_split_raw(raw))
    return out


def _word_features(word: str) -> bytes:
    """The 32-bit crc32 hash and the background idf of a normalized token, packed
    with ``_FEATURE``."""
    idf = 1.0
    if encoding_available():
        rank = lone_token(word if word[0].isdigit() else " " + word)
        idf = 1.0 + math.log1p((RARE_RANK if rank is None else rank) / RANK_SCALE)
    return _FEATURE.pack(zlib.crc32(word.encode("utf-8", "surrogatepass")), idf)


#: the packed features of a normalized token
_WORD_FEATURES = Memo(_word_features, 200_000)


def _raw_features(raw: str) -> bytes:
    """The packed features of the normalized tokens of one raw token, in order.

    A raw token that does not start with a digit has the tokens of its ``_``-joined
    parts, in order (no rule looks across a ``_``), so a new identifier made of
    known parts costs a lookup per part."""
    if "_" in raw and not raw[0].isdigit():
        return b"".join([_RAW_FEATURES[part] for part in raw.split("_") if part])
    return b"".join(map(_WORD_FEATURES.__getitem__, _raw_words(raw)))


_RAW_FEATURES = Memo(_raw_features, 200_000)


def _chunk_features(chunk: str) -> bytes:
    """The packed features of the tokens of ``chunk``, in order. ``.``, ``,`` and
    ``'`` at either end of a chunk belong to no token (each needs a digit or letter
    after it), and a chunk of letters and digits only is one raw token (the
    regex's word class is ``str.isalnum``). A chunk of ASCII letters in one case, or
    capitalized, has no camelCase boundary: it is its one word, lowercased (most new
    chunks are such words)."""
    core = chunk.strip(".,'")
    if core.isalpha() and core.isascii() and (core.islower() or core.isupper() or core.istitle()):
        word = core.lower()
        return b"" if len(word) < 2 or word in STOP_WORDS else _WORD_FEATURES[word]
    if core.isalnum():
        return _RAW_FEATURES[core]
    # letters joined by ``.``, ``,`` and ``_`` only (a dotted name, a file name, an
    # identifier): without a digit no ``.`` or ``,`` is inside a token, so the tokens
    # are those of the runs of letters, the ``_``-parts of raw tokens
    joined = core.replace(".", "_").replace(",", "_")
    if joined.replace("_", "").isalpha():
        return b"".join([_RAW_FEATURES[part] for part in joined.split("_") if part])
    return b"".join(map(_RAW_FEATURES.__getitem__, _RAW_TOKEN.findall(core)))


#: the packed features of the tokens of a chunk (a piece of text without whitespace
#: or separators), in order
_CHUNK_FEATURES = Memo(_chunk_features, 200_000)
#: ASCII characters no raw token contains, mapped to spaces: no token spans one and no
#: rule looks across one, so the tokens of a text are those of the chunks between them,
#: in order (and a path or an identifier list splits into chunks that repeat)
_SEPARATORS = {
    c: " " for c in range(128) if not (chr(c).isalnum() or chr(c) in CHUNK_PUNCTUATION or chr(c).isspace())
}


#: :data:`_SEPARATORS` as a table for ``bytes.translate``, which also maps the ASCII
#: characters ``str.split`` splits at to spaces (so ``bytes.split`` splits at them too)
_BYTE_SEPARATORS = bytes(32 if c in _SEPARATORS or chr(c).isspace() else c for c in range(256))


def _chunks(text: str) -> list[str]:
    """The chunks of ``text``: its pieces between whitespace and :data:`_SEPARATORS`, in
    order. An ASCII text is translated as bytes (a table lookup per character, several
    times cheaper than ``str.translate`` with a dict)."""
    if text.isascii():
        return text.encode("ascii").translate(_BYTE_SEPARATORS).decode("ascii").split()
    return text.translate(_SEPARATORS).split()


def _chunk_lists(texts: list[str]) -> list[list[str]]:
    """:func:`_chunks` of each text. ASCII texts are translated together, joined by
    ``\\xff`` (a byte no ASCII text holds, which the table keeps), then cut apart: one
    translation instead of one per text."""
    if not all(map(str.isascii, texts)):
        return list(map(_chunks, texts))
    translated = "\xff".join(texts).encode("latin-1").translate(_BYTE_SEPARATORS).decode("latin-1")
    return [part.split() for part in translated.split("\xff")]


def _features(text: str) -> bytes:
    """The packed (hash, idf) features of the tokens of ``text``, in order."""
    return b"".join(map(_CHUNK_FEATURES.__getitem__, _chunks(text)))


def _texts_features(texts: list[str]) -> list[bytes]:
    """:func:`_features` of each text: the chunks no text has shown before are worked
    out first, in one loop (a fresh text brings hundreds, and a lookup that misses
    costs several calls more), then each text is lookups."""
    if len(texts) == 1:
        return [_features(texts[0])]
    chunk_lists = _chunk_lists(texts)
    memo = _CHUNK_FEATURES
    new = list(filterfalse(memo.__contains__, set().union(*chunk_lists)))
    if new:
        if len(memo) + len(new) > memo.maxsize:
            memo.clear()
        for chunk in new:
            memo[chunk] = _chunk_features(chunk)
    get = memo.__getitem__
    return [b"".join(map(get, chunks)) for chunks in chunk_lists]


#: the pieces of large batches of ASCII texts, found with numpy (same features); a new
#: piece is read through :data:`_CHUNK_FEATURES` (a piece is a chunk), so the two paths
#: share what either has worked out
_TABLE = ChunkTable(_CHUNK_FEATURES.__getitem__, _FEATURE_DTYPE)
#: a batch with fewer ASCII characters is read chunk by chunk: numpy costs more there (the
#: two paths cost the same at about 10,000 characters of new sentences, chat-10k and code-heavy)
TABLE_MIN_CHARS = 10_240


def _batch_features(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(the (hash, idf) features of the tokens of all texts, text after text and in
    order, as ``_FEATURE_DTYPE`` records; how many each text has)."""
    plain = [text.isascii() for text in texts]
    if sum(len(text) for text, ascii_ in zip(texts, plain) if ascii_) < TABLE_MIN_CHARS:
        packed = _texts_features(texts)
        return np.frombuffer(b"".join(packed), _FEATURE_DTYPE), np.array([len(p) // _FEATURE.size for p in packed])
    if all(plain):
        return _TABLE.features(texts)
    records, counts = _TABLE.features([text for text, ascii_ in zip(texts, plain) if ascii_])
    found = iter(np.split(records, np.cumsum(counts)[:-1]))
    parts = [next(found) if ascii_ else np.frombuffer(_features(text), _FEATURE_DTYPE) for text, ascii_ in zip(texts, plain)]
    return np.concatenate(parts), np.array([len(p) for p in parts])


def idf(word: str) -> float:
    """Background idf of a normalized token (see the module docstring)."""
    return _FEATURE.unpack(_WORD_FEATURES[word])[1]


def _stable_order(values: np.ndarray, bits: int) -> np.ndarray:
    """The stable ascending order (an argsort) of integers in ``[0, 2**bits)``: one
    stable sort per 16 bits, least significant first (numpy sorts 16-bit integers
    stably by radix, in linear time)."""
    values = values.astype(np.uint64, copy=False)
    order = np.argsort((values & np.uint64(0xFFFF)).astype(np.uint16), kind="stable")
    for shift in range(16, bits, 16):
        digits = ((values[order] >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.uint16)
        order = order[np.argsort(digits, kind="stable")]
    return order


class HashedTfidfEmbedder(CachedEmbedder):
    """Hashed unigram+bigram sublinear-tf x background-idf vectors (``DIM`` dims)."""

    id = "hashed-tfidf"
    dim = DIM

    def _compute(self, texts: list[str]) -> SparseRows:
        # all texts at once: word hashes and idfs in one array, with the text of each
        features, per_text = _batch_features(texts)
        if not features.size:
            return SparseRows.empty(len(texts), DIM)
        owner = np.repeat(np.arange(len(texts), dtype=np.int64), per_text)
        hashes = features["hash"].astype(np.uint64)
        idfs = features["idf"]
        # unigram keys are the 32-bit hashes; bigram keys (within one text) mix both
        # hashes into 64 bits with bit 63 set, so the two kinds of key never coincide
        # and every unigram key is below every bigram key
        inner = owner[:-1] == owner[1:]
        keys = np.concatenate([hashes, ((hashes[:-1][inner] * _BIGRAM_MIX) ^ hashes[1:][inner]) | np.uint64(1 << 63)])
        key_owner = np.concatenate([owner, owner[:-1][inner]])
        key_idf = np.concatenate([idfs, ((idfs[:-1] + idfs[1:]) / 2)[inner]])
        buckets = ((keys ^ (keys >> np.uint64(29))) % np.uint64(DIM)).astype(np.int64)
        # every feature in its cell (text, bucket), by radix and stably: the occurrences of
        # a key in a text share a cell, text order kept
        by_bucket = _stable_order(buckets, DIM.bit_length() - 1)
        order = by_bucket[_stable_order(key_owner[by_bucket], max(len(texts) - 1, 1).bit_length())]
        cells = key_owner[order] * DIM + buckets[order]
        sorted_keys = keys[order]
        new_cell = np.empty(len(cells), dtype=bool)
        new_cell[0] = True
        np.not_equal(cells[1:], cells[:-1], out=new_cell[1:])
        # a cell with two different keys (they collide in the bucket): its features by key,
        # stably (the few such cells only)
        clash = ~new_cell[1:] & (sorted_keys[1:] != sorted_keys[:-1])
        if clash.any():
            cell_id = np.cumsum(new_cell) - 1
            mixed = np.zeros(cell_id[-1] + 1, dtype=bool)
            mixed[cell_id[1:][clash]] = True
            at = np.flatnonzero(mixed[cell_id])
            by_key = np.argsort(sorted_keys[at], kind="stable")
            source = at[by_key[np.argsort(cell_id[at][by_key], kind="stable")]]
            order[at], sorted_keys[at] = order[source], sorted_keys[source]
        # a run of one key in a cell is its occurrences in one text, the first one first
        # (its idf is the run's); the features of a cell add up in the order of their keys
        change = new_cell[1:] | (sorted_keys[1:] != sorted_keys[:-1])
        starts = np.concatenate([[0], np.flatnonzero(change) + 1])
        weights = (1.0 + np.log(np.diff(starts, append=len(cells)))) * key_idf[order[starts]]
        first = new_cell[starts]
        values = np.bincount(np.cumsum(first) - 1, weights=weights)
        cells = cells[starts][first]
        rows = cells // DIM
        norms = np.sqrt(np.bincount(rows, weights=values**2, minlength=len(texts)))
        return SparseRows(
            (len(texts), DIM), rows, (cells % DIM).astype(np.int32), (values / norms[rows]).astype(np.float32)
        )
