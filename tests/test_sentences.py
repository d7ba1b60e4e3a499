"""The sentence splitter's scans against their plain definitions: line by line, every
non-blank line of ``str.splitlines`` stripped; fences found by their markers; a wrapped
prose block ends at a line ending with ``:``."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.sentences import Segment, segments, split_sentences

#: pieces that stress line breaks (every one ``str.splitlines`` knows), whitespace that is
#: not a break (``\x1f``, no-break space), code and prose openings
PARTS = ["word", "Word", "x1", "42", ".", ":", " ", "  ", "    ", "\t", "\n", "\n\n", "\r\n", "\r", "\v", "\f", "\x1c",
         "\x1d", "\x1e", "\x1f", "\x85", "\u2028", "\u2029", "\u00a0", "- ", "1. ", "```", " ~~~", "def f():", "{", ";",
         "ERROR", "e.g.", "é", "🙂", "lower"]


def _plain_lines(text: str) -> list[Segment]:
    """Every non-blank line of ``text``, stripped, as a code segment (the definition)."""
    out, pos = [], 0
    for line in text.splitlines(keepends=True):
        body = line.splitlines()[0] if line.splitlines() else ""
        if body.strip():
            lead = len(body) - len(body.lstrip())
            out.append((pos + lead, pos + len(body.rstrip()), True))
        pos += len(line)
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PARTS), max_size=40).map("".join) | st.text(max_size=200))
def test_lines_are_the_stripped_non_blank_lines(text):
    found = segments(text, by_line=True)
    assert list(found) == _plain_lines(text)
    assert all(type(s) is tuple for s in found)  # plain: the collector stops tracking them


def test_lines_of_random_texts_are_the_stripped_non_blank_lines():
    rng = random.Random(5)
    for _ in range(5_000):
        text = "".join(rng.choices(PARTS, k=rng.randint(0, 40)))
        assert list(segments(text, by_line=True)) == _plain_lines(text)


def test_a_fence_is_found_by_its_marker_after_any_indentation():
    text = "Intro line.\n   ```python\nx = 1  # not prose. Really.\n\t~~~\nAfter the fence. Second one."
    assert split_sentences(text) == ["Intro line.", "```python", "x = 1  # not prose. Really.", "~~~",
                                     "After the fence.", "Second one."]
    assert [code for _, _, code in segments(text)] == [False, True, True, True, False, False]


def test_wrapped_prose_stops_after_a_line_ending_with_a_colon():
    # the colon ends the block's last line, not its first: the block goes on until it does
    assert split_sentences("We did\nthis:\nand more") == ["We did\nthis:", "and more"]
    assert split_sentences("Notes:  \nfirst item\nsecond item") == ["Notes:", "first item\nsecond item"]
    assert split_sentences("Plan: ship\nit today") == ["Plan: ship\nit today"]


def test_a_fence_nothing_closes_opens_no_block():
    """An extract that kept a fence's opening line but not its closing one: the fence
    line is a code line of its own, and the prose after it (here a user rule) is prose."""
    text = "The code:\n```python\ndef f(x):\nYou must keep the public signature of f unchanged. Do it now."
    assert split_sentences(text) == ["The code:", "```python", "def f(x):",
                                     "You must keep the public signature of f unchanged.", "Do it now."]
    assert [code for _, _, code in segments(text)] == [False, True, True, False, False]
    # a closed fence still holds its lines, and a later fence left open opens nothing
    closed = "```\nNot prose. At all.\n```\nProse. Again.\n~~~\nLast words. Here."
    assert [code for _, _, code in segments(closed)] == [True, True, True, False, False, True, False, False]


def test_a_text_extract_holds_no_fence_marker_line():
    """The extractive text summary never keeps a fence's marker line: kept alone (or joined
    to the prose after it) it would make the rest of the extract read as code."""
    from ctxsim.summarize import get_summarizer

    prose = " ".join(f"Step {i} of the plan changes the export of the invoice totals." for i in range(30))
    text = f"{prose}\n\n```python\ndivision(23, 0)\n```\n\nbut I get an error.\n\n```\nSyntaxError: invalid syntax\n```\n\n{prose}"
    extract = get_summarizer("extractive").summarize_text(text, 120).text
    assert extract and all(not line.lstrip().startswith(("```", "~~~")) for line in extract.splitlines())
    assert [code for _, _, code in segments(extract)].count(True) <= 2  # at most the two code lines, never a fenced rest


#: the sentence-end pattern as first written: a run of ``.!?`` or one ``…``, closers, whitespace
_PLAIN_BOUNDARY = r"(?:[.!?]+|…)[\"'”’)\]]*(?=\s)"
#: pieces around sentence ends: mark runs, ellipses, every closer, whitespace, words
BOUNDARY_PARTS = [".", "..", "!", "?", "?!", "…", "……", ".…", "…!", '"', "'", "”", "’", ")", "]", "(", " ", "\n", "\t",
                  "\u00a0", "word", "Word", "x", "1", "e.g.", "Mr."]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(BOUNDARY_PARTS), max_size=24).map("".join) | st.text(max_size=60))
def test_sentence_ends_are_those_of_the_plain_pattern(text):
    """The sentence-end scan finds exactly the matches (spans and text) of the plain
    two-way pattern, so every split is the same."""
    import re

    from ctxsim.sentences import _BOUNDARY

    plain = re.compile(_PLAIN_BOUNDARY)
    assert [(m.span(), m.group()) for m in _BOUNDARY.finditer(text)] == [
        (m.span(), m.group()) for m in plain.finditer(text)]
