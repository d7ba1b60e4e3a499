"""Transcript cuts: a real conversation's first messages as the context, the rest as its future.

A transcript scenario with ``cut`` (:mod:`ctxsim.lab.scenarios`) keeps the first
:func:`cut_index` messages as the context (ended after a tool result, so every call
keeps its result); the messages after them are the
*future*: what the agent went on to do. The context's probes (:mod:`ctxsim.probes`)
are the strings of the context that the future uses again — ground truth from real
data: a break that loses them lost something the agent needed next.

Finding them (no model, no judge):

1. Each unit's text is split into candidate strings:

   - **paths** — a token with a ``/`` between name characters (``src/pkg/fields.py``,
     ``/testbed/reproduce.py``) or a file name with a known extension (``setup.py``);
     kind ``artifact``;
   - **identifiers** — a name of at least 4 characters with an underscore, a digit,
     or an upper-case letter after its first (``_serialize``, ``TimeDelta``,
     ``utf8``), outside paths (the names inside a path are the path's); kind
     ``fact`` (recall);
   - **numbers** — at least 3 digits, dots and commas between digits allowed (``344``,
     ``1474``, ``3.11.2``); kind ``fact``;
   - **error lines** — a line of a tool result that reads as an error
     (``TypeError: …``, ``No such file``, the patterns of
     :data:`ERROR_LINE`), stripped, at most 200 characters; kind ``fact``;
   - **task terms** — the words of the task (``state.task``: the issue title or the
     task message's first line) of at least 4 characters that are not stop words;
     kind ``continuation`` (a task term that is also a path or an identifier stays
     a task term).

2. Trivial candidates are excluded: shorter than 4 characters; English stop words
   and common shell and tool words (:data:`TRIVIAL`, compared in lower case); the
   argument names of tool calls (the keys of a ``[tool_call] name {json}`` line's
   arguments: the transcript format's own words, not the session's);
   anything the system prompt holds (the agent's instructions and tool
   documentation, not the session's state); and values that are everywhere: held
   by more than half of the context's units (when it has at least 4).

3. A candidate is a probe when the future uses it again: it is a candidate string
   of some future unit too (an error line: its text occurs in the future). Each
   distinct string is one probe (exact de-duplication; a path and the file name in
   it are two), planted as a :class:`~ctxsim.model.Fact` whose ``unit_id`` is the
   context unit where it first occurs, with that unit's priority and the line that
   holds it as its ``text``.

4. The user's instructions are not detected but listed by hand, per agent template
   (a scenario's ``instructions`` file, :mod:`ctxsim.lab.scenarios`;
   ``data/transcripts/instructions.yaml`` for the shipped transcripts): each listed
   sentence that a user message of the context states verbatim, outside a quoted
   demonstration, is a decision probe (kind ``rule``, ids ``cut-rule-<n>``), whether
   or not the future says it again — an instruction governs every later turn
   (:func:`stated_probes`). Without a list, a cut has no decision probes.

5. The task line itself (``state.task``, the issue or PR title) is a continuation
   probe, id ``cut-task``, planted at the task message (:func:`task_probe`): the task
   terms are answered wherever a term appears, the line only where the task is still
   stated.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, Sequence

from .model import ContextUnit, Fact

#: the lines between which a SWE-agent user message quotes a worked example before the
#: real task (a demonstration: P3 in a transcript, and no sentence of it instructs the agent)
DEMONSTRATION_MARK = "--- DEMONSTRATION ---"
DEMONSTRATION_END = "--- END OF DEMONSTRATION ---"
#: a line that reads as an error (the first one of a tool result is its error message)
ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|^\s*\w*(Error|Exception)\b.*:|No such file|command not found|syntax error|^\s*ERRORS?:",
    re.MULTILINE,
)
#: the words one of which every :data:`ERROR_LINE` match holds: a search for them tries
#: few alternatives at few places (``re`` skips to their first letters)
_ERROR_WORDS = re.compile(r"Error|Exception|ERROR|Traceback \(most recent call last\)|No such file|command not found|syntax error")


def search_error(text: str) -> re.Match | None:
    r"""``ERROR_LINE.search(text)``: the same match (start, end, groups), found where it can be.

    ``ERROR_LINE`` tries its six alternatives at every position of ``text``. A match holds
    one of :data:`_ERROR_WORDS` (none of them overlaps another) and starts either at it
    (the four literal alternatives) or at a line start (``^\s*\w*(Error|Exception)``,
    ``^\s*ERRORS?:``) before it with only whitespace and word characters between, so
    after the last character before the word's line that is not whitespace. Those places
    are tried with ``ERROR_LINE.match`` in increasing order, every word's after the one
    before's; the first that matches is the first place ``search`` would have matched
    (``match`` at a position is what ``search`` tries there; ``^`` looks at the real
    preceding character). ``tests/test_error_search.py`` checks spans and groups."""
    tried = -1  # every place up to here that can start a match has been tried
    match = ERROR_LINE.match
    for word in _ERROR_WORDS.finditer(text):
        at = word.start()
        line = text.rfind("\n", 0, at) + 1
        starts = [at, line] if at != line else [at]
        while line > tried + 1:  # line starts before it with only whitespace between
            before = text.rfind("\n", 0, line - 1) + 1
            if not text[before:line].isspace():
                break
            starts.append(before)
            line = before
        for start in sorted(starts):
            if start > tried:
                found = match(text, start)
                if found:
                    return found
        tried = at
    return None


#: shortest candidate string (characters); numbers need MIN_DIGITS digits
MIN_CHARS = 4
MIN_DIGITS = 3
#: longest error line kept as a probe, and longest probe text (characters)
MAX_LINE = 200
#: a candidate held by more than this share of the context's units is everywhere
EVERYWHERE_SHARE = 0.5
#: the "everywhere" rule applies to contexts of at least this many units
EVERYWHERE_MIN_UNITS = 4
FILE_EXTENSIONS = (
    "py", "pyi", "js", "ts", "tsx", "jsx", "json", "yaml", "yml", "toml", "cfg", "ini", "txt", "md", "rst", "sh",
    "c", "h", "cc", "cpp", "hpp", "go", "rs", "java", "rb", "php", "html", "css", "sql", "csv", "xml", "lock",
)
#: stop words and common shell / tool words that never make a probe (lower case)
TRIVIAL = frozenset(
    """
    about above after again against also because been before being below between both could does doing down during
    each from further have having here into itself just more most must only other over same should some such than that
    their them then there these they this those through under until very were what when where which while will with
    would your yours issue please thanks hello there line lines file files code test tests true false none null self
    return import class print python python3 bash shell echo grep sed awk find cat head tail less more chmod mkdir
    touch sudo export source pip install pytest git diff status commit checkout branch clone open edit create goto
    scroll_up scroll_down search_dir search_file find_file submit exit_code stdout stderr output error errors
    warning warnings traceback recent call last directory current bash-$ usage help tool_call function functions
    need needs want fixed fixing make sure like currently following solving
    """.split()
)

_PATH = re.compile(r"(?<![\w/.-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]*\w|(?<![\w/.-])[\w-]+\.(?:" + "|".join(FILE_EXTENSIONS) + r")\b")
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"(?<![\w.])\d[\d.,]*\d(?![\w])")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_ARGUMENT_KEY = re.compile(r'"(\w+)"\s*:')
#: a ``[tool_call] NAME ARGS_JSON`` line of an assistant unit (how :mod:`ctxsim.transcripts` writes
#: a tool call): (NAME, ARGS_JSON); the one pattern of that line, here below the modules that read it
TOOL_CALL_LINE = re.compile(r"^\[tool_call\] (\S+) ?(.*)$", re.MULTILINE)


def demonstration_spans(text: str) -> tuple[tuple[int, int], ...]:
    """The ``(start, end)`` spans of ``text`` that quote a demonstration, each from its
    :data:`DEMONSTRATION_MARK` to the end of its :data:`DEMONSTRATION_END` line (to the
    end of the text when nothing closes it), in order."""
    spans: list[tuple[int, int]] = []
    start = text.find(DEMONSTRATION_MARK)
    while start >= 0:
        end = text.find(DEMONSTRATION_END, start)
        end = len(text) if end < 0 else end + len(DEMONSTRATION_END)
        spans.append((start, end))
        start = text.find(DEMONSTRATION_MARK, end)
    return tuple(spans)


def cut_index(tool_results: Sequence[bool], cut: float) -> int:
    """How many of a transcript's messages form the context at share ``cut`` (in (0, 1)).

    ``tool_results`` says per message whether it is a tool result. The cut falls after
    ``round(cut · n)`` messages (at least 1, at most n − 1: the future holds one or
    more), moved back to just after the last tool result at or before that point, so
    that every call in the context keeps its result — but never into the first two
    messages (the system prompt and the task); a transcript without a tool result
    there is cut at ``round(cut · n)``."""
    n = len(tool_results)
    if n < 2:
        raise ValueError(f"a cut needs at least two messages, the transcript has {n}")
    k = min(n - 1, max(1, round(cut * n)))
    end = k
    while end > 2 and not tool_results[end - 1]:
        end -= 1
    return end if end > 2 or (end == 2 and tool_results[1]) else k


def _trivial(token: str) -> bool:
    return len(token) < MIN_CHARS or token.lower() in TRIVIAL


def _is_identifier(token: str) -> bool:
    """Whether a token of :data:`_IDENT` (ASCII letters, digits and ``_``) reads as an
    identifier: it holds ``_`` or a digit (so it is not all letters), or a capital after
    its first character (which ``lower`` changes)."""
    rest = token[1:]
    return not token.isalpha() or rest != rest.lower()


def candidates(text: str, *, tool_output: bool = False) -> dict[str, str]:
    """Candidate strings of ``text`` and their kinds (artifact for paths, fact for
    identifiers, numbers and, in ``tool_output``, error lines); trivial ones left out.
    A new dict each call, from a memo per distinct input (the cuts of one session share
    most of their messages, in the context or in the future)."""
    return dict(_candidates(text, tool_output))


#: distinct (text, tool_output) inputs :func:`candidates` keeps
CANDIDATES_KEPT = 16_384


@lru_cache(maxsize=CANDIDATES_KEPT)
def _candidates(text: str, tool_output: bool) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for match in _PATH.finditer(text):
        token = match.group().rstrip(".")
        if not _trivial(token) and any(c.isalpha() for c in token):
            out.setdefault(token, "artifact")
    text = _PATH.sub(" ", text)  # the names inside a path are the path's
    for token in _IDENT.findall(text):
        if _is_identifier(token) and not _trivial(token):
            out.setdefault(token, "fact")
    for match in _NUMBER.finditer(text):
        token = match.group()
        if sum(c.isdigit() for c in token) >= MIN_DIGITS:
            out.setdefault(token, "fact")
    if tool_output:
        for line in text.splitlines():
            line = line.strip()
            if search_error(line) and MIN_CHARS <= len(line) <= MAX_LINE:  # ERROR_LINE.search(line)
                out.setdefault(line, "fact")
    return tuple(out.items())


def task_terms(task: str) -> set[str]:
    """The task's key terms: its words of at least 4 characters that are not stop words."""
    return {w for w in _WORD.findall(task) if not _trivial(w)}


