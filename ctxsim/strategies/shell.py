"""Whole-file writes and reads in a shell command (a bash-only agent's file operations).

:func:`file_command` reads one command string the way a bash tool receives it and says
whether it writes a whole file with a heredoc or shows a whole file, and which path:

* a write: ``cat > P <<EOF`` / ``cat <<'EOF' > P`` / ``cat <<EOF >P`` / ``tee P <<EOF``
  (any delimiter, quoted or not, ``<<-`` too) as the whole first line, then the body up
  to the delimiter line; commands after the delimiter line (``python P`` to run what was
  just written) do not change that the heredoc wrote the whole file;
* a read: ``cat P``, ``cat -n P``, ``nl P`` or ``nl -ba P`` as the whole command.

Either may start with one ``cd DIR && ``. Anything else is neither: a pipe or a second
command after the read, more on the heredoc's first line, an append (``>>``),
``sed -n``, ``head``, ``grep``, several files, glob patterns, variables.

Paths rule: a path is normalized (``posixpath.normpath``: ``./x.py`` is ``x.py``,
``a/../b`` is ``b``); a relative path after a leading ``cd DIR`` is joined to ``DIR``
(``cd /testbed && cat x.py`` reads ``/testbed/x.py``); without one it stays relative
(the working directory is not known), so ``x.py`` and ``/testbed/x.py`` are two paths.

:func:`superseded_command` rewrites a write command with its body replaced by a marker.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass

#: characters a path may not hold to be read as one literal file (globs, variables, ...)
_NOT_LITERAL = set("*?[]{}$`~")
#: what every write or read starts with (a quick test before the shell words are read)
_START = re.compile(r"\s*(cd\s+\S+\s*&&\s*)?(cat|nl|tee)\s")
#: a shell word or a run of operator characters of a line without double quotes or
#: backslashes (a single-quoted part of a word is literal; its quotes go)
_PLAIN_WORD = re.compile(r"[();<>|&]+|(?:[^ \t\r\n();<>|&']+|'[^']*')+")
#: the whole-file read commands: the words before the path
_READS = (("cat",), ("cat", "-n"), ("nl",), ("nl", "-ba"))


@dataclass(frozen=True)
class FileCommand:
    """What a command does to one file: ``kind`` ``"write"`` (the whole file, from a
    heredoc) or ``"read"`` (the whole file shown); ``path`` normalized (module docstring).
    ``body``: for a write, the (start, end) character offsets of the heredoc's body in
    the command (the lines between the first line and the delimiter line)."""

    kind: str
    path: str
    body: tuple[int, int] = (0, 0)


def file_command(command: str) -> FileCommand | None:
    """The whole-file write or read ``command`` is, else None (module docstring)."""
    if not _START.match(command):
        return None
    text = command.lstrip()
    first, newline, rest = text.partition("\n")
    words = _words(first)
    if not words:
        return None
    directory, words = _after_cd(words)
    if words is None:
        return None
    if "<<" in words:
        start = len(command) - len(text) + len(first) + len(newline)
        return _write(words, rest, start, directory)
    if not rest.strip() and len(words) >= 2 and tuple(words[:-1]) in _READS:
        path = _path(words[-1], directory)
        return FileCommand("read", path) if path else None
    return None


def superseded_command(command: str, write: FileCommand, marker: str) -> str:
    """``command`` (a write that :func:`file_command` read as ``write``) with its heredoc
    body replaced by ``marker``; its first line, delimiter line and anything after stay."""
    start, end = write.body
    return command[:start] + marker + command[end:] if end > start else command


def _words(line: str) -> list[str] | None:
    """Shell words of one line, operators apart (``>P`` is ``>``, ``P``); None when unbalanced.

    A line without double quotes or backslashes and with its single quotes paired is
    read by :data:`_PLAIN_WORD` (what shlex gives it, several times faster); any other
    by shlex."""
    if '"' not in line and "\\" not in line and not line.count("'") % 2:
        return [word.replace("'", "") if "'" in word else word for word in _PLAIN_WORD.findall(line)]
    return shlex_words(line)


def shlex_words(line: str) -> list[str] | None:
    """shlex's words of a shell line (operators apart, no comments); None when it
    cannot read the line (an open quote)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return None


def _after_cd(words: list[str]) -> tuple[str, list[str] | None]:
    """(the directory of a leading ``cd DIR &&``, or "", the words after it; None when
    the ``cd`` is not followed by ``&&`` and a command)."""
    if words[:1] != ["cd"]:
        return "", words
    if len(words) < 4 or words[2] != "&&" or not _literal(words[1]):
        return "", None
    return posixpath.normpath(words[1]), words[3:]


def _write(words: list[str], rest: str, start: int, directory: str) -> FileCommand | None:
    """The heredoc write whose first line (after any ``cd``) is ``words`` and whose
    following text ``rest`` starts at offset ``start`` of the command."""
    at = words.index("<<")
    if at + 1 >= len(words):
        return None
    delimiter = words[at + 1]
    strip_tabs = delimiter.startswith("-")
    delimiter = delimiter[1:] if strip_tabs else delimiter
    others = words[:at] + words[at + 2 :]
    if not delimiter or not _literal(delimiter):
        return None
    if len(others) == 3 and others[0] == "cat" and others[1] == ">":
        target = others[2]
    elif len(others) == 2 and others[0] == "tee":
        target = others[1]
    else:
        return None
    offset = delimiter_line(rest, delimiter, strip_tabs)
    if offset is None:
        return None
    path = _path(target, directory)
    return FileCommand("write", path, (start, start + max(0, offset - 1))) if path else None


def delimiter_line(text: str, delimiter: str, strip_tabs: bool) -> int | None:
    """Where the first line of ``text`` (lines split at ``\\n``) that is ``delimiter``
    starts (after leading tabs when ``strip_tabs``: a ``<<-`` heredoc), else None. Found
    with ``str.find`` from one occurrence of the delimiter to the next, not by a loop over
    the lines of a long body."""
    at = text.find(delimiter)
    while at >= 0:
        end = at + len(delimiter)
        if end == len(text) or text[end] == "\n":
            line = text.rfind("\n", 0, at) + 1
            if line == at or (strip_tabs and not text[line:at].strip("\t")):
                return line
        at = text.find(delimiter, at + 1)
    return None


def _path(word: str, directory: str) -> str | None:
    """``word`` as a normalized file path (module docstring), None when not one literal path."""
    if not word or word.startswith("-") or not _literal(word) or word in ("/dev/null", "-"):
        return None
    if directory and not word.startswith("/"):
        word = posixpath.join(directory, word)
    return posixpath.normpath(word)


def _literal(word: str) -> bool:
    return not (_NOT_LITERAL & set(word)) and word not in ("&&", "||", ";", "|", ">", ">>", "<", "&")

