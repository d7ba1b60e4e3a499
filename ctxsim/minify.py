"""Code minification and log compression: the text shrinkers of ``content_type_chunking``.

:func:`minify_code` drops comments, docstrings, blank lines and trailing spaces
without touching string literals or identifiers; :func:`compress_log` collapses
repeated log lines and keeps lines by severity up to a token budget (cl100k
tokens). Both are pure functions of their arguments and remember their last
:data:`MEMO_SIZE` results by content: a strategy asks first whether a unit would
shrink, then shrinks it, and every state of a context holds the same units.
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
import warnings
from functools import lru_cache

from .tokens import count_tokens

#: results each of minify_code and compress_log remembers (by content)
MEMO_SIZE = 2048

# --------------------------------------------------------------------------- code minification

_FENCED = re.compile(
    r"^(?P<open>[ \t]*(?P<mark>```|~~~)(?P<lang>[^\n`]*)\n)(?P<body>.*?)(?P<close>^[ \t]*(?P=mark)[ \t]*$)", re.M | re.S
)
_HASH_LANGS = frozenset(
    "python py python3 sh bash shell zsh ruby rb yaml yml toml perl r make makefile dockerfile".split()
)
_C_LANGS = frozenset(
    "c cpp c++ h hpp java javascript js jsx ts tsx typescript go golang rust rs kotlin swift cs csharp scala php".split()
)
#: languages whose only comments are ``/* */`` (``//`` starts a URL there: ``url(//cdn...)``)
_BLOCK_LANGS = frozenset("css scss less".split())
#: lines that look like a '#'-comment language (Python fragments, shell) vs C-like code
_HASH_HINTS = re.compile(
    r"^\s*(?:def |class \w+[(:]|import \w|from [\w.]+ import |elif |except\b"
    r"|#(?!include|define|if|endif|pragma|else|undef)\s)",
    re.M,
)
#: C-like lines; a ``//`` right after an operand may be Python's floor division, after ``:`` a URL
_C_HINTS = re.compile(r"(?:^|(?<![\w)\]:\s]))[ \t]*//|/\*|[;{}][ \t]*$", re.M)


def minify_code(code: str, *, strip_docstrings: bool = True) -> str:
    """Code without comments, blank lines and trailing spaces (and docstrings).

    Design 001's ``minifyCode``, made safe for real code: string literals are never
    touched and line structure is kept (Python needs it), so every identifier of
    the code survives. The language decides what a comment is:

    * Python (the text parses): exact, with :mod:`tokenize`; ``#`` comments go, and
      with ``strip_docstrings`` so do docstrings and other bare string statements
      (a block left empty gets ``...``); the result must still parse, else only
      comments are removed, else the code is returned as it was;
    * other ``#``-comment languages (shell, YAML, Python fragments): ``#`` comments
      that start a line or follow whitespace;
    * C-like languages (C, Java, JS, Go, Rust, ...): ``//`` and ``/* */`` comments
      (``#`` is a preprocessor line there and stays); CSS: ``/* */`` only; an
      unclosed ``/*`` is not a comment; in text not tagged C-like, a ``//`` right
      after an operand (name, number, ``)``, ``]``) may be Python's floor division:
      it is kept and is no hint of C;
    * untagged text with no hint of either kind of comment: blank lines and
      trailing spaces only.

    Markdown fences are minified block by block with their language tag; text
    outside fences is left as it is. Line breaks are normalized to ``\n``. Never
    returns an empty string.
    """
    return _minified(code, strip_docstrings)


@lru_cache(maxsize=MEMO_SIZE)
def _minified(code: str, strip_docstrings: bool) -> str:
    """:func:`minify_code`, computed once per (code, strip_docstrings) while remembered."""
    code = code.replace("\r\n", "\n").replace("\r", "\n")  # tokenize also breaks lines at a bare \r
    if _FENCED.search(code):
        out = _FENCED.sub(
            lambda m: m["open"] + _minify_block(m["body"], m["lang"].strip(), strip_docstrings) + "\n" + m["close"],
            code,
        )
    else:
        out = _minify_block(code, "", strip_docstrings)
    return out if out.strip() else code


def _minify_block(code: str, language: str, strip_docstrings: bool) -> str:
    mode = _language_mode(code, language)
    if mode == "python":
        for docstrings in ((True, False) if strip_docstrings else (False,)):
            out = _minify_python(code, docstrings)
            if out is not None:
                return out
        return code
    if mode == "none":
        return _squeeze(code.split("\n"), set(), set())
    return _squeeze(*_scan(code, hash_comments=mode == "hash", line_comments=mode != "block",
                           floor_division=language.lower() not in _C_LANGS))


def _parses(code: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # prose parsed as Python warns ("invalid decimal literal")
        try:
            ast.parse(textwrap.dedent(code))
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # deep nesting exhausts the parser
            return False
    return True


def _language_mode(code: str, language: str) -> str:
    """"python", "hash" (``#`` comments), "c" (``//`` and ``/* */``), "block" (``/* */``)
    or "none" (no comment syntax recognized)."""
    lang = language.lower()
    if lang in _C_LANGS:
        return "c"
    if lang in _BLOCK_LANGS:
        return "block"
    if (not lang or lang in _HASH_LANGS) and _parses(code):
        return "python"
    if lang in _HASH_LANGS:
        return "hash"
    hash_hints, c_hints = len(_HASH_HINTS.findall(code)), len(_C_HINTS.findall(code))
    if not hash_hints and not c_hints:
        return "none"
    return "hash" if hash_hints > c_hints else "c"


def _minify_python(code: str, strip_docstrings: bool) -> str | None:
    """Python minified with tokenize, or None when the result would not parse."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError, RecursionError, MemoryError):
        return None
    lines = code.split("\n")
    cut: dict[int, int] = {}  # 0-based line -> column where a comment starts
    keep_trailing: set[int] = set()  # lines ending inside a string literal
    keep_blank: set[int] = set()  # lines starting inside a string literal
    for tok in tokens:
        (srow, scol), (erow, _) = tok.start, tok.end
        if tok.type == tokenize.COMMENT:
            cut[srow - 1] = scol
        elif erow > srow:  # a multi-line string (or f-string part)
            keep_trailing.update(range(srow - 1, erow - 1))
            keep_blank.update(range(srow, erow))
    replaced: dict[int, str] = {}
    if strip_docstrings:
        significant = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT)]
        for i, tok in enumerate(significant):
            if tok.type != tokenize.STRING or i + 1 >= len(significant):
                continue
            prev = significant[i - 1].type if i else None
            if prev not in (None, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                continue
            if significant[i + 1].type not in (tokenize.NEWLINE, tokenize.ENDMARKER):
                continue
            after = significant[i + 2].type if i + 2 < len(significant) else tokenize.ENDMARKER
            alone = prev == tokenize.INDENT and after in (tokenize.DEDENT, tokenize.ENDMARKER)
            first, last = tok.start[0] - 1, tok.end[0] - 1
            for row in range(first, last + 1):
                replaced[row] = ""
            if alone:  # the block's only statement: keep the block valid
                replaced[first] = lines[first][: tok.start[1]] + "..."
    for row, text in replaced.items():
        lines[row] = text
        cut.pop(row, None)
        keep_trailing.discard(row)
        keep_blank.discard(row)
    for row, col in cut.items():
        lines[row] = lines[row][:col]
    out = _squeeze(lines, keep_trailing, keep_blank)
    return out if _parses(out) else None


def _scan(
    code: str, *, hash_comments: bool, line_comments: bool = True, floor_division: bool = False
) -> tuple[list[str], set[int], set[int]]:
    """Lines of ``code`` with comments removed by a string-aware scanner: ``#``
    comments with ``hash_comments``, else ``/* */`` ones and, with
    ``line_comments``, ``//`` ones (with ``floor_division``, not one right after an
    operand).

    Returns (lines, lines ending inside a string, lines starting inside a string).
    """
    lines: list[str] = []
    keep_trailing: set[int] = set()
    keep_blank: set[int] = set()
    buf: list[str] = []

    def end_line(in_string: bool) -> None:
        lines.append("".join(buf))
        buf.clear()
        if in_string:
            keep_trailing.add(len(lines) - 1)
            keep_blank.add(len(lines))

    quote: str | None = None
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if quote is not None:
            if code.startswith(quote, i):
                buf.append(quote)
                i += len(quote)
                quote = None
            elif c == "\\" and i + 1 < n and code[i + 1] != "\n":
                buf.append(code[i : i + 2])
                i += 2
            elif c == "\n":
                if len(quote) == 1 and quote != "`":  # an unterminated one-line string ends here
                    quote = None
                end_line(quote is not None)
                i += 1
            else:
                buf.append(c)
                i += 1
            continue
        if c == "\n":
            end_line(False)
            i += 1
        elif hash_comments and c == "#" and (i == 0 or code[i - 1] in " \t\n"):
            j = code.find("\n", i)
            i = n if j < 0 else j
        elif (
            not hash_comments and line_comments and code.startswith("//", i) and not (i and code[i - 1] == ":")
            and not (floor_division and _ends_with_operand(buf))
        ):
            j = code.find("\n", i)
            i = n if j < 0 else j
        elif not hash_comments and code.startswith("/*", i) and (close := code.find("*/", i + 2)) >= 0:
            end = close + 2
            breaks = code.count("\n", i, end)
            if breaks:
                for _ in range(breaks):
                    end_line(False)
            else:
                buf.append(" ")  # a/**/b must not become ab
            i = end
        elif c in "'\"`":
            quote = c * 3 if hash_comments and code.startswith(c * 3, i) else c
            buf.append(quote)
            i += len(quote)
        else:
            buf.append(c)
            i += 1
    lines.append("".join(buf))
    return lines, keep_trailing, keep_blank


def _ends_with_operand(buf: list[str]) -> bool:
    """Whether the line so far ends (before spaces) with a name, number, ``)`` or ``]``."""
    for piece in reversed(buf):
        piece = piece.rstrip(" \t")
        if piece:
            return piece[-1].isalnum() or piece[-1] in "_)]"
    return False


def _squeeze(lines: list[str], keep_trailing: set[int], keep_blank: set[int]) -> str:
    """Join lines without trailing spaces and blank lines, except inside strings."""
    out = []
    for i, line in enumerate(lines):
        if i not in keep_trailing:
            line = line.rstrip()
        if line.strip() or i in keep_blank:
            out.append(line)
    return "\n".join(out)


# --------------------------------------------------------------------------- log compression

_NUMBER = re.compile(r"\d+")
_SEVERE = re.compile(r"\b(?:ERROR|FATAL|CRITICAL|SEVERE|PANIC|Traceback|Exception|\w+Error)\b")
_WARNING = re.compile(r"\bWARN(?:ING)?\b")


def collapse_repeats(lines: list[str]) -> list[str]:
    """Runs of lines equal up to their numbers (timestamps, counters) as one line
    ``"<first line> [×N]"``."""
    out: list[str] = []
    key = first = None
    count = 0
    for line in lines + [None]:
        k = None if line is None else _NUMBER.sub("#", line.strip())
        if line is not None and k == key:
            count += 1
            continue
        if first is not None:
            out.append(first if count == 1 else f"{first} [×{count}]")
        key, first, count = k, line, 1
    return out


def compress_log(text: str, max_tokens: int) -> str:
    """A log cut to at most ``max_tokens`` tokens, keeping what matters.

    Repeated lines are collapsed first (:func:`collapse_repeats`); if that is not
    enough, whole lines are kept by severity — ERROR/FATAL/exception lines, then
    WARN lines, then the rest, the most recent first within a class — and printed
    in their original order followed by ``[N log lines omitted]``.
    """
    return _compressed_log(text, max_tokens)


@lru_cache(maxsize=MEMO_SIZE)
def _compressed_log(text: str, max_tokens: int) -> str:
    """:func:`compress_log`, computed once per (text, max_tokens) while remembered."""
    lines = collapse_repeats([ln for ln in text.split("\n") if ln.strip()])
    joined = "\n".join(lines)
    if count_tokens(joined) <= max_tokens:
        return joined
    rank = sorted(range(len(lines)), key=lambda i: (_severity(lines[i]), -i))
    marker_budget = count_tokens(f"\n[{len(lines)} log lines omitted]")
    budget = max_tokens - marker_budget
    chosen: list[int] = []
    for i in rank:
        cost = count_tokens(lines[i]) + 1
        if cost <= budget:
            chosen.append(i)
            budget -= cost
    chosen.sort()
    while True:
        kept = [lines[i] for i in chosen]
        omitted = len(lines) - len(kept)
        out = "\n".join(kept + [f"[{omitted} log lines omitted]"])
        if count_tokens(out) <= max_tokens or not chosen:
            break
        chosen.remove(max(chosen, key=lambda i: (_severity(lines[i]), -i)))
    return out


def _severity(line: str) -> int:
    return 0 if _SEVERE.search(line) else 1 if _WARNING.search(line) else 2
