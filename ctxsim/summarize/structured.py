"""Structured summaries (design 002) with design 004's "Rules & Constraints" section.

A :class:`StructuredSummary` renders deterministically and byte-stably: a versioned
header, then fixed sections in a fixed order, empty sections omitted::

    [Summary v1 | units u3..u17 | turns 2-9]
    Current task:
    - Ship the billing fix
    Rules & Constraints:
    - Never delete production data.
    Facts:
    - The budget is $1,250.
    Tool outcomes:
    - read_file [success] {"path": "/srv/app.py"}
    Artifacts:
    - art-1: build log (rehydrate: read_artifact("art-1"))

Every item is one ``- `` line; an item holding newlines continues on lines
indented by two spaces. :func:`parse_summary` reads a rendering back (also when
it follows a strategy's own header line), so rules and facts carried by a summary
survive the next summary verbatim: ``parse_summary(s.render()) == s``.

:func:`fit_summary` chooses, from candidates ranked best first, the items whose
rendering fits a token budget, and fills what is left with the longest
word-boundary prefix of the best item that did not fit. Token costs are those of
:func:`ctxsim.tokens.count_tokens`. Every line of a rendering (header, section
title, item) starts with a character that is not whitespace, and cl100k never
puts a line break and the character after it in one piece before merging
(:func:`ctxsim.tokens.count_joined`), so the count of a rendering is the sum of the counts of
its lines, each with its line break, the last without: :func:`summary_tokens`
counts a growing summary from memoized line counts, never re-encoding it.

Also here: :class:`SummaryResult`, what every summarizer returns, and the summary
cache shared by the summarizers (keyed by a sha256 of content and versions).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import islice
from typing import NamedTuple

import numpy as np

from ..cache import LRUCache
from ..tokens import count_tokens, encoding_available

SUMMARY_RENDER_VERSION = "v1"
#: how many of the best skipped texts are tried for the final partial item
CUT_CANDIDATES = 20

#: (field name, title) in render order
SECTIONS: tuple[tuple[str, str], ...] = (
    ("current_task", "Current task"),
    ("rules", "Rules & Constraints"),
    ("facts", "Facts"),
    ("decisions", "Decisions"),
    ("open_items", "Open items"),
    ("tool_outcomes", "Tool outcomes"),
    ("artifacts", "Artifacts"),
    ("notes", "Context"),
)
_FIELD_TO_TITLE = dict(SECTIONS)
_TITLE_TO_FIELD = {f"{title}:": name for name, title in SECTIONS}
_HEADER = re.compile(
    r"^\[Summary (?P<version>v\d+) \| units (?P<first>\S+?)(?:\.\.(?P<last>\S+))? "
    r"\| turns (?P<t0>-?\d+)(?:-(?P<t1>-?\d+))?(?: \| depth (?P<depth>\d+))?\]$"
)
_TOOL_LINE = re.compile(r"^(?P<tool>\S+) \[(?P<outcome>success|failure|partial)\](?P<rest>.*)$", re.DOTALL)
_ARTIFACT_LINE = re.compile(r"^(?P<id>\S+): (?P<description>.*) \(rehydrate: (?P<hint>.*)\)$", re.DOTALL)


@dataclass(frozen=True)
class ToolOutcome:
    """Outcome of one tool call: name, outcome, key fields (sorted) and error."""

    tool_name: str
    outcome: str
    key_fields: tuple[tuple[str, str], ...] = ()
    error: str | None = None

    def line(self) -> str:
        text = f"{self.tool_name} [{self.outcome}]"
        if self.key_fields:
            text += " " + json.dumps(dict(self.key_fields), sort_keys=True, ensure_ascii=False)
        if self.error:
            text += " error: " + json.dumps(self.error, ensure_ascii=False)
        return text

    @classmethod
    def parse(cls, line: str) -> ToolOutcome | None:
        m = _TOOL_LINE.match(line)
        if m is None:
            return None
        rest = m.group("rest")
        fields: tuple[tuple[str, str], ...] = ()
        error = None
        try:
            if rest.startswith(" {"):
                data, end = json.JSONDecoder().raw_decode(rest, 1)
                fields = tuple(sorted((str(k), str(v)) for k, v in data.items()))
                rest = rest[end:]
            if rest.startswith(" error: "):
                error = json.loads(rest[len(" error: ") :])
                rest = ""
        except (ValueError, AttributeError):
            return None
        if rest:
            return None
        return cls(m.group("tool"), m.group("outcome"), fields, error)


@dataclass(frozen=True)
class ArtifactRef:
    """An externalized span: artifact id, description and how to read it back."""

    id: str
    description: str
    rehydrate_hint: str

    def line(self) -> str:
        return f"{self.id}: {self.description} (rehydrate: {self.rehydrate_hint})"

    @classmethod
    def parse(cls, line: str) -> ArtifactRef | None:
        m = _ARTIFACT_LINE.match(line)
        return cls(m.group("id"), m.group("description"), m.group("hint")) if m else None


class SummarySpan(NamedTuple):
    """First and last unit ids and turns a summary covers."""

    first_unit: str
    last_unit: str
    first_turn: int
    last_turn: int


@dataclass(frozen=True)
class StructuredSummary:
    """A drift-resistant summary; items are verbatim text, rules above all."""

    span: SummarySpan
    depth: int = 0
    current_task: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    open_items: tuple[str, ...] = ()
    tool_outcomes: tuple[ToolOutcome, ...] = ()
    artifacts: tuple[ArtifactRef, ...] = ()
    notes: tuple[str, ...] = ()

    def header(self) -> str:
        s = self.span
        units = s.first_unit if s.first_unit == s.last_unit else f"{s.first_unit}..{s.last_unit}"
        turns = str(s.first_turn) if s.first_turn == s.last_turn else f"{s.first_turn}-{s.last_turn}"
        depth = f" | depth {self.depth}" if self.depth else ""
        return f"[Summary {SUMMARY_RENDER_VERSION} | units {units} | turns {turns}{depth}]"

    def render(self) -> str:
        """The summary text (deterministic; no trailing newline)."""
        lines = [self.header()]
        for name, title in SECTIONS:
            items = getattr(self, name)
            if items:
                lines.append(f"{title}:")
                lines.extend(item_lines(item) for item in items)
        return "\n".join(lines)


def item_lines(item: str | ToolOutcome | ArtifactRef) -> str:
    """The rendered lines of one item (without the final newline)."""
    text = item if isinstance(item, str) else item.line()
    return "- " + text.replace("\n", "\n  ")


def parse_summary(text: str) -> StructuredSummary | None:
    """The structured summary rendered in ``text``, or None when there is none.

    The rendering may follow other lines (a strategy's own header); parsing stops
    at the first line that is not a section title, an item or a continuation.
    """
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("[Summary ")), None)
    if start is None:
        return None
    m = _HEADER.match(lines[start])
    if m is None or m.group("version") != SUMMARY_RENDER_VERSION:
        return None
    t0 = int(m.group("t0"))
    span = SummarySpan(m.group("first"), m.group("last") or m.group("first"), t0, int(m.group("t1") or t0))
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines[start + 1 :]:
        if line in _TITLE_TO_FIELD:
            current = sections.setdefault(_TITLE_TO_FIELD[line], [])
        elif line.startswith("- ") and current is not None:
            current.append(line[2:])
        elif line.startswith("  ") and current:
            current[-1] += "\n" + line[2:]
        else:
            break
    values: dict[str, tuple] = {}
    for name, items in sections.items():
        if name == "tool_outcomes":
            parsed = [ToolOutcome.parse(i) for i in items]
        elif name == "artifacts":
            parsed = [ArtifactRef.parse(i) for i in items]
        else:
            parsed = items
        values[name] = tuple(p for p in parsed if p is not None)
    return StructuredSummary(span=span, depth=int(m.group("depth") or 0), **values)


# ---- fitting a budget --------------------------------------------------------------
class Candidate(NamedTuple):
    """An item that may go into a summary: its section, payload and input position
    (a tuple: a long input makes thousands of them per summary)."""

    section: str
    payload: str | ToolOutcome | ArtifactRef
    position: tuple[int, int] = (0, 0)


@lru_cache(maxsize=65_536)
def _line_cost(item: str | ToolOutcome | ArtifactRef) -> int:
    """Tokens of an item's lines with their final line break (once per distinct item):
    of a plain sentence, from the count of the sentence itself (:func:`_sentence_line_cost`)."""
    if isinstance(item, str) and encoding_available():
        cost = _sentence_line_cost(item)
        if cost is not None:
            return cost
    return count_tokens(item_lines(item) + "\n")


_FIRST_WORD = re.compile(r"[A-Za-z]+")
#: the run of ASCII marks (neither letters, digits nor space) a text starts with, and the letters after it
_FIRST_MARKS = re.compile(r"([^ A-Za-z0-9]+)([A-Za-z]*)")
_LAST_MARKS = re.compile(r" ?[^ A-Za-z0-9]+\Z")


def _sentence_line_cost(text: str) -> int | None:
    """Tokens of ``"- " + text + "\n"`` from the counts of ``text``, its first piece and
    its closing marks (all memoized: a summary's sentences were counted for ranking,
    and words and marks recur), for a printable ASCII ``text`` that holds a letter or
    a digit, does not start with a space or ``'`` nor end with a space; else None.

    cl100k's pre-tokenizer cuts such a line into ``-``, the space with what ``text``
    starts with, ``text``'s own pieces between, and its last piece with the line break.
    The space joins a first word (``" word"`` for ``"word"``); before a digit it is a
    piece of its own; before marks it joins them (``" (`` for ``(``), and a single mark
    before letters, one piece with them alone (``"(see"``), leaves them a piece of their
    own. A line break after a letter or digit is a piece of its own, after marks it
    joins them (with the space before them, if any). Byte-pair merges stay within a
    piece, so the pieces' counts add up."""
    if not (text and text.isascii() and text.isprintable()) or text[-1] == " " or text[0] in " '":
        return None
    first = text[0]
    if first.isalpha():
        word = _FIRST_WORD.match(text).group()
        head = 1 + count_tokens(" " + word) - count_tokens(word)  # the marker, then " word" for "word"
    elif first.isdigit():
        head = 2  # the marker, then the space
    else:
        marks, letters = _FIRST_MARKS.match(text).groups()
        if not any(c.isalnum() for c in text[len(marks):]):
            return None  # marks (and spaces) only: the first piece may be the last
        if len(marks) == 1 and letters:  # "(see" alone; " (" and "see" after the marker
            head = 1 + count_tokens(" " + marks) + count_tokens(letters) - count_tokens(marks + letters)
        else:
            head = 1 + count_tokens(" " + marks) - count_tokens(marks)
    if text[-1].isalnum():
        return head + count_tokens(text) + 1
    marks = _LAST_MARKS.search(text).group()
    return head + count_tokens(text) - count_tokens(marks) + count_tokens(marks + "\n")


#: characters ``str.split`` cuts at that cl100k's pre-tokenizer does not take for whitespace
_NOT_WHITESPACE = re.compile("[\x1c-\x1f]")


@lru_cache(maxsize=65_536)
def line_words(item: str | ToolOutcome | ArtifactRef) -> int:
    """A lower bound of :func:`_line_cost` that needs no encoding: the words of the
    item's lines (the marker ``-`` is one). cl100k's pre-tokenizer never puts two
    words (runs without whitespace) in one piece, and each piece is a token or more.
    Python also splits at the separators U+001C..U+001F, which are not whitespace to
    the pre-tokenizer: a text holding one, or any text when counts are estimates, is
    bounded by 0. Once per distinct item, like :func:`_line_cost`."""
    text = item if isinstance(item, str) else item.line()
    if not encoding_available() or _NOT_WHITESPACE.search(text):
        return 0
    return 1 + len(text.split())


def _title_cost(section: str) -> int:
    return count_tokens(_FIELD_TO_TITLE[section] + ":\n")


_SECTION_ORDER = {name: k for k, (name, _) in enumerate(SECTIONS)}


def summary_tokens(base: StructuredSummary, chosen: Sequence[Candidate]) -> int:
    """Exact tokens of ``_assemble(base, chosen).render()``, from the memoized counts
    of its lines (as :func:`~ctxsim.tokens.count_joined` adds pieces: no line starts with
    whitespace)."""
    if not chosen:
        return count_tokens(base.header())
    if not encoding_available():
        return count_tokens(_assemble(base, chosen).render())
    total = count_tokens(base.header() + "\n")
    opened: set[str] = set()
    last = chosen[0]
    for cand in chosen:
        total += _line_cost(cand.payload)
        if cand.section not in opened:
            opened.add(cand.section)
            total += _title_cost(cand.section)
        if (_SECTION_ORDER[cand.section], cand.position) >= (_SECTION_ORDER[last.section], last.position):
            last = cand  # the rendering's last line (sections in order, items by position)
    return total - _line_cost(last.payload) + count_tokens(item_lines(last.payload))


def rendered_tokens(summary: StructuredSummary) -> int:
    """Exact tokens of ``summary.render()``, from the memoized counts of its lines
    (:func:`summary_tokens`)."""
    items = [Candidate(name, item, (0, k)) for name, _ in SECTIONS for k, item in enumerate(getattr(summary, name))]
    return summary_tokens(summary, items)


def prefix_within(text: str, max_tokens: int, cost: Callable[[str], int] = count_tokens) -> str:
    """The longest prefix of ``text`` ending at a word boundary whose cost fits.

    ``cost`` prices a prefix in tokens (default: its own count). Returns "" when not
    even the first word fits.
    """
    if max_tokens <= 0:
        return ""
    if cost(text) <= max_tokens:
        return text
    cuts = [m.start() for m in re.finditer(r"(?<=\S)\s", text)]
    lo, hi, best = 0, len(cuts) - 1, ""
    while lo <= hi:
        mid = (lo + hi) // 2
        piece = text[: cuts[mid]]
        if cost(piece) <= max_tokens:
            best, lo = piece, mid + 1
        else:
            hi = mid - 1
    return best


def cut_within(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` within ``max_tokens`` tokens: at a word boundary
    (:func:`prefix_within`), else — text with no word that fits, such as a base64
    blob or a minified line — at a character."""
    best = prefix_within(text, max_tokens)
    if best or max_tokens <= 0:
        return best
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def fit_candidates(
    ranked: Sequence[Candidate],
    target_tokens: int,
    *,
    fixed_cost: int,
    marginal: Callable[[Candidate, set[str]], int],
    tokens: Callable[[list[Candidate]], int],
    least: Callable[[Candidate, set[str]], int] = lambda cand, opened: 0,
    fill_ratio: float = 0.95,
    floors: np.ndarray | None = None,
) -> list[Candidate] | None:
    """The candidates (best first) whose rendering fits ``target_tokens``.

    ``fixed_cost`` is the cost of an empty rendering, ``marginal(c, opened)`` what
    candidate ``c`` adds given the sections already opened (an upper bound: the
    tokenizer may merge across a line break, never split more), ``tokens(chosen)``
    the exact count of the rendering of ``chosen`` (counted from memoized pieces by
    the callers: the growing rendering is never re-encoded), ``least(c, opened)`` a
    lower bound of ``marginal`` that needs no encoding: a candidate whose bound
    does not fit is skipped without pricing it (the choice is the same; a long
    input leaves most candidates so). ``floors`` (one number per candidate of
    ``ranked``, default 0) bounds ``least`` from below whatever the sections
    opened: a candidate whose floor does not fit is skipped without being read
    (``ranked`` may build its items on demand). Candidates are tried best first and skipped
    when they do not fit. While the exact count of the
    rendering is under ``fill_ratio`` of the budget, the best skipped candidate that
    fits whole is added, else (once) the word-boundary prefix that fills the room
    best among the ``CUT_CANDIDATES`` best skipped texts. The rendering never
    exceeds the budget. None when not even the empty rendering fits.
    """
    if fixed_cost > target_tokens:
        return None
    floor = np.zeros(len(ranked)) if floors is None else np.asarray(floors, dtype=np.float64)
    used = fixed_cost
    chosen: list[Candidate] = []
    taken: list[int] = []
    opened: set[str] = set()
    floor_of = floor.tolist()
    # ``used`` only grows: a candidate whose floor does not fit the empty rendering never fits
    for j in np.flatnonzero(floor <= target_tokens - used).tolist():
        if used + floor_of[j] > target_tokens:
            continue
        cand = ranked[j]
        if used + least(cand, opened) > target_tokens:
            continue
        extra = marginal(cand, opened)
        if used + extra <= target_tokens:
            chosen.append(cand)
            taken.append(j)
            opened.add(cand.section)
            used += extra
    skipped = np.ones(len(ranked), dtype=bool)
    skipped[taken] = False
    left = np.flatnonzero(skipped)  # every candidate not chosen, best first
    cut_made = False
    while True:
        exact = tokens(chosen)
        if exact > target_tokens:  # only when an estimate was too low: drop the last choices
            while chosen and tokens(chosen) > target_tokens:
                chosen.pop()
            return chosen
        if exact >= fill_ratio * target_tokens or not len(left):
            return chosen
        room = target_tokens - exact
        opened = {c.section for c in chosen}
        addition = None
        for k in np.flatnonzero(floor[left] <= room).tolist():
            cand = ranked[int(left[k])]
            if least(cand, opened) <= room and marginal(cand, opened) <= room:
                addition = cand
                left = np.delete(left, k)
                break
        if addition is None and not cut_made:
            texts = (ranked[j] for j in left.tolist())
            addition = _best_cut(list(islice((c for c in texts if isinstance(c.payload, str)), CUT_CANDIDATES)),
                                 room, opened, marginal)
            cut_made = True
        if addition is None:
            return chosen
        chosen.append(addition)


def _best_cut(
    texts: Sequence[Candidate], room: int, opened: set[str], marginal: Callable[[Candidate, set[str]], int]
) -> Candidate | None:
    """The word-boundary prefix that fills ``room`` best, among ``texts`` (the best
    skipped candidates with a text payload, best first)."""
    best, best_cost = None, 0
    for cand in texts:
        piece = prefix_within(cand.payload, room, lambda p, c=cand: marginal(c._replace(payload=p), opened))
        if piece:
            cost = marginal(cand._replace(payload=piece), opened)
            if cost > best_cost:
                best, best_cost = cand._replace(payload=piece), cost
                if cost == room:
                    break
    return best


def fit_summary(
    base: StructuredSummary,
    ranked: Sequence[Candidate],
    target_tokens: int,
    *,
    fill_ratio: float = 0.95,
    floors: np.ndarray | None = None,
) -> StructuredSummary | None:
    """``base`` (span, depth) filled with the best candidates that fit the budget.

    See :func:`fit_candidates`; ``floors``, when given, holds the word bound of each
    candidate's lines (:func:`line_words`). Items render in input order within their
    section. None when not even the header fits.
    """

    def marginal(cand: Candidate, opened: set[str]) -> int:
        return _line_cost(cand.payload) + (0 if cand.section in opened else _title_cost(cand.section))

    def least(cand: Candidate, opened: set[str]) -> int:
        return line_words(cand.payload) + (0 if cand.section in opened else _title_cost(cand.section))

    chosen = fit_candidates(
        ranked,
        target_tokens,
        fixed_cost=count_tokens(base.header() + "\n"),
        marginal=marginal,
        tokens=lambda cands: summary_tokens(base, cands),
        least=least,
        fill_ratio=fill_ratio,
        floors=floors,
    )
    return None if chosen is None else _assemble(base, chosen)


def _assemble(base: StructuredSummary, chosen: Sequence[Candidate]) -> StructuredSummary:
    by_section: dict[str, list[Candidate]] = {}
    for cand in chosen:
        by_section.setdefault(cand.section, []).append(cand)
    values = {
        name: tuple(c.payload for c in sorted(cands, key=lambda c: c.position)) for name, cands in by_section.items()
    }
    return replace(base, **values)


# ---- results and cache ----------------------------------------------------------
@dataclass(frozen=True)
class SummaryResult:
    """What a summarizer returns. Token counts are cl100k tokens of the text(s)."""

    text: str
    structured: StructuredSummary | None
    token_count: int
    input_tokens: int
    cache_hit: bool = False


SUMMARY_CACHE: LRUCache[str, SummaryResult] = LRUCache(4096)


def cache_key(*parts: object) -> str:
    """sha256 of the parts (content, versions, parameters) joined unambiguously."""
    digest = hashlib.sha256()
    for part in parts:
        data = str(part).encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def cached(key: str, compute: Callable[[], SummaryResult]) -> SummaryResult:
    """The cached result for ``key`` (with ``cache_hit=True``) or a new one, stored."""
    hit = SUMMARY_CACHE.get(key)
    if hit is not None:
        return replace(hit, cache_hit=True)
    result = compute()
    SUMMARY_CACHE.put(key, result)
    return result