def argument_names(units: Iterable[ContextUnit]) -> set[str]:
    """The argument names of the tool calls in ``units`` (keys of ``[tool_call]`` lines' JSON)."""
    return {key for u in units for call in TOOL_CALL_LINE.finditer(u.content)
            for key in _ARGUMENT_KEY.findall(call[2])}


def _unit_candidates(unit: ContextUnit, terms: frozenset[str]) -> dict[str, str]:
    """The candidate strings of ``unit`` (value -> kind): :func:`candidates`, then the task
    terms it holds as whole words (:func:`held_terms`)."""
    found = candidates(unit.content, tool_output=unit.tool is not None)
    for term in held_terms(unit.content, terms):
        found[term] = "continuation"
    return found


#: a run of word characters (a task term made of them alone is found in one scan)
_WORD_RUN = re.compile(r"\w+")


@lru_cache(maxsize=CANDIDATES_KEPT)
def held_terms(text: str, terms: frozenset[str]) -> tuple[str, ...]:
    r"""The ``terms`` that ``text`` holds as whole words (``(?<!\w)term(?!\w)``), in order of
    their first occurrence in it (ties by the term), so the order, and with it a cut's
    probes' order and ids, is the same in every process (a set's order follows the
    process's string hashing). Terms of word characters alone are found in one scan
    (:func:`_words_pattern`): such a term occurs as a whole word exactly where a maximal
    run of word characters equals it, and those runs never overlap; any other term (the
    task's words may hold ``-``) is searched on its own."""
    held: dict[str, int] = {}
    words = tuple(sorted(t for t in terms if _WORD_RUN.fullmatch(t)))
    if words:
        for match in _words_pattern(words).finditer(text):
            held.setdefault(match.group(), match.start())
    for term in terms.difference(words):
        match = re.search(rf"(?<![\w]){re.escape(term)}(?![\w])", text)
        if match is not None:
            held[term] = match.start()
    return tuple(term for _, term in sorted((start, term) for term, start in held.items()))


