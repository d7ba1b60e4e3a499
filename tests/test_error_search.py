"""``cuts.search_error`` finds what ``cuts.ERROR_LINE.search`` finds: the same start, end
and groups (or no match), on random texts made of the pattern's words, line breaks,
whitespace (Unicode's too) and word characters, and on every shipped transcript's and
generated session's message contents."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from hypothesis import given, settings, strategies as st

from ctxsim.cuts import ERROR_LINE, search_error

ROOT = Path(__file__).resolve().parents[1]
PIECES = ["Error", "Exception", "ERROR", "ERRORS", "ERROR:", "ERRORS:", "Traceback (most recent call last)",
          "Traceback (most", "No such file", "command not found", "syntax error", "\n", "\n\n", " ", "  ", "\t",
          "\r", "\x0b", "\x0c", "\x1c", "\xa0", "\u2028", ":", ": ", "x", "Value", "_", "9", "é", "(", ".", "-",
          "raise ", "Key", "Errors", "E", "rror", "Exc"]


def _same(text: str) -> None:
    want, got = ERROR_LINE.search(text), search_error(text)
    assert (want and (want.span(), want.groups())) == (got and (got.span(), got.groups())), text


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40))
def test_random_texts_of_the_patterns_words(pieces):
    _same("".join(pieces))


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=st.sampled_from("Er oExcptinERO:\n \t\x0bTab(msl)Nuhfc_9"), max_size=80))
def test_random_texts_of_their_letters(text):
    _same(text)


def test_hand_picked():
    for text in ["", "Error", "\n\n  \nFooError: x", "x\n \n\tKeyError bad:", "a ERROR: b\nERRORS:", "  \n\nERROR:",
                 "raise FooError(\n    ValueError: no", "No such file\nValueError: x", "x\n\n\nException:"]:
        _same(text)


def test_shipped_transcripts():
    files = sorted([*(ROOT / "data").rglob("*.jsonl"), *(ROOT / "data").rglob("*.jsonl.gz")])
    assert files
    texts = 0
    for path in files:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        for line in raw.decode("utf-8").splitlines():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                _same(content)
                for cut in range(0, len(content), max(1, len(content) // 7)):  # and from inside it
                    _same(content[cut:])
                texts += 1
    assert texts > 1000


def test_generated_sessions():
    from ctxsim.lab.contexts import build_context
    from ctxsim.lab.environments.overflow import ContextOverflowEnv

    matched = 0
    for scenario in ContextOverflowEnv.checked_config().suite[:19]:
        for seed in (0, 1):
            for unit in build_context(scenario, seed).units:
                _same(unit.content)
                matched += ERROR_LINE.search(unit.content) is not None
    assert matched > 50
