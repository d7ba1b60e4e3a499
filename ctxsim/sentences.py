"""A hand-written sentence splitter (no NLTK: its data cannot be downloaded here).

Every sentence is an exact substring of the input, stripped of surrounding
whitespace, so extracted text stays verbatim and planted values survive intact.
Together the sentences hold every non-whitespace character of the input, in order.

How text is cut:

* fenced blocks (```` ``` ````; a last fence line that nothing closes opens no
  block and is a code line of its own), code lines and log lines: each non-empty line is
  one sentence (a line is code-like when it starts like a statement, a log record,
  a stack frame or a shell prompt, or is indented by 4+ spaces, or opens/closes a
  block);
* bullet (``-``, ``*``, ``•``, ``+``) and numbered (``1.``, ``2)``) lines and
  markdown headings start a new block, as does a blank line or any other line,
  except that an unindented line starting with a lowercase letter continues the
  prose block above (wrapped prose) unless that block ends with ``:``;
* prose blocks split after ``.``, ``!``, ``?`` or ``…`` (and closing quotes or
  brackets) followed by whitespace, unless the next word starts lowercase or
  the period ends an abbreviation (``e.g.``, ``Mr.``, an initial ``J.``, ``U.S.``)
  or a list number. Periods inside ``3.2.1``, ``$1,250.00``, ``/srv/app.py`` or
  URLs are never followed by whitespace, so they never split.
"""

from __future__ import annotations