@lru_cache(maxsize=256)
def _words_pattern(words: tuple[str, ...]) -> re.Pattern:
    """Every whole-word occurrence of any of ``words`` (each of word characters alone)."""
    return re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, words)) + r")(?!\w)")


def clear_caches() -> None:
    """Forget the memoized candidate strings and held terms of every text (what a cold
    measurement of building a cut starts from)."""
    _candidates.cache_clear()
    held_terms.cache_clear()


def _line_of(text: str, value: str) -> str:
    line = next((line.strip() for line in text.splitlines() if value in line), value)
    return line[:MAX_LINE]


def future_probes(context: Sequence[ContextUnit], future: Iterable[ContextUnit], task: str) -> tuple[Fact, ...]:
    """The probes of a cut: the context's candidate strings that the future uses again
    (see the module docstring), in order of first occurrence, ids ``cut-<kind>-<n>``."""
    terms = frozenset(task_terms(task))
    future = list(future)
    system = "\n".join(u.content for u in context if u.role == "system")
    arguments = argument_names([*context, *future])
    first: dict[str, tuple[str, ContextUnit]] = {}
    holders: dict[str, int] = {}
    for unit in context:
        if unit.role == "system":
            continue
        for value, kind in _unit_candidates(unit, terms).items():
            holders[value] = holders.get(value, 0) + 1
            first.setdefault(value, (kind, unit))
    future_text = "\n".join(u.content for u in future)
    used: set[str] = set()
    for unit in future:
        used.update(_unit_candidates(unit, terms))
    everywhere = len(context) >= EVERYWHERE_MIN_UNITS
    probes: list[Fact] = []
    counts: dict[str, int] = {}
    for value, (kind, unit) in first.items():
        if value in system or value in arguments or (everywhere and holders[value] > EVERYWHERE_SHARE * len(context)):
            continue
        if value not in used and not (" " in value and value in future_text):  # an error line said again
            continue
        counts[kind] = counts.get(kind, 0) + 1
        probes.append(Fact(f"cut-{kind}-{counts[kind]}", value, unit.id, priority=unit.priority, kind=kind,
                           text=_line_of(unit.content, value)))
    return tuple(probes)


