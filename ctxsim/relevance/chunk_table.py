"""The features of ASCII texts, piece by piece, found with numpy (the hashed embedder's
path for large batches; :mod:`ctxsim.relevance.hashed` defines what it finds).

A text's features are those of its chunks in order: the maximal runs of ASCII letters,
digits and ``_.,'``. A chunk without a digit or a ``'`` between two letters is cut
further at ``.``, ``,`` and ``_`` (no token looks across them there, and a ``_`` join has
its parts' tokens; such a ``'`` after a ``_`` would join no words) and between a
lower-case letter and an upper-case one (a camelCase boundary, where the token rules put
a space), so a new dotted name, identifier or class name made of known words is known
pieces; and every piece loses the ``.``, ``,`` and ``'`` at its ends (no token starts or
ends with one), so a quoted word or a number before a comma is the piece seen before.
:class:`ChunkTable` finds the pieces of a whole batch with array operations: a piece of
up to 16 bytes is two little-endian uint64 words (no piece holds a zero byte, so the
words are the piece), looked up, all pieces at once, in an open-addressing hash table of
the pieces seen before; only a new piece and one longer than 16 bytes are read as
strings, and each piece's features are computed once, by the ``features_of`` it is
given. The features of every piece seen are kept as one run of records; a table that
holds ``max_pieces`` pieces starts over empty at its next call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

#: the ASCII characters besides letters and digits that a chunk holds
CHUNK_PUNCTUATION = "_.,'"
#: each ASCII byte's kind, as a bytes.translate table: a gap between chunks, a lower- or
#: upper-case letter, a digit, ``_``, ``'``, or ``.`` and ``,`` (the last two kinds: the
#: bytes no token starts or ends with)
_GAP, _LOWER, _UPPER, _DIGIT, _JOIN, _QUOTE, _STOP = range(7)
_KINDS = bytes(
    _DIGIT if chr(b).isdigit() else _JOIN if chr(b) == "_" else _QUOTE if chr(b) == "'" else
    _STOP if chr(b) in ".," else _LOWER if chr(b).islower() else _UPPER if chr(b).isupper() else _GAP
    for b in range(128)
) + bytes(128)
#: the low ``k`` bytes of a uint64, k = 0..8
_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
#: odd multipliers that mix a piece's two words into its first slot
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F))
KEY_BYTES = 16
#: slots of an empty table (a power of two)
MIN_SLOTS = 1024


def _trimmed(kinds: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pieces ``starts``/``ends`` (of a text whose bytes have the ``kinds``) without the
    ``.``, ``,`` and ``'`` at either end (they belong to no token), empty ones dropped: a
    quoted word or a number before a comma is the piece seen before."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    for bounds, step, first in ((starts, 1, 0), (ends, -1, -1)):
        at = np.flatnonzero(kinds[bounds + first] >= _QUOTE)  # only the few pieces that start (end) so
        while len(at):
            bounds[at] += step
            at = at[starts[at] < ends[at]]
            at = at[kinds[bounds[at] + first] >= _QUOTE]
    keep = ends > starts
    return starts[keep], ends[keep]


class ChunkTable:
    """Packed feature records of the pieces of ASCII texts (module docstring).

    ``features_of(piece)`` gives a piece's records as bytes of ``record`` dtype. Safe
    to share between threads (one lock)."""

    def __init__(self, features_of: Callable[[str], bytes], record: np.dtype, max_pieces: int = 200_000):
        self._features_of, self._record, self.max_pieces = features_of, np.dtype(record), max_pieces
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        # an open-addressing hash table of the short pieces: their two words and run
        # (run -1: an empty slot), at most a quarter full (short probes)
        self._low = np.zeros(MIN_SLOTS, np.uint64)
        self._high = np.zeros(MIN_SLOTS, np.uint64)
        self._slot_run = np.full(MIN_SLOTS, -1, np.int64)
        self._short = 0
        self._long: dict[str, int] = {}  # pieces longer than KEY_BYTES -> run
        self._records = bytearray()  # the records of every run, run after run
        self._run_start = np.zeros(0, np.int64)  # first record of each run
        self._run_count = np.zeros(0, np.int64)

    def __len__(self) -> int:
        """Pieces held."""
        return self._short + len(self._long)

    def features(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(the records of the texts' pieces, text after text and in order; how many
        records each text has). Every text must be ASCII."""
        with self._lock:
            if len(self) >= self.max_pieces:
                self.clear()
            return self._features(texts)

    def _features(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        joined = " ".join(texts)
        raw = joined.encode("ascii")
        starts, ends = self._pieces(raw)
        owner = np.searchsorted(np.cumsum([len(t) + 1 for t in texts]), starts, side="right")
        lengths = ends - starts
        # the uint64 that starts at each byte (a view); bytes past a piece are masked off
        at = np.ndarray((len(raw) + KEY_BYTES - 7,), "<u8", raw + bytes(KEY_BYTES), strides=(1,))
        low = at[starts] & _LOW_BYTES[np.minimum(lengths, 8)]
        high = np.zeros(len(starts), np.uint64)
        wide = np.flatnonzero(lengths > 8)
        high[wide] = at[starts[wide] + 8] & _LOW_BYTES[np.minimum(lengths[wide] - 8, 8)]
        short = lengths <= KEY_BYTES
        runs = self._find(low, high, short)
        self._read_new(joined, runs, starts, ends, low, high)
        view = np.frombuffer(self._records, self._record)
        counts = self._run_count[runs]
        first = np.repeat(self._run_start[runs] - np.cumsum(counts) + counts, counts)
        records = view[first + np.arange(len(first))]
        del view  # the bytearray may grow again
        return records, np.bincount(owner, weights=counts, minlength=len(texts)).astype(np.int64)

    @staticmethod
    def _pieces(data: bytes) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) byte offsets of the pieces of ASCII ``data``, in order."""
        kinds = np.frombuffer(data.translate(_KINDS), np.uint8)
        chunk = np.empty(len(kinds) + 2, bool)
        chunk[0] = chunk[-1] = False
        np.not_equal(kinds, _GAP, out=chunk[1:-1])
        edges = np.flatnonzero(chunk[1:] != chunk[:-1])
        starts, ends = edges[0::2], edges[1::2]
        marks = np.flatnonzero(kinds >= _DIGIT)  # digits, ``_``, quotes, ``.`` and ``,``
        owner = np.searchsorted(starts, marks, side="right") - 1
        kind = kinds[marks]
        # the chunks to cut: without a digit or a ``'`` between two letters (a ``'`` that can
        # join two words: it joins none after a ``_``)
        stops = kind == _DIGIT
        quotes = np.flatnonzero(kind == _QUOTE)
        quotes = quotes[(marks[quotes] > 0) & (marks[quotes] < len(kinds) - 1)]
        if len(quotes):
            before, after = kinds[marks[quotes] - 1], kinds[marks[quotes] + 1]
            stops[quotes] = (before >= _LOWER) & (before <= _UPPER) & (after >= _LOWER) & (after <= _UPPER)
        plain = np.bincount(owner[stops], minlength=len(starts)) == 0
        cuts = marks[((kind == _JOIN) | (kind == _STOP)) & plain[owner]]
        # a lower-case letter followed by an upper-case one: a camelCase boundary, where the
        # token rules put a space
        camel = np.flatnonzero((kinds[1:] == _UPPER) & (kinds[:-1] == _LOWER)) + 1
        if len(camel):
            camel = camel[plain[np.searchsorted(starts, camel, side="right") - 1]]
        if len(cuts) or len(camel):  # a cut ends one piece and starts the next; so does a boundary
            starts = np.sort(np.concatenate([starts, cuts + 1, camel]), kind="stable")
            ends = np.sort(np.concatenate([ends, cuts, camel]), kind="stable")
        return _trimmed(kinds, starts, ends)

    def _home(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """The first slot to probe for each piece."""
        bits = len(self._slot_run).bit_length() - 1
        return (((low * _MIX[0]) ^ (high * _MIX[1])) >> np.uint64(64 - bits)).astype(np.int64)

    def _find(self, low: np.ndarray, high: np.ndarray, short: np.ndarray) -> np.ndarray:
        """The run of each short piece in the table, else -1 (all pieces probed at once)."""
        runs = np.full(len(low), -1, np.int64)
        pending = np.flatnonzero(short)
        slot = self._home(low[pending], high[pending])
        mask = len(self._slot_run) - 1
        while pending.size:
            run = self._slot_run[slot]
            hit = (self._low[slot] == low[pending]) & (self._high[slot] == high[pending]) & (run >= 0)
            runs[pending[hit]] = run[hit]
            go = (run >= 0) & ~hit
            pending, slot = pending[go], (slot[go] + 1) & mask
        return runs

    def _place(self, low: np.ndarray, high: np.ndarray, runs: np.ndarray) -> None:
        """Put pieces absent from the table (distinct) into free slots, by rounds: each
        empty slot takes one of the pieces that reach it."""
        slot = self._home(low, high)
        pending = np.arange(len(runs))
        mask = len(self._slot_run) - 1
        while pending.size:
            free = self._slot_run[slot] < 0
            taken, first = np.unique(slot[free], return_index=True)
            won = pending[free][first]
            self._low[taken], self._high[taken], self._slot_run[taken] = low[won], high[won], runs[won]
            left = np.ones(len(pending), bool)
            left[np.flatnonzero(free)[first]] = False
            pending, slot = pending[left], (slot[left] + 1) & mask
        self._short += len(runs)

    def _add_short(self, low: np.ndarray, high: np.ndarray, runs: np.ndarray) -> None:
        """Add new short pieces, first doubling the table as often as needed to stay at
        most a quarter full."""
        size = len(self._slot_run)
        if 4 * (self._short + len(runs)) > size:
            held = self._slot_run >= 0
            low, high = np.concatenate([self._low[held], low]), np.concatenate([self._high[held], high])
            runs = np.concatenate([self._slot_run[held], runs])
            while 4 * len(runs) > size:
                size *= 2
            self._low, self._high = np.zeros(size, np.uint64), np.zeros(size, np.uint64)
            self._slot_run, self._short = np.full(size, -1, np.int64), 0
        self._place(low, high, runs)

    def _read_new(self, joined: str, runs: np.ndarray, starts, ends, low, high) -> None:
        """Fill ``runs`` for the pieces the table does not know: each distinct one read
        once, its features added as a new run; the new short pieces join the table."""
        todo = np.flatnonzero(runs < 0)
        if not len(todo):
            return
        seen: dict[str, int] = {}
        added: list[int] = []  # indices of new short pieces
        new_records: list[bytes] = []
        next_run = len(self._run_start)
        for i, start, end in zip(todo.tolist(), starts[todo].tolist(), ends[todo].tolist()):
            piece = joined[start:end]
            run = seen.get(piece)
            if run is None:
                run = self._long.get(piece) if end - start > KEY_BYTES else None
                if run is None:
                    run = next_run + len(new_records)
                    new_records.append(self._features_of(piece))
                    if end - start > KEY_BYTES:
                        self._long[piece] = run
                    else:
                        added.append(i)
                seen[piece] = run
            runs[i] = run
        if new_records:
            sizes = np.array([len(r) for r in new_records], np.int64) // self._record.itemsize
            base = len(self._records) // self._record.itemsize
            self._run_start = np.concatenate([self._run_start, base + np.cumsum(sizes) - sizes])
            self._run_count = np.concatenate([self._run_count, sizes])
            self._records += b"".join(new_records)
        if added:
            new = np.array(added)
            self._add_short(low[new], high[new], runs[new])