import re
from functools import lru_cache

ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof sr jr st mt no nos fig figs vol vols pp ch sec eq approx vs viz cf al e.g i.e
    a.m p.m jan feb mar apr jun jul aug sep sept oct nov dec inc ltd corp co dept est ref
    """.split()
)

_FENCE = re.compile(r"^\s*(```|~~~)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*•+]\s|\d{1,3}[.)]\s|#{1,6}\s)")
#: how a code or log line starts (matched at the start of the line, :func:`_is_code_line`)
_CODE_LINE = re.compile(
    r"""(?:\t|\ {4,})\S
    |\s*(?:def|class|import|return|elif|else|try|except|finally|with|while|for|if|function|const|let|var
            |public|private|protected|static|package|func|fn|async|await|raise|throw|yield)(?:\s|\(|:|$)
    |\s*from\s+\S+\s+import\b
    |\s*(?:\$\s|>>>\s|\#include|//|/\*|\*/|<!--|</?\w+[^>]*>|\|)
    |\s*@\w[\w.]*(?:\(.*\))?\s*$
    |\s*(?:[{})\]]|\[\s*[\]"'\d{\[])
    |\s*\[?\d{4}-\d{2}-\d{2}[T\ ]\d
    |\s*\[?\d{2}:\d{2}:\d{2}
    |\s*\[?(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|FATAL|CRITICAL)\b
    |\s*(?:Traceback\ \(|File\ "|at\ [\w$.<>]+\()
    |\s*\w*(?:Error|Exception):
    """,
    re.VERBOSE,
)
#: a line ending (before trailing whitespace) with one of these is code too
_CODE_END = ("{", ";")
#: a sentence end: a run of ``.``, ``!`` and ``?``, or one ``…``, then closing quotes or
#: brackets, before whitespace. Written to start with one character class (the second
#: and later marks of a run follow a ``.``, ``!`` or ``?`` only), so ``re`` scans for that
#: class instead of trying a two-way branch at every character: the same matches as
#: ``(?:[.!?]+|…)["'”’)\]]*(?=\s)``, found several times sooner
_BOUNDARY = re.compile(r"[.!?…](?:(?<=[.!?])[.!?]*)?[\"'”’)\]]*(?=\s)")
_NEXT_CHAR = re.compile(r"\s*(\S)")
_INITIALISM = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$|^[A-Z]$")


#: One sentence, ``(start, end, code)``: ``text[start:end]``; ``code`` for a code or log
#: line. A plain tuple, not a named one: the garbage collector stops tracking a tuple of
#: ints and bools at its first collection and never a named tuple, and the memo of
#: :func:`segments` holds a couple of hundred thousand of them (each full collection of a
#: live env walked them all: 11 of them took 2.95-3.34 s over 1,500 steps on new contexts,
#: 7 took 1.14-1.24 s with plain tuples)
Segment = tuple[int, int, bool]


def split_sentences(text: str, *, by_line: bool = False) -> list[str]:
    """The sentences of ``text``, each an exact substring, in order.

    ``by_line=True`` treats every non-empty line as one sentence (code, logs).
    """
    return [text[start:end] for start, end, _ in segments(text, by_line=by_line)]


#: distinct (text, by_line) inputs :func:`segments` keeps: a context's units are split by
#: coherence, the summarizer and the rule finder, and a fresh context brings hundreds
SEGMENTS_KEPT = 16_384


@lru_cache(maxsize=SEGMENTS_KEPT)
def segments(text: str, *, by_line: bool = False) -> tuple[Segment, ...]:
    """Sentence spans of ``text`` (see :func:`split_sentences`), cached by content."""
    if by_line:
        return _line_segments(text)
    out: list[Segment] = []
    block: list[int] | None = None  # [start, end] of the current prose block
    colon = False  # whether the current prose block ends with ":" (before trailing whitespace)
    in_fence = False
    lines = text.splitlines(keepends=True)
    fences, lone = _fences(lines) if "```" in text or "~~~" in text else (frozenset(), -1)
    pos = 0
    for index, line in enumerate(lines):
        start, pos = pos, pos + len(line)
        body = line.rstrip("\r\n")
        if not body or body.isspace():
            if block is not None:
                _flush(text, block, out)
                block = None
            continue
        end = start + len(body)
        fence = index in fences
        if not (in_fence or fence) and block is not None and body[:1].islower() and not colon:
            block[1] = end  # wrapped prose
            colon = body.rstrip().endswith(":")
            continue
        if in_fence or fence or index == lone or (not _LIST_ITEM.match(body) and _is_code_line(body)):
            if block is not None:
                _flush(text, block, out)
                block = None
            lead = len(body) - len(body.lstrip())
            out.append((start + lead, start + len(body.rstrip()), True))
            in_fence = in_fence != fence
            continue
        if block is not None:
            _flush(text, block, out)
        block = [start, end]
        colon = body.rstrip().endswith(":")
    if block is not None:
        _flush(text, block, out)
    return tuple(out)


def is_fence_line(line: str) -> bool:
    """Whether ``line`` (one line) is a code fence's marker line (```` ``` ```` or ``~~~``, after any indentation)."""
    return ("```" in line or "~~~" in line) and _FENCE.match(line) is not None


def _fences(lines: list[str]) -> tuple[frozenset[int], int]:
    """(indices of the fence lines that open or close a fenced block, index of a last
    fence line that nothing closes, or -1). In order, each fence line opens a block and
    the next one closes it; a last one left open (a text cut, or an extract that kept
    only the opening line) opens no block: it is a code line of its own and the lines
    after it are read as they are, so a rule after it stays prose."""
    found = [i for i, line in enumerate(lines) if is_fence_line(line)]
    if len(found) % 2:
        return frozenset(found[:-1]), found[-1]
    return frozenset(found), -1


#: characters ``str.splitlines`` breaks lines at (``\r\n`` is one break); all are whitespace
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
#: one line stripped of surrounding whitespace: from its first to its last character that is
#: not whitespace (``\S`` never matches a line break)
_STRIPPED_LINE = re.compile(rf"\S(?:[^{LINE_BREAKS}]*\S)?")


def _line_segments(text: str) -> tuple[Segment, ...]:
    """:func:`segments` with ``by_line``: every non-blank line (``str.splitlines``),
    stripped, is one code segment; found with one regex scan."""
    return tuple([(*m.span(), True) for m in _STRIPPED_LINE.finditer(text)])


def _is_code_line(body: str) -> bool:
    """Whether a line (no line break) is code-like (see the module docstring)."""
    return _CODE_LINE.match(body) is not None or body.rstrip().endswith(_CODE_END)


def _flush(text: str, block: list[int], out: list[Segment]) -> None:
    """Split one prose block (``[start, end]`` in ``text``) into sentences and append them to ``out``."""
    start, end = block
    chunk = text[start:end]
    piece_start = 0
    for m in _BOUNDARY.finditer(chunk):
        nxt = _NEXT_CHAR.match(chunk, m.end())
        if nxt is None or nxt.group(1).islower() or _is_abbreviation(chunk, m):
            continue
        _append(start, chunk, piece_start, m.end(), out)
        piece_start = m.end()
    _append(start, chunk, piece_start, len(chunk), out)


def _is_abbreviation(chunk: str, m: re.Match) -> bool:
    """True when the boundary ``m`` is the period of an abbreviation or of a list number
    (digits that are the block's first word)."""
    if m.group() != ".":
        return False
    start = m.start()
    while start > 0 and not chunk[start - 1].isspace():
        start -= 1
    token = chunk[start : m.start()].lstrip("([\"'“‘")
    if not token:
        return False
    if token.lower() in ABBREVIATIONS or _INITIALISM.match(token):
        return True
    return token.isdigit() and (not start or chunk[:start].isspace())


def _append(offset: int, chunk: str, a: int, b: int, out: list[Segment]) -> None:
    piece = chunk[a:b]
    stripped = piece.strip()
    if stripped:
        lead = len(piece) - len(piece.lstrip())
        out.append((offset + a + lead, offset + a + lead + len(stripped), False))