def stated_probes(context: Sequence[ContextUnit], sentences: Iterable[str]) -> tuple[Fact, ...]:
    """The decision probes of ``context``: each of ``sentences`` (the user's
    instructions, listed by hand) that a user message states verbatim outside a quoted
    demonstration, planted at the first such unit with its priority, in the order of
    ``sentences``, ids ``cut-rule-<n>``; a sentence no user message states is left out."""
    users = [(unit, _outside_demonstrations(unit.content)) for unit in context if unit.role == "user"]
    probes: list[Fact] = []
    for sentence in dict.fromkeys(sentences):
        unit = next((unit for unit, text in users if sentence in text), None)
        if unit is not None:
            probes.append(Fact(f"cut-rule-{len(probes) + 1}", sentence, unit.id, priority=unit.priority, kind="rule",
                               text=sentence))
    return tuple(probes)


def _outside_demonstrations(text: str) -> str:
    """``text`` without its quoted demonstrations (each span of :func:`demonstration_spans`
    replaced by a line break, so no sentence joins across one)."""
    kept, start = [], 0
    for begin, end in demonstration_spans(text):
        kept.append(text[start:begin])
        start = end
    kept.append(text[start:])
    return "\n".join(kept)


def task_probe(task_unit: ContextUnit | None, task: str) -> tuple[Fact, ...]:
    """The continuation probe of the task line ``task`` (the title :mod:`ctxsim.transcripts`
    reads from ``task_unit``), planted at that unit: empty without a task or when the
    unit does not hold the line verbatim."""
    if task_unit is None or not task or task not in task_unit.content:
        return ()
    return (Fact("cut-task", task, task_unit.id, priority=task_unit.priority, kind="continuation", text=task),)
